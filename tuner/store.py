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
(``set_best``). The schema has a version row; a store written by a newer ccltwin is refused
rather than misread, and a version-1 store is migrated on open (read as it is where the file
cannot be written). ``add_unseen`` (log imports) checks for rows already there inside its write
transaction, and each imported row carries a key that a UNIQUE index makes the database itself
refuse twice, so two processes importing the same log at once add it once. A damaged file (corrupt
pages, a missing table, a row ccltwin cannot read) is a ``StoreError`` naming the store, the
damage and how to recover. ``hardware`` holds the cluster's identity (``tuner.identity``); rows a
previous version wrote under another name for the cluster (``twin:dgx-h100``) are read, filtered
and listed as ``normalise_identity`` names them, and the file is left as it was.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Iterable
from os import PathLike
from pathlib import Path

from traces.errors import CcltwinError
from traces.task import Op, Task
from tuner.config import Algo, Config, Proto, Transport
from tuner.identity import normalise_identity
from tuner.measurement import Measurement

__all__ = ["SCHEMA_VERSION", "Store", "StoreError"]

SCHEMA_VERSION = 2
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
    recorded_at  REAL    NOT NULL,
    import_key   TEXT                  -- set by add_unseen: the row's identity, at most once
);
CREATE INDEX history_by_task ON history (op, nbytes, nranks, dtype, task_group);
CREATE UNIQUE INDEX history_import_key ON history (import_key);
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
_INSERT_UNSEEN = (f"INSERT INTO history ({_COLUMNS}, recorded_at, import_key) "
                  f"VALUES ({', '.join('?' * (_COLUMNS.count(',') + 3))}) ON CONFLICT (import_key) DO NOTHING")
_TABLES = frozenset({"schema_version", "history", "best"})
_MIGRATE_1_TO_2 = ("ALTER TABLE history ADD COLUMN import_key TEXT",
                   "CREATE UNIQUE INDEX history_import_key ON history (import_key)")
_RECOVER = ("check it with `sqlite3 {path} 'PRAGMA integrity_check'`, save what is readable with "
            "`sqlite3 {path} .recover > saved.sql` (or `ccltwin store show {path} --history --json`), "
            "then import into a new store")
_SET_BEST = f"""
INSERT INTO best ({_KEY}, history_id, time_us) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT ({_KEY}) DO UPDATE SET history_id = excluded.history_id, time_us = excluded.time_us
"""
_UPSERT_BEST = _SET_BEST + "WHERE excluded.time_us < best.time_us\n"


FULL_CHECK_BYTES = 16 << 20
"""Stores up to this size (file and write-ahead log) get SQLite's full integrity check each time
they are opened for reading; larger ones its quick check, which verifies every page, record and
free list but not that each index agrees with its table, at a fifth of the cost (a 41 MB store of
300,000 rows: 0.93 s full, 0.17 s quick, development VM). ``full_check=True`` forces the full one."""


class StoreError(CcltwinError):
    """A store that cannot be opened or used: names the file and the problem."""


class Store:
    """A SQLite tuning store at ``path`` (created with ``create=True`` when missing).

    One ``Store`` is one connection, for use from the thread that opened it; open one per
    process or thread. Use it as a context manager or call ``close``: a store this ``Store``
    created that is still empty when its ``with`` block fails is removed again, so a failed
    import leaves no empty store behind. A store on a file system or file that cannot be
    written opens read-only (``read_only``): reading works, writing is a ``StoreError``.
    """

    def __init__(self, path: str | PathLike[str], *, create: bool = True, full_check: bool | None = None) -> None:
        self.path = str(path)
        file = Path(self.path)
        if file.is_dir():
            raise StoreError(f"{self.path}: is a directory, not a store file")
        existed = file.exists()
        if not create and not file.is_file():
            raise StoreError(f"{self.path}: no such store")
        if existed and file.is_file() and file.stat().st_size == 0 and not create:
            raise StoreError(f"{self.path}: an empty (0-byte) file, not a ccltwin store; remove it, or give "
                             "another path")
        self.created = not existed
        self.read_only = existed and not (os.access(self.path, os.W_OK) and os.access(file.parent, os.W_OK))
        self.version = SCHEMA_VERSION
        try:
            self._db = self._connect()
        except sqlite3.Error as err:
            raise StoreError(f"{self.path}: cannot open the store ({err})") from None
        try:
            if not self.read_only:
                mode = self._db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
                if mode != "wal":
                    raise StoreError(f"{self.path}: this file system does not support SQLite's WAL mode (got {mode})")
                self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._db.create_function("identity", 1, normalise_identity, deterministic=True)
            self._check_schema()
            if not self.created:  # before reading or writing what is there
                self._check_integrity(full_check)
        except (sqlite3.DatabaseError, UnicodeDecodeError) as err:  # SQLite decodes damaged text as UTF-8
            self._db.close()
            raise self._damage(err) from None
        except StoreError:
            self._db.close()
            raise

    def _check_integrity(self, full: bool | None) -> None:
        """Before using a store that was there: SQLite's integrity check of every page and
        index (its quick check beyond ``FULL_CHECK_BYTES`` unless ``full``), so a damaged file is
        reported rather than half read."""
        if full is None:
            wal = Path(self.path + "-wal")
            size = Path(self.path).stat().st_size + (wal.stat().st_size if wal.is_file() else 0)
            full = size <= FULL_CHECK_BYTES
        pragma = "integrity_check(1)" if full else "quick_check(1)"
        verdict = " ".join(self._db.execute(f"PRAGMA {pragma}").fetchone()[0].split())
        if verdict != "ok":
            raise StoreError(f"{self.path}: the store is damaged ({verdict}); " + _RECOVER.format(path=self.path))

    def _connect(self) -> sqlite3.Connection:
        if not self.read_only:
            return sqlite3.connect(self.path, isolation_level=None, timeout=30.0)
        uri = Path(self.path).resolve().as_uri()
        try:  # a read-only file still shares the WAL index with its writers when it can
            db = sqlite3.connect(f"{uri}?mode=ro", uri=True, isolation_level=None, timeout=30.0)
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return db
        except sqlite3.OperationalError:  # a read-only file system: nobody can be writing it
            return sqlite3.connect(f"{uri}?immutable=1", uri=True, isolation_level=None, timeout=30.0)

    def _damage(self, err: sqlite3.Error | UnicodeDecodeError) -> StoreError:
        """The error for a store SQLite or ccltwin cannot read: which store, what, how to recover."""
        text = " ".join(str(err).split())
        if isinstance(err, sqlite3.DatabaseError) and "not a database" in text:
            return StoreError(f"{self.path}: not a ccltwin store ({text})")
        if isinstance(err, sqlite3.OperationalError) and "readonly" in text:
            return StoreError(f"{self.path}: the store cannot be written ({text}); check the file's permissions "
                              "and the file system, or copy it somewhere writable")
        if isinstance(err, sqlite3.OperationalError) and "locked" in text:
            return StoreError(f"{self.path}: the store is locked by another process ({text}); try again")
        return StoreError(f"{self.path}: the store is damaged ({text}); " + _RECOVER.format(path=self.path))

    def _check_schema(self) -> None:
        tables = {row[0] for row in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "schema_version" not in tables:
            if tables:
                raise StoreError(f"{self.path}: an SQLite file but not a ccltwin store (tables: {', '.join(tables)})")
            if self.read_only:
                raise StoreError(f"{self.path}: an empty SQLite file that cannot be written, not a ccltwin store")
            with self._transaction():
                if not self._db.execute("SELECT 1 FROM sqlite_master WHERE name = 'schema_version'").fetchone():
                    for statement in _SCHEMA.split(";"):
                        if statement.strip():
                            self._db.execute(statement)
                    self._db.execute("INSERT INTO schema_version VALUES (?)", (SCHEMA_VERSION,))
            tables = set(_TABLES)
        version = self._db.execute("SELECT version FROM schema_version").fetchone()
        if version is None or not isinstance(version[0], int) or version[0] < 1:
            found = "none" if version is None else repr(version[0])
            raise StoreError(f"{self.path}: the store is damaged (schema version {found}); "
                             + _RECOVER.format(path=self.path))
        if version[0] > SCHEMA_VERSION:
            raise StoreError(f"{self.path}: store schema version {version[0]}, written by a newer ccltwin; this "
                             f"ccltwin reads versions up to {SCHEMA_VERSION}: upgrade ccltwin to read it")
        if missing := _TABLES - tables:
            raise StoreError(f"{self.path}: the store is damaged (table {', '.join(sorted(missing))} is missing); "
                             + _RECOVER.format(path=self.path))
        self.version = version[0]
        if self.version == 1 and not self.read_only:
            self._migrate_from_1()

    def _migrate_from_1(self) -> None:
        """Add the import key (schema 2): the first row of each identity gets it, so importing a
        log that is already there adds nothing, also after the upgrade."""
        with self._transaction():
            if self._db.execute("SELECT version FROM schema_version").fetchone()[0] != 1:
                self.version = SCHEMA_VERSION  # another process migrated it first
                return
            for statement in _MIGRATE_1_TO_2:
                self._db.execute(statement)
            seen = set()
            for row_id, *row in self._db.execute(f"SELECT id, {_COLUMNS} FROM history ORDER BY id").fetchall():
                key = _import_key(self._read_row(row, row_id))
                if key not in seen:
                    seen.add(key)
                    self._db.execute("UPDATE history SET import_key = ? WHERE id = ?", (key, row_id))
            self._db.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION,))
        self.version = SCHEMA_VERSION

    def _read_row(self, row: tuple, row_id: int | None = None) -> Measurement:
        try:
            return _measurement(row)
        except (ValueError, TypeError) as err:  # a value this ccltwin does not know (an op, a source)
            which = f"history row {row_id}" if row_id is not None else f"a row of {row[1]!r} at {row[2]} bytes"
            raise StoreError(f"{self.path}: {which} cannot be read ({err}); "
                             + _RECOVER.format(path=self.path)) from None

    def _query(self, sql: str, args: Iterable = ()) -> list[tuple]:
        try:
            return self._db.execute(sql, tuple(args)).fetchall()
        except (sqlite3.DatabaseError, UnicodeDecodeError) as err:
            raise self._damage(err) from None

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, kind, value, traceback) -> None:
        empty = kind is not None and self.created and self._is_empty()
        self.close()
        if empty:
            for suffix in ("", "-wal", "-shm"):
                Path(self.path + suffix).unlink(missing_ok=True)

    def _is_empty(self) -> bool:
        try:
            return self._db.execute("SELECT count(*) FROM history").fetchone()[0] == 0
        except sqlite3.Error:
            return False

    def _transaction(self):
        if self.read_only:
            raise StoreError(f"{self.path}: the store cannot be written (read-only file or file system); copy it "
                             "somewhere writable")
        return _Transaction(self)

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
                row = _checked_row(m, self.path)
                cursor = self._db.execute(_INSERT_HISTORY, (*row, now))
                ids.append(cursor.lastrowid)
                if m.config is not None and m.source in WINNER_SOURCES:
                    self._db.execute(_UPSERT_BEST, (*row[:7], cursor.lastrowid, m.time_us))
        return ids

    def add_unseen(self, measurements: Iterable[Measurement]) -> list[Measurement]:
        """Record, in one transaction, the measurements not in history yet (equal in everything but
        when they were stored), each once; returns those recorded. Importing a log again adds nothing,
        also when two processes import it at the same time: the check runs inside the write
        transaction, and the UNIQUE import key makes the database refuse a second copy."""
        measurements = list(measurements)
        now = time.time()
        new = []
        with self._transaction():
            seen = {_import_key(m) for h in {m.hardware for m in measurements} for m in self.history(hardware=h)}
            for m in measurements:
                if (key := _import_key(m)) in seen:
                    continue
                seen.add(key)
                row = _checked_row(m, self.path)
                cursor = self._db.execute(_INSERT_UNSEEN, (*row, now, key))
                if cursor.rowcount == 1:
                    new.append(m)
                    if m.config is not None and m.source in WINNER_SOURCES:
                        self._db.execute(_UPSERT_BEST, (*row[:7], cursor.lastrowid, m.time_us))
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
        return self._query("SELECT count(*) FROM history")[0][0]

    def hardware_ids(self, *, measured: bool = False) -> list[str]:
        """Every hardware id in history, sorted; ``measured``: only those of rows that were measured
        (not the twin's predictions, source ``twin``)."""
        where = "WHERE source != 'twin' " if measured else ""
        return [row[0] for row in self._query(
            f"SELECT DISTINCT identity(hardware) AS id FROM history {where}ORDER BY id")]

    def history(self, task: Task | None = None, *, hardware: str | None = None) -> list[Measurement]:
        """Measurements in the order they were recorded, of one task and/or one hardware id."""
        where, args = _filters(task, hardware, "")
        rows = self._query(f"SELECT id, {_COLUMNS} FROM history {where} ORDER BY id", args)
        return [self._read_row(row, row_id) for row_id, *row in rows]

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
        rows = self._query(
            f"SELECT h.id, {columns} FROM best b JOIN history h ON h.id = b.history_id {where} "
            "ORDER BY identity(b.hardware), b.op, b.nbytes, b.nranks, b.dtype, b.task_group, b.comm", args)
        return [self._read_row(row, row_id) for row_id, *row in rows]

    def integrity_check(self) -> str:
        """SQLite's ``PRAGMA integrity_check`` verdict (``"ok"`` when the file is sound)."""
        return self._query("PRAGMA integrity_check")[0][0]

    @property
    def journal_mode(self) -> str:
        return self._db.execute("PRAGMA journal_mode").fetchone()[0]


class _Transaction:
    """``BEGIN IMMEDIATE`` … ``COMMIT``, rolled back on any exception; SQLite's errors about the
    file (damaged, read-only, locked) become the store's ``StoreError``."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.db = store._db

    def __enter__(self) -> None:
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except sqlite3.DatabaseError as err:
            raise self.store._damage(err) from None

    def __exit__(self, kind, value, traceback) -> bool:
        try:
            self.db.execute("ROLLBACK" if kind else "COMMIT")
        except sqlite3.DatabaseError as err:
            raise self.store._damage(err) from None
        if isinstance(value, sqlite3.DatabaseError) and not isinstance(value, sqlite3.IntegrityError):
            raise self.store._damage(value) from None
        return False


def _filters(task: Task | None, hardware: str | None, prefix: str) -> tuple[str, list]:
    clauses, args = [], []
    if hardware is not None:
        clauses.append(f"identity({prefix}hardware) = ?")
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


_SQLITE_INT = (-(1 << 63), (1 << 63) - 1)


def _checked_row(m: Measurement, path: str) -> tuple:
    """``_row(m)``, its integers within SQLite's 64 bits (a size of 2**63 bytes is no real task)."""
    row = _row(m)
    for value in row:
        if isinstance(value, int) and not _SQLITE_INT[0] <= value <= _SQLITE_INT[1]:
            raise StoreError(f"{path}: cannot store {m.task} ({m.source}): {value} does not fit a 64-bit integer")
    return row


def _import_key(m: Measurement) -> str:
    """What makes two rows the same measurement (everything but when it was stored), as a digest."""
    identity = json.dumps({k: v for k, v in m.to_dict().items() if k != "timestamp"}, sort_keys=True)
    return hashlib.sha256(identity.encode()).hexdigest()


def _measurement(row: tuple) -> Measurement:
    (hardware, op, nbytes, nranks, dtype, group, comm, algo, proto, transport, nchannels, nthreads, chunk_bytes,
     time_us, source, nccl_version, interference, env, occurrence, measured_at) = row
    config = None if algo is None else Config(Algo(algo), Proto(proto), Transport(transport), nchannels, nthreads,
                                              chunk_bytes)
    return Measurement(task=Task(Op(op), nbytes, nranks, dtype, group), config=config, time_us=time_us,
                       source=source, hardware=normalise_identity(hardware), nccl_version=nccl_version,
                       interference=interference, env=json.loads(env), comm=comm, occurrence=occurrence,
                       timestamp=measured_at)
