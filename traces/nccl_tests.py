"""Read nccl-tests results: the text table, its JSON output, and the CSV/markdown variants.

One ``*_perf`` run prints a table with one row per message size::

    #       size         count      type   redop    root     time   algbw   busbw #wrong     time ...
           8192          2048     float     sum      -1    17.40    0.47    0.82      0    16.83 ...

``read_nccl_tests`` reads that table (with or without an MPI ``[1,0]<stdout>:`` or ``srun --label``
``0:`` prefix,
with the column layout of any nccl-tests release: the header row names the columns), the
JSON file of newer nccl-tests (``-J``/``--output_file``), CSV tables with a
``size,count,type,time(ns),busbw,...`` header and markdown tables of in-place busbw per size.
The op, the rank count, the NCCL version and the ``NCCL_*`` environment come from the log
itself and from ``# KEY: value`` header lines written by whoever collected it (SOURCE,
HARDWARE, NCCL, ENV, COMMAND, NOTE...).
"""

from __future__ import annotations

import json
import math
import re
import warnings
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path

from traces.errors import CcltwinWarning, TraceError
from traces.plausibility import implausible
from traces.task import DTYPE_BYTES, Op, Task, parse_op

__all__ = ["NcclTestsLog", "NcclTestsRow", "read_nccl_tests"]


@dataclass(frozen=True)
class NcclTestsRow:
    """One message size: out-of-place and in-place results, ``None`` where not reported.

    ``nbytes`` is nccl-tests' ``size`` column, times are in µs, bandwidths in GB/s (10^9 B/s).
    ``*_wrong`` is the validation column as printed: wrong elements (``#wrong``, nccl-tests
    ≥ 2.13) or the maximum error (``error``, older releases); ``None`` when validation was off.
    """

    nbytes: int
    count: int
    dtype: str
    redop: str | None = None
    root: int | None = None
    oop_time_us: float | None = None
    oop_algbw: float | None = None
    oop_busbw: float | None = None
    ip_time_us: float | None = None
    ip_algbw: float | None = None
    ip_busbw: float | None = None
    oop_wrong: float | None = None
    ip_wrong: float | None = None

    @property
    def busbw(self) -> float:
        """Out-of-place busbw when measured, else in-place (a row always has one)."""
        return self.oop_busbw if self.oop_busbw is not None else self.ip_busbw  # type: ignore[return-value]

    @property
    def time_us(self) -> float | None:
        """Out-of-place time when measured, else in-place, else ``None`` (busbw-only tables)."""
        return self.oop_time_us if self.oop_time_us is not None else self.ip_time_us


@dataclass(frozen=True)
class NcclTestsLog:
    """A whole nccl-tests run: what was run where, and its rows in file order.

    ``op`` and ``nranks`` are ``None`` where the file does not say. ``header`` holds the
    ``# KEY: value`` lines (continuation lines joined); ``env`` the ``NCCL_*`` variables set
    in ENV or COMMAND (NOTE only for variables those two do not set); ``format`` is
    ``"text"``, ``"json"``, ``"csv"`` or ``"markdown"``.
    """

    path: str
    op: Op | None
    nranks: int | None
    header: dict[str, str]
    rows: list[NcclTestsRow]
    nccl_version: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    format: str = "text"
    gpus_per_thread: int | None = None
    """GPUs one nccl-tests thread drives (``-g``, the header's ``nGpus``); ``None`` where the
    file does not say."""
    nccl_headers_version: str | None = None
    """The NCCL the benchmark was compiled against (``nccl-headers=22902``); ``nccl_version`` is
    the library that ran (``NCCL version 2.29.2+cuda13.1``, ``nccl-library=``)."""
    hosts: dict[int, str] = field(default_factory=dict)
    """Rank → host name, from the ``# Rank N Pid P on HOST device D`` lines."""
    iters: int | None = None
    """Calls timed per size (``-n``: the header's ``iters: N``, else COMMAND's ``-n``); ``None``
    where the file does not say."""

    @property
    def busbw(self) -> list[float]:
        """Per row, out-of-place busbw when measured, else in-place (see ``NcclTestsRow.busbw``)."""
        return [row.busbw for row in self.rows]

    def task(self, row: NcclTestsRow) -> Task:
        """The Task one row measured; needs the op and rank count."""
        if self.op is None or self.nranks is None:
            missing = "op" if self.op is None else "rank count"
            raise TraceError(f"the {missing} of this run is unknown, so its rows are not tasks", self.path)
        return Task(self.op, row.nbytes, self.nranks, row.dtype)


def read_nccl_tests(path: str | PathLike[str]) -> NcclTestsLog:
    """Read one nccl-tests result file (any of the formats in the module docstring).

    Raises ``TraceError`` naming the file (and line) for an empty or undecodable file, a file
    without data rows, a malformed row, or a collective that ccltwin does not know.
    """
    path = str(path)
    text = _read_text(path)
    if text.lstrip().startswith("{"):
        return _read_json(path, text)
    lines = [_MPI_PREFIX.sub("", line, count=1) for line in text.splitlines()]
    header, header_keys = _read_header(lines)
    fmt, rows = _read_rows(path, lines)
    if not rows:
        raise TraceError("no data rows (expected an nccl-tests table)", path)
    if not text.endswith("\n") and lines and lines[-1].split()[:1] and _INT.match(lines[-1].split()[0]):
        warnings.warn(CcltwinWarning(f"{path}:{len(lines)}: the log ends inside this row (no line end after "
                                     "it): it may be cut short; its values were read as they are"), stacklevel=2)
    return NcclTestsLog(
        path=path,
        op=_find_op(path, lines, header_keys),
        nranks=_find_nranks(lines, header),
        header=header,
        rows=rows,
        nccl_version=_find_nccl_version(lines, header),
        env=_find_env(header),
        format=fmt,
        gpus_per_thread=_find_gpus_per_thread(lines, header),
        nccl_headers_version=_find_headers_version(lines),
        hosts=_find_hosts(lines),
        iters=_find_iters(lines, header),
    )


# ---- reading the file ------------------------------------------------------------------

_MPI_PREFIX = re.compile(r"^(?:\[\d+,\d+\]<std(?:out|err)>:|\s*\d+: )")  # mpirun --tag-output, srun --label
_INT = re.compile(r"^[0-9]+$")
_SIGNED_INT = re.compile(r"^-?[0-9]+$")
_FLOAT = re.compile(r"^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$")
_DTYPE_ALIASES = {"f8e4m3": "fp8_e4m3", "f8e5m2": "fp8_e5m2", "bf16": "bfloat16", "fp16": "float16"}


def _read_text(path: str) -> str:
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise TraceError(f"cannot read the log ({err.strerror or err})", path) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise TraceError(f"not UTF-8 text (byte {err.start})", path) from None
    if not text.strip():
        raise TraceError("empty file", path)
    return text


def _number(token: str, what: str) -> float:
    if not _FLOAT.match(token):
        raise ValueError(f"{what} {token!r} is not a number")
    if not math.isfinite(value := float(token)):
        raise ValueError(f"{what} {token!r} is not a finite number")
    return value


def _optional_number(token: str, what: str) -> float | None:
    return None if token in ("N/A", "-", "") else _number(token, what)


def _count(token: str, what: str) -> int:
    if not _INT.match(token):
        raise ValueError(f"{what} {token!r} is not a non-negative integer")
    return int(token)


def _dtype(token: str) -> str:
    name = _DTYPE_ALIASES.get(token, token)
    if name not in DTYPE_BYTES:
        raise ValueError(f"unknown data type {token!r}")
    return name


def _redop(token: str) -> str | None:
    return None if token in ("none", "-", "N/A") else token


def _root(token: str) -> int | None:
    if token == "N/A":
        return None
    if not _SIGNED_INT.match(token):
        raise ValueError(f"root {token!r} is not an integer")
    return None if int(token) < 0 else int(token)


# ---- curated header lines (# KEY: value) ------------------------------------------------

_HEADER_KEY = re.compile(r"^#\s*([A-Z][A-Z0-9_ ]*[A-Z0-9])\s*(?:\([^)]*\))?\s*:\s?(.*)$")
_CONTINUATION = re.compile(r"^#\s{4,}(\S.*)$")


def _read_header(lines: list[str]) -> tuple[dict[str, str], dict[int, str]]:
    """The leading ``# KEY: value`` block, and which key each of its lines (1-based) belongs to."""
    header: dict[str, str] = {}
    keys: dict[int, str] = {}
    key = None
    for number, line in enumerate(lines, 1):
        if match := _HEADER_KEY.match(line):
            key = match[1]
            header[key] = f"{header[key]} {match[2].strip()}" if key in header else match[2].strip()
        elif key is not None and (match := _CONTINUATION.match(line)):
            header[key] = f"{header[key]} {match[1].strip()}"
        else:
            break
        keys[number] = key
    return header, keys


# ---- rows -------------------------------------------------------------------------------

_TIME_COLUMNS = ("time", "cputime")
_WRONG_COLUMNS = ("#wrong", "wrong", "error", "nwrong")
_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d$")
_CSV_HEADER = re.compile(r"^\s*size\b[^,]*,", re.IGNORECASE)
_TIME_UNITS_US = {"ns": 1e-3, "us": 1.0, "µs": 1.0, "ms": 1e3, "s": 1e6}


def _read_rows(path: str, lines: list[str]) -> tuple[str, list[NcclTestsRow]]:
    for number, line in enumerate(lines, 1):
        if _CSV_HEADER.match(line):
            return "csv", _csv_rows(path, lines, number)
    rows = _text_rows(path, lines)
    if rows:
        return "text", rows
    return "markdown", _markdown_rows(path, lines)


def _text_rows(path: str, lines: list[str]) -> list[NcclTestsRow]:
    columns: list[str] | None = None
    rows = []
    for number, line in enumerate(lines, 1):
        tokens = line.split()
        if not tokens:
            continue
        if tokens[0].startswith("#"):
            names = line.lstrip().lstrip("#").split()
            if names[:3] == ["size", "count", "type"]:
                columns = names
            continue
        if not _INT.match(tokens[0]):
            continue  # NCCL INFO lines, warnings and other chatter between rows
        try:
            rows.append(_text_row(tokens, columns))
        except ValueError as err:
            raise TraceError(str(err), path, line=number) from None
    return rows


def _text_row(tokens: list[str], columns: list[str] | None) -> NcclTestsRow:
    if columns is None:
        return _headerless_row(tokens)
    names = [name.lower() for name in columns]
    if names[-1] == "timestamp":
        names.pop()
        if len(tokens) >= 2 and _TIMESTAMP.match(tokens[-2]):
            tokens = tokens[:-2]
    times = [i for i, name in enumerate(names) if name in _TIME_COLUMNS]
    if not times:
        raise ValueError("the table header names no time column")
    prefix, rest = names[: times[0]], names[times[0] :]
    split = times[1] - times[0] if len(times) > 1 else 0
    oop_names, ip_names = rest[:split], rest[split:]
    values = tokens[len(prefix) :]
    if len(tokens) < len(prefix) or len(values) not in (len(rest), len(ip_names)):
        raise ValueError(f"expected {len(names)} columns as the table header says, got {len(tokens)}")
    if len(values) == len(ip_names) and oop_names:  # trace replay: out-of-place left blank
        oop_names = []
    cells = dict(zip(prefix, tokens, strict=False))
    oop = dict(zip(oop_names, values, strict=False))
    ip = dict(zip(ip_names, values[len(oop_names) :], strict=True))
    return _row(cells, oop, ip)


def _headerless_row(tokens: list[str]) -> NcclTestsRow:
    """Without a header: size count type [redop] [root], then 4 out-of-place and 4 in-place tokens."""
    if not 11 <= len(tokens) <= 13:
        raise ValueError(f"expected 11 to 13 columns (size count type [redop] [root] + 8), got {len(tokens)}")
    middle = tokens[3:-8]
    names = ["size", "count", "type"]
    if len(middle) == 2:
        names += ["redop", "root"]
    elif middle:
        names.append("root" if _SIGNED_INT.match(middle[0]) else "redop")
    block = ["time", "algbw", "busbw", "#wrong"]
    return _row(
        dict(zip(names, tokens, strict=False)),
        dict(zip(block, tokens[-8:-4], strict=True)),
        dict(zip(block, tokens[-4:], strict=True)),
    )


def _measured(block: dict[str, str], side: str, time_scale: float) -> tuple[float | None, ...]:
    """(time µs, algbw, busbw, wrong) of one side of a row; ``None`` for columns it lacks."""

    def value(names: tuple[str, ...], parse=_number) -> float | None:
        token = next((block[name] for name in names if name in block), None)
        return None if token is None else parse(token, f"{side} {names[0]}")

    time = value(_TIME_COLUMNS)
    wrong = value(_WRONG_COLUMNS, _optional_number)
    return None if time is None else time * time_scale, value(("algbw",)), value(("busbw",)), wrong


def _row(
    cells: dict[str, str], oop: dict[str, str], ip: dict[str, str], time_scale: float = 1.0
) -> NcclTestsRow:
    for name in ("size", "count", "type"):
        if name not in cells:
            raise ValueError(f"no {name} column")
    oop_time, oop_algbw, oop_busbw, oop_wrong = _measured(oop, "out-of-place", time_scale)
    ip_time, ip_algbw, ip_busbw, ip_wrong = _measured(ip, "in-place", time_scale)
    if oop_busbw is None and ip_busbw is None:
        raise ValueError("the row has no busbw")
    row = NcclTestsRow(
        _count(cells["size"], "size"),
        _count(cells["count"], "count"),
        _dtype(cells["type"]),
        _redop(cells["redop"]) if "redop" in cells else None,
        _root(cells["root"]) if "root" in cells else None,
        *(oop_time, oop_algbw, oop_busbw, ip_time, ip_algbw, ip_busbw, oop_wrong, ip_wrong),
    )
    for side, time, busbw in (("out-of-place", oop_time, oop_busbw), ("in-place", ip_time, ip_busbw)):
        if problem := implausible(nbytes=row.nbytes, count=row.count, dtype=row.dtype, time_us=time, busbw=busbw):
            raise ValueError(f"{side}: {problem}")
    return row


def _csv_rows(path: str, lines: list[str], header_line: int) -> list[NcclTestsRow]:
    """CSV with a header such as ``size(B),count,type,time(ns),busbw(GB/s),time(ns),busbw(GB/s)``."""
    names, scale = [], 1.0
    for cell in lines[header_line - 1].split(","):
        match = re.match(r"^\s*([^()\s]+)\s*(?:\(([^)]*)\))?\s*$", cell)
        if not match:
            raise TraceError(f"cannot read CSV column name {cell.strip()!r}", path, line=header_line)
        names.append(match[1].lower())
        if match[1].lower() in _TIME_COLUMNS:
            unit = (match[2] or "us").lower()
            if unit not in _TIME_UNITS_US:
                raise TraceError(f"unknown time unit {unit!r}", path, line=header_line)
            scale = _TIME_UNITS_US[unit]
    times = [i for i, name in enumerate(names) if name in _TIME_COLUMNS]
    if not times:
        raise TraceError("the CSV header names no time column", path, line=header_line)
    oop_end = times[1] if len(times) > 1 else times[0]
    rows = []
    for number, line in enumerate(lines[header_line:], header_line + 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        cells = [cell.strip() for cell in line.split(",")]
        try:
            if len(cells) != len(names):
                raise ValueError(f"expected {len(names)} CSV fields, got {len(cells)}")
            rows.append(
                _row(
                    dict(zip(names[: times[0]], cells, strict=False)),
                    dict(zip(names[times[0] : oop_end], cells[times[0] : oop_end], strict=True)),
                    dict(zip(names[oop_end:], cells[oop_end:], strict=True)),
                    scale,
                )
            )
        except ValueError as err:
            raise TraceError(str(err), path, line=number) from None
    return rows


_SIZE_LABEL = re.compile(r"^([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)(?:i?B)?$", re.IGNORECASE)


def _size_label(label: str) -> int:
    """``1024`` → 1024; ``65K``/``33M``/``1G`` → the power of two within 5 % (sweeps with ``-f 2``)."""
    match = _SIZE_LABEL.match(label)
    if not match:
        raise ValueError(f"message size {label!r} is not a size")
    if not match[2]:
        return _count(match[1], "message size")
    power = "KMGT".index(match[2].upper()) + 1
    for base in (1024, 1000):
        value = float(match[1]) * base**power
        nearest = 2 ** round(math.log2(value))
        if abs(value - nearest) <= 0.05 * nearest:
            return nearest
    return round(float(match[1]) * 1024**power)


def _markdown_rows(path: str, lines: list[str]) -> list[NcclTestsRow]:
    """The first markdown table whose first column is a message size; its second is in-place busbw.

    Such summaries keep only nccl-tests' in-place busbw; the type is nccl-tests' default, float.
    """
    rows: list[NcclTestsRow] = []
    in_table = False
    for number, line in enumerate(lines, 1):
        if not line.lstrip().startswith("|"):
            if rows:
                break
            in_table = False
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not in_table:
            in_table = "size" in cells[0].lower()
            if in_table and len(cells) != 2:
                raise TraceError(f"expected 2 columns (size, busbw), got {len(cells)}", path, line=number)
            continue
        if set("".join(cells)) <= set("-: "):
            continue  # the |---|---| rule
        try:
            if len(cells) != 2:
                raise ValueError(f"expected 2 columns (size, busbw), got {len(cells)}")
            nbytes = _size_label(cells[0])
            rows.append(
                NcclTestsRow(
                    nbytes=nbytes,
                    count=nbytes // DTYPE_BYTES["float"],
                    dtype="float",
                    ip_busbw=_number(cells[1], "busbw"),
                )
            )
        except ValueError as err:
            raise TraceError(str(err), path, line=number) from None
    return rows


# ---- what was run, where ----------------------------------------------------------------

_STARTING = re.compile(r"Collective test starting:\s*(\S+)")
_PERF = re.compile(
    r"\b(all_reduce|all_gather|broadcast|reduce_scatter|reduce|alltoallv?|sendrecv|gather|scatter|hypercube)_perf\b"
)
_COLLECTIVE = re.compile(r"\bCollective:\s*([A-Za-z][A-Za-z_-]*)")
_NOT_ABOUT_THE_RUN = {"SOURCE", "PUBLICATION", "PAPER"}


def _find_op(path: str, lines: list[str], header_keys: dict[int, str]) -> Op | None:
    """From the log's own "Collective test starting" line, else COMMAND, else other header text."""
    found: list[tuple[int, int, str]] = []  # (preference, line, name)
    for number, line in enumerate(lines, 1):
        if not line.lstrip().startswith("#") or header_keys.get(number) in _NOT_ABOUT_THE_RUN:
            continue
        if match := _STARTING.search(line):
            found.append((0, number, match[1]))
        found += [
            (1 if header_keys.get(number) == "COMMAND" else 2, number, name) for name in _PERF.findall(line)
        ]
        found += [(3, number, name) for name in _COLLECTIVE.findall(line)]
    started = {name.removesuffix("_perf") for rank, _, name in found if rank == 0}
    if len(started) > 1:
        raise TraceError(f"several collectives in one log ({', '.join(sorted(started))}); split it", path)
    if not found:
        return None
    _, number, name = min(found)
    try:
        return parse_op(name)
    except ValueError as err:
        raise TraceError(str(err), path, line=number) from None


_RANK_LINE = re.compile(r"^#\s*Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?Pid\b(?:\s+\d+\s+on\s+(\S+))?")
_NTHREAD_NGPUS = re.compile(r"^#\s*nThread\s+(\d+)\s+nGpus\s+(\d+)")
_LAUNCHERS = {"mpirun", "mpiexec", "orterun", "srun", "aprun", "jsrun"}
_RANKS_IN_TEXT = (
    re.compile(r"\b(\d+)\s+ranks\b"),
    re.compile(r"\bGPUs used(?: here)?:\s*(\d+)"),
    re.compile(r"\b(\d+)\s+(?:of the \d+\s+)?GPUs used\b"),
    re.compile(r"\b(\d+)\s*x\s+NVIDIA\b.*\bsingle (?:VM|node)\b"),
)


def _find_nranks(lines: list[str], header: dict[str, str]) -> int | None:
    """From the "# Rank N ... Pid" lines, else COMMAND (launcher -np × -t × -g), else header prose."""
    groups: dict[int, set[int]] = {}
    for line in lines:
        if match := _RANK_LINE.match(line):
            groups.setdefault(int(match[2] or 0), set()).add(int(match[1]))
    if groups:
        return len(groups[min(groups)])
    per_process = next((int(m[1]) * int(m[2]) for line in lines if (m := _NTHREAD_NGPUS.match(line))), None)
    if "COMMAND" in header and (nranks := _nranks_from_command(header["COMMAND"], per_process)):
        return nranks
    for key in ("HARDWARE", "NOTE", "COLLECTIVE", "FORMAT"):
        for pattern in _RANKS_IN_TEXT:
            if match := pattern.search(header.get(key, "")):
                return int(match[1])
    return None


def _option(tokens: list[str], names: tuple[str, ...]) -> int | None:
    for i, token in enumerate(tokens):
        name, _, value = token.partition("=")
        if name in names:
            value = value or (tokens[i + 1] if i + 1 < len(tokens) else "")
            return int(value) if _INT.match(value) else None
    return None


def _nranks_from_command(command: str, per_process: int | None) -> int | None:
    tokens = command.split()
    binary = next((i for i, token in enumerate(tokens) if _PERF.search(token)), None)
    if binary is None:
        return None
    launcher, args = tokens[:binary], tokens[binary + 1 :]
    if any(Path(token).name in _LAUNCHERS for token in launcher):
        nprocs = _option(launcher, ("-np", "-n", "--np", "--ntasks"))
        if nprocs is None:
            return None
    else:
        nprocs = 1
    gpus, threads = _option(args, ("-g", "--ngpus")), _option(args, ("-t", "--nthreads"))
    if per_process is not None and gpus is None and threads is None:
        return nprocs * per_process
    return nprocs * (gpus or 1) * (threads or 1)


def _find_gpus_per_thread(lines: list[str], header: dict[str, str]) -> int | None:
    """From the "# nThread T nGpus G" line, else the ``-g`` of COMMAND's nccl-tests binary."""
    for line in lines:
        if match := _NTHREAD_NGPUS.match(line):
            return int(match[2])
    return _binary_option(header, ("-g", "--ngpus"))


def _binary_option(header: dict[str, str], names: tuple[str, ...]) -> int | None:
    """The value of option ``names`` given to COMMAND's nccl-tests binary (not to its launcher)."""
    tokens = header.get("COMMAND", "").split()
    binary = next((i for i, token in enumerate(tokens) if _PERF.search(token)), None)
    return None if binary is None else _option(tokens[binary + 1:], names)


_ITERS = re.compile(r"(?<!warmup )\biters:\s*(\d+)")


def _find_iters(lines: list[str], header: dict[str, str]) -> int | None:
    """From the header's "warmup iters: W iters: N", else the ``-n`` of COMMAND's binary."""
    for line in lines:
        if line.startswith("#") and (match := _ITERS.search(line)):
            return int(match[1])
    return _binary_option(header, ("-n", "--iters"))


_RUNTIME_VERSION = re.compile(r"\bNCCL version (\d+\.\d+\.\d+)")
_LIBRARY_CODE = re.compile(r"\bnccl-library=(\d+)")
_HEADER_VERSION = re.compile(r"^\s*(\d+\.\d+\.\d+)")


_HEADERS_CODE = re.compile(r"\bnccl-headers=(\d+)")


def _find_headers_version(lines: list[str]) -> str | None:
    for line in lines:
        if match := _HEADERS_CODE.search(line):
            return _version_from_code(int(match[1]))
    return None


def _find_hosts(lines: list[str]) -> dict[int, str]:
    """Rank → host of the first group's "# Rank N ... Pid P on HOST" lines."""
    hosts: dict[int, str] = {}
    for line in lines:
        if (match := _RANK_LINE.match(line)) and int(match[2] or 0) == 0 and match[3]:
            hosts.setdefault(int(match[1]), match[3])
    return hosts


def _version_from_code(code: int) -> str:
    """NCCL's version code: major*10000 + minor*100 + patch since 2.9, major*1000 + ... before."""
    if code >= 20900:
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code // 100 % 10}.{code % 100}"


def _find_nccl_version(lines: list[str], header: dict[str, str]) -> str | None:
    for line in lines:
        if match := _RUNTIME_VERSION.search(line):
            return match[1]
    for line in lines:
        if match := _LIBRARY_CODE.search(line):
            return _version_from_code(int(match[1]))
    match = _HEADER_VERSION.match(header.get("NCCL", ""))
    return match[1] if match else None


_ENV_VAR = re.compile(r"\b(NCCL_[A-Z0-9_]+)=([^\s,;()'\"]+)")


def _env_assignments(text: str) -> dict[str, str]:
    """``NCCL_X=value`` pairs; placeholders (``<algo>``) and alternatives (``0/1``) are not values."""
    env = {}
    for name, value in _ENV_VAR.findall(text):
        value = value.rstrip(".")
        if value and not set(value) & set("<>/|"):
            env[name] = value
    return env


def _find_env(header: dict[str, str]) -> dict[str, str]:
    env = _env_assignments(header.get("NOTE", ""))
    env |= _env_assignments(header.get("COMMAND", ""))
    env |= _env_assignments(header.get("ENV", ""))
    return env


# ---- JSON (nccl-tests -J / --output_file) -----------------------------------------------


def _read_json(path: str, text: str) -> NcclTestsLog:
    """nccl-tests' JSON: ``args``, ``env``, ``nccl_version``, ``config`` (with ``devices``), ``results``."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise TraceError(f"malformed JSON: {err.msg}", path, line=err.lineno) from None
    except RecursionError:
        raise TraceError("JSON nested too deeply", path) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        raise TraceError("not nccl-tests JSON output (no 'results' list)", path)
    args = [str(arg) for arg in _list(doc, "args")]
    rows = []
    for index, result in enumerate(doc["results"]):
        try:
            rows.append(_json_row(result))
        except ValueError as err:
            raise TraceError(f"results[{index}]: {err}", path) from None
    if not rows:
        raise TraceError("no data rows (empty 'results')", path)
    config = doc.get("config") if isinstance(doc.get("config"), dict) else {}
    op = None
    if args and (match := _PERF.search(Path(args[0]).name)):
        try:
            op = parse_op(match[0])
        except ValueError as err:
            raise TraceError(str(err), path) from None
    elif args:
        raise TraceError(f"unknown nccl-tests program {args[0]!r}", path)
    code = doc.get("nccl_version")
    try:
        nranks = _json_nranks(config)
    except ValueError as err:
        raise TraceError(str(err), path) from None
    return NcclTestsLog(
        path=path,
        op=op,
        nranks=nranks,
        header={"COMMAND": " ".join(args)} if args else {},
        rows=rows,
        nccl_version=_version_from_code(code) if isinstance(code, int) and code > 0 else None,
        env=_env_assignments(" ".join(f"'{entry}'" for entry in _list(doc, "env") if isinstance(entry, str))),
        format="json",
    )


def _list(doc: dict, key: str) -> list:
    value = doc.get(key)
    return value if isinstance(value, list) else []


def _json_nranks(config: dict) -> int | None:
    """One ``devices`` entry per process, each driving ``nthreads × ngpus`` ranks."""
    devices, threads, gpus = config.get("devices"), config.get("nthreads"), config.get("ngpus")
    for name, value in (("nthreads", threads), ("ngpus", gpus)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"config.{name} {value!r} is not a positive integer")
    if isinstance(devices, list) and devices and isinstance(threads, int) and isinstance(gpus, int):
        return len(devices) * threads * gpus
    return None


def _json_cell(value: object) -> str:
    if value is None or value == "nan":
        return "N/A"
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"unexpected value {value!r}")
    return str(value).strip()


def _json_row(result: dict) -> NcclTestsRow:
    if not isinstance(result, dict):
        raise ValueError(f"expected an object, got {result!r}")
    cells = {
        name: _json_cell(result[name])
        for name in ("size", "count", "type", "redop", "root")
        if name in result
    }
    sides = []
    for key in ("out_of_place", "in_place"):
        block = result.get(key) or {}
        if not isinstance(block, dict):
            raise ValueError(f"{key} is not an object")
        sides.append(
            {
                name: _json_cell(block[source])
                for name, source in (
                    ("time", "time"),
                    ("cputime", "cpu_time"),
                    ("algbw", "alg_bw"),
                    ("busbw", "bus_bw"),
                    ("nwrong", "nwrong"),
                )
                if source in block
            }
        )
    return _row(cells, *sides)
