"""The tuning store: every measurement ever taken, and the current best config per task.

Picture a training job whose leader rank times a candidate config every few iterations and
calls ``store.add(measurement)`` after each: the row lands in ``history`` and, in the same
transaction, becomes the ``best`` of its (hardware, task, communicator) if it beats the one
there. Meanwhile ``ccltwin store show`` in another terminal reads both tables. If the job is
killed, every ``add`` that returned is on disk.

How that is guaranteed:

* **WAL journal** (``PRAGMA journal_mode=WAL``): readers see the last committed state and never
  block the writer or each other; a crash mid-transaction leaves an uncommitted WAL tail that
  SQLite discards on the next open.
* **synchronous=FULL**: each commit waits for the WAL to reach the disk, so a committed
  measurement survives an OS crash or power loss, not only a killed process (``NORMAL``
  guarantees the latter only). A live measurement costs iterations of a training job, and one
  fsync per commit (a few milliseconds) is small next to that; bulk loads use ``add_many``
  (one transaction, one fsync).
* The history insert and the best upsert share one ``BEGIN IMMEDIATE`` transaction.

``best`` only considers measured times (``live``, ``nccl-tests``) with a known config; twin
predictions are kept in history for calibration but never become winners. When a tuning session
ends, its winner, scored over repeated samples, replaces whichever single sample led
(``set_best``). The schema has a
version row; a store written by a newer ccltwin is refused rather than misread.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable
from os import PathLike
from pathlib import Path

from traces.errors import CcltwinError
from traces.task import Op, Task
from tuner.config import Algo, Config, Proto, Transport
from tuner.measurement import Measurement

__all__ = ["SCHEMA_VERSION", "Store", "StoreError"]

SCHEMA_VERSION = 1
WINNER_SOURCES = ("live", "nccl-tests")
"""Sources whose times compete for ``best`` (measured, not predicted)."""

_SCHEMA = """
CREATE TABLE schema_version (version INTEGER NOT NULL);
CREATE TABLE history (
    id           INTEGER PRIMARY KEY,
    hardware     TEXT    NOT NULL,
    op           TEXT    NOT NULL,
    nbytes       INTEGER NOT NULL,
    nranks       INTEGER NOT NULL,
    dtype        TEXT    NOT NULL,
    task_group   TEXT    NOT NULL,
    comm         TEXT    NOT NULL,
    algo         TEXT,                 -- config columns: all NULL when NCCL chose (see env)
    proto        TEXT,
    transport    TEXT,
    nchannels    INTEGER,
    nthreads     INTEGER,
    chunk_bytes  INTEGER,
    time_us      REAL    NOT NULL CHECK (time_us > 0),
    source       TEXT    NOT NULL,
    nccl_version TEXT    NOT NULL,
    interference REAL    NOT NULL,
    env          TEXT    NOT NULL,     -- JSON object of NCCL_* variables
    occurrence   INTEGER,
    measured_at  REAL,
    recorded_at  REAL    NOT NULL
);
CREATE INDEX history_by_task ON history (op, nbytes, nranks, dtype, task_group);
CREATE TABLE best (
    hardware     TEXT    NOT NULL,
    op           TEXT    NOT NULL,
    nbytes       INTEGER NOT NULL,
    nranks       INTEGER NOT NULL,
    dtype        TEXT    NOT NULL,
    task_group   TEXT    NOT NULL,
    comm         TEXT    NOT NULL,
    history_id   INTEGER NOT NULL REFERENCES history (id),
    time_us      REAL    NOT NULL,
    PRIMARY KEY (hardware, op, nbytes, nranks, dtype, task_group, comm)
);
"""

_KEY = "hardware, op, nbytes, nranks, dtype, task_group, comm"
_COLUMNS = (f"{_KEY}, algo, proto, transport, nchannels, nthreads, chunk_bytes, time_us, source, nccl_version, "
            "interference, env, occurrence, measured_at")
_INSERT_HISTORY = f"INSERT INTO history ({_COLUMNS}, recorded_at) VALUES ({', '.join('?' * (_COLUMNS.count(',') + 2))})"
_SET_BEST = f"""
INSERT INTO best ({_KEY}, history_id, time_us) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT ({_KEY}) DO UPDATE SET history_id = excluded.history_id, time_us = excluded.time_us
"""
_UPSERT_BEST = _SET_BEST + "WHERE excluded.time_us < best.time_us\n"


class StoreError(CcltwinError):
    """A store that cannot be opened or used: names the file and the problem."""


class Store:
    """A SQLite tuning store at ``path`` (created with ``create=True`` when missing).

    One ``Store`` is one connection, for use from the thread that opened it; open one per
    process or thread. Use it as a context manager or call ``close``.
    """

    def __init__(self, path: str | PathLike[str], *, create: bool = True) -> None:
        self.path = str(path)
        if Path(self.path).is_dir():
            raise StoreError(f"{self.path}: is a directory, not a store file")
        if not create and not Path(self.path).is_file():
            raise StoreError(f"{self.path}: no such store")
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None, timeout=30.0)
        except sqlite3.Error as err:
            raise StoreError(f"{self.path}: cannot open the store ({err})") from None
        try:
            mode = self._db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if mode != "wal":
                raise StoreError(f"{self.path}: this file system does not support SQLite's WAL mode (got {mode})")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._check_schema()
        except sqlite3.DatabaseError as err:
            self._db.close()
            raise StoreError(f"{self.path}: not a ccltwin store ({err})") from None
        except StoreError:
            self._db.close()
            raise

    def _check_schema(self) -> None:
        tables = {row[0] for row in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "schema_version" not in tables:
            if tables:
                raise StoreError(f"{self.path}: an SQLite file but not a ccltwin store (tables: {', '.join(tables)})")
            with self._transaction():
                if not self._db.execute("SELECT 1 FROM sqlite_master WHERE name = 'schema_version'").fetchone():
                    for statement in _SCHEMA.split(";"):
                        if statement.strip():
                            self._db.execute(statement)
                    self._db.execute("INSERT INTO schema_version VALUES (?)", (SCHEMA_VERSION,))
        version = self._db.execute("SELECT version FROM schema_version").fetchone()
        if version is None or version[0] != SCHEMA_VERSION:
            found = "none" if version is None else version[0]
            raise StoreError(f"{self.path}: store schema version {found}; this ccltwin reads version {SCHEMA_VERSION}")

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _transaction(self):
        return _Transaction(self._db)

    # ---- writing ----------------------------------------------------------------------------

    def add(self, measurement: Measurement) -> int:
        """Record one measurement (and maybe a new best); returns its history id once committed."""
        return self.add_many([measurement])[0]

    def add_many(self, measurements: Iterable[Measurement]) -> list[int]:
        """Record several measurements in one transaction: all of them, or none on any error."""
        now = time.time()
        ids = []
        with self._transaction():
            for m in measurements:
                row = _row(m)
                cursor = self._db.execute(_INSERT_HISTORY, (*row, now))
                ids.append(cursor.lastrowid)
                if m.config is not None and m.source in WINNER_SOURCES:
                    self._db.execute(_UPSERT_BEST, (*row[:7], cursor.lastrowid, m.time_us))
        return ids

    def add_unseen(self, measurements: Iterable[Measurement]) -> list[Measurement]:
        """Record, in one transaction, the measurements not in history yet (equal in everything but
        when they were stored), each once; returns those recorded. Importing a log again adds nothing."""
        measurements = list(measurements)
        seen = {_identity(m) for h in {m.hardware for m in measurements} for m in self.history(hardware=h)}
        new = []
        for m in measurements:
            if (identity := _identity(m)) not in seen:
                seen.add(identity)
                new.append(m)
        self.add_many(new)
        return new

    def set_best(self, winner: Measurement) -> bool:
        """Make ``winner`` the best of its task on its hardware and communicator, whatever was there:
        a tuning session's verdict, its config with its score over the samples (``time_us``), which
        outranks any one sample. It points at the latest history row of that config; only measured
        sources with a config can win (``WINNER_SOURCES``), and the return value says whether it did."""
        if winner.config is None or winner.source not in WINNER_SOURCES:
            return False
        row = _row(winner)
        with self._transaction():
            found = self._db.execute(
                f"SELECT id FROM history WHERE ({_KEY}, algo, proto, transport, nchannels, nthreads, chunk_bytes, "
                "source) = (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ORDER BY id DESC LIMIT 1",
                (*row[:13], winner.source)).fetchone()
            if found is None:
                raise StoreError(f"{self.path}: no {winner.source} measurement of {winner.config} for "
                                 f"{winner.task} in history to make the best")
            self._db.execute(_SET_BEST, (*row[:7], found[0], winner.time_us))
        return True

    # ---- reading ----------------------------------------------------------------------------

    def count(self) -> int:
        """Rows in history."""
        return self._db.execute("SELECT count(*) FROM history").fetchone()[0]

    def hardware_ids(self) -> list[str]:
        """Every hardware id in history, sorted."""
        return [row[0] for row in self._db.execute("SELECT DISTINCT hardware FROM history ORDER BY hardware")]

    def history(self, task: Task | None = None, *, hardware: str | None = None) -> list[Measurement]:
        """Measurements in the order they were recorded, of one task and/or one hardware id."""
        where, args = _filters(task, hardware, "")
        rows = self._db.execute(f"SELECT {_COLUMNS} FROM history {where} ORDER BY id", args)
        return [_measurement(row) for row in rows]

    def best(self, task: Task, *, hardware: str, comm: str = "") -> Measurement | None:
        """The winning measurement of ``task`` on ``hardware`` and communicator ``comm``."""
        rows = self.bests(hardware=hardware, task=task, comm=comm)
        return rows[0] if rows else None

    def bests(self, *, hardware: str | None = None, task: Task | None = None,
              comm: str | None = None) -> list[Measurement]:
        """Current winners, ordered by hardware, op, size, ranks, group and communicator; each is
        the history row it points at, with the winner's time."""
        where, args = _filters(task, hardware, "b.")
        if comm is not None:
            where += (" AND " if where else "WHERE ") + "b.comm = ?"
            args.append(comm)
        # the winner's time is the best's: one sample's, or a tuning session's score (``set_best``)
        columns = ", ".join("b.time_us" if c.strip() == "time_us" else f"h.{c.strip()}" for c in _COLUMNS.split(","))
        rows = self._db.execute(
            f"SELECT {columns} FROM best b JOIN history h ON h.id = b.history_id {where} "
            "ORDER BY b.hardware, b.op, b.nbytes, b.nranks, b.dtype, b.task_group, b.comm", args)
        return [_measurement(row) for row in rows]

    def integrity_check(self) -> str:
        """SQLite's ``PRAGMA integrity_check`` verdict (``"ok"`` when the file is sound)."""
        return self._db.execute("PRAGMA integrity_check").fetchone()[0]

    @property
    def journal_mode(self) -> str:
        return self._db.execute("PRAGMA journal_mode").fetchone()[0]


class _Transaction:
    """``BEGIN IMMEDIATE`` … ``COMMIT``, rolled back on any exception."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind, value, traceback) -> None:
        self.db.execute("ROLLBACK" if kind else "COMMIT")


def _filters(task: Task | None, hardware: str | None, prefix: str) -> tuple[str, list]:
    clauses, args = [], []
    if hardware is not None:
        clauses.append(f"{prefix}hardware = ?")
        args.append(hardware)
    if task is not None:
        clauses.append(f"{prefix}op = ? AND {prefix}nbytes = ? AND {prefix}nranks = ? AND {prefix}dtype = ? "
                       f"AND {prefix}task_group = ?")
        args += [task.op.value, task.nbytes, task.nranks, task.dtype, task.group]
    return ("WHERE " + " AND ".join(clauses) if clauses else ""), args


def _row(m: Measurement) -> tuple:
    t, c = m.task, m.config
    config = ((None,) * 6 if c is None else
              (c.algo.value, c.proto.value, c.transport.value, c.nchannels, c.nthreads, c.chunk_bytes))
    return (m.hardware, t.op.value, t.nbytes, t.nranks, t.dtype, t.group, m.comm, *config, m.time_us, m.source,
            m.nccl_version, m.interference, json.dumps(m.env, sort_keys=True), m.occurrence, m.timestamp)


def _identity(m: Measurement) -> str:
    """What makes two rows the same measurement (everything but when it was stored)."""
    return json.dumps({k: v for k, v in m.to_dict().items() if k != "timestamp"}, sort_keys=True)


def _measurement(row: tuple) -> Measurement:
    (hardware, op, nbytes, nranks, dtype, group, comm, algo, proto, transport, nchannels, nthreads, chunk_bytes,
     time_us, source, nccl_version, interference, env, occurrence, measured_at) = row
    config = None if algo is None else Config(Algo(algo), Proto(proto), Transport(transport), nchannels, nthreads,
                                              chunk_bytes)
    return Measurement(task=Task(Op(op), nbytes, nranks, dtype, group), config=config, time_us=time_us,
                       source=source, hardware=hardware, nccl_version=nccl_version, interference=interference,
                       env=json.loads(env), comm=comm, occurrence=occurrence, timestamp=measured_at)
