"""The plugin's control API from Python: the same loaded library NCCL uses, through ctypes.

``dlopen`` of one path returns one handle per process, so :meth:`Plugin.load` (the path the
environment names, else the cached build) and NCCL (``NCCL_TUNER_PLUGIN``/``NCCL_PROFILER_PLUGIN``,
set by :func:`install_env` before the first communicator) share one instance of the plugin's state:
Python writes the schedule's rules, NCCL's ``getCollInfo`` reads them, and both rings fill on NCCL's
threads until Python drains them.  C side: ``ccltwin_live.h``.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path

from live.notice import say_once
from live.plugin.build import LIBRARY, build
from traces.task import Op
from tuner.config import Algo, Proto

ABI = 1
ENV_VARS = ("NCCL_TUNER_PLUGIN", "NCCL_PROFILER_PLUGIN")

NCCL_FUNC = {Op.BROADCAST: 0, Op.REDUCE: 1, Op.ALLGATHER: 2, Op.REDUCESCATTER: 3, Op.ALLREDUCE: 4}
"""``ncclFunc_t`` of the collectives NCCL hands its tuner (``nccl_common.h``)."""
OP_OF_FUNC = {index: op for op, index in NCCL_FUNC.items()}

FLAGS = {"rule_applied": 0x1, "unavailable": 0x2, "chunk": 0x4, "untracked": 0x8, "comm_unknown": 0x10}
"""``ccltwin_decision.flags`` bits (``CCLTWIN_RULE_APPLIED`` ...)."""

EFULL = -2
MAX_CHANNELS = 64
"""NCCL's ``MAXCHANNELS`` since 2.25 (32 before): the most ``*nChannels`` the plugin accepts."""


class RuleTableFull(RuntimeError):
    """The plugin's fixed rule tables are full: the rule was not installed (that task keeps NCCL's
    default, or the rules already installed, until some are cleared)."""


DTYPES = ("int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64", "bfloat16",
          "fp8_e4m3", "fp8_e5m2")
"""``ncclDataType_t`` 0..11 (``nccl.h``), by the names :class:`traces.task.Task` uses."""


_ALGOS = tuple(Algo)
_PROTOS = tuple(Proto)


def algo_of(index: int) -> Algo | None:
    """``NCCL_ALGO_*`` index to :class:`Algo`; ``None`` for -1 (none, or NCCL's own choice)."""
    return _ALGOS[index] if 0 <= index < len(_ALGOS) else None


def proto_of(index: int) -> Proto | None:
    """``NCCL_PROTO_*`` index to :class:`Proto`; ``None`` for -1."""
    return _PROTOS[index] if 0 <= index < len(_PROTOS) else None


class _CommStruct(ctypes.Structure):
    _fields_ = [("comm", ctypes.c_uint64), ("local_ctx_id", ctypes.c_uint64), ("nranks", ctypes.c_int),
                ("nnodes", ctypes.c_int), ("rank", ctypes.c_int), ("tuner_abi", ctypes.c_int),
                ("profiler_abi", ctypes.c_int), ("alive", ctypes.c_int)]


class _DecisionStruct(ctypes.Structure):
    _fields_ = [("comm", ctypes.c_uint64), ("coll", ctypes.c_int), ("nbytes", ctypes.c_uint64),
                ("occurrence", ctypes.c_uint64), ("algo", ctypes.c_int), ("proto", ctypes.c_int),
                ("nchannels", ctypes.c_int), ("chunk_bytes", ctypes.c_uint64), ("version", ctypes.c_uint32),
                ("flags", ctypes.c_int), ("table_mask", ctypes.c_uint32), ("nccl_algo", ctypes.c_int),
                ("nccl_proto", ctypes.c_int)]


class _EventStruct(ctypes.Structure):
    _fields_ = [("comm", ctypes.c_uint64), ("coll", ctypes.c_int), ("nbytes", ctypes.c_uint64),
                ("seq", ctypes.c_uint64), ("algo", ctypes.c_int), ("proto", ctypes.c_int),
                ("nchannels", ctypes.c_int), ("nwarps", ctypes.c_int), ("start_ns", ctypes.c_uint64),
                ("stop_ns", ctypes.c_uint64), ("timer", ctypes.c_int), ("occurrence", ctypes.c_uint64),
                ("dtype", ctypes.c_int)]


UNKNOWN = 2**64 - 1
"""An occurrence the plugin could not count (its task table was full)."""


@dataclass(frozen=True)
class CommInfo:
    """A communicator context the plugin has seen in this process (one per communicator and local rank)."""

    comm: int
    """NCCL's commHash, identical on every rank; 0 while unknown (tuner v3/v4 without profiler pairing)."""
    local_ctx_id: int
    nranks: int
    nnodes: int
    rank: int
    """-1 when no profiler init told it."""
    tuner_abi: int
    """3..6, or 0: NCCL loaded no tuner for it."""
    profiler_abi: int
    """4..6, or 0."""
    alive: bool


@dataclass(frozen=True)
class Decision:
    """One ``getCollInfo`` call: its task key, its occurrence and what the table then selects."""

    comm: int
    op: Op | None
    nbytes: int
    occurrence: int
    algo: Algo | None
    """What NCCL's argmin takes from the table the plugin returned (``None``: no table / no entry)."""
    proto: Proto | None
    nchannels: int
    """Written to ``*nChannels``; 0 = NCCL's."""
    chunk_bytes: int
    """Offered through ``getChunkSize`` (tuner v6); 0 = NCCL's."""
    version: int
    """The matching rule's schedule version (also when its entry was unavailable); 0 without one."""
    flags: int
    table_mask: int
    """Bit ``algo*3+proto``: that entry was ≥ 0 in NCCL's table (the communicator can run it)."""
    nccl_algo: Algo | None
    """NCCL's own choice: the table's argmin before the plugin edited it."""
    nccl_proto: Proto | None

    def has(self, flag: str) -> bool:
        """``decision.has("unavailable")``: one of :data:`FLAGS`."""
        return bool(self.flags & FLAGS[flag])

    @property
    def available(self) -> frozenset[tuple[Algo, Proto]]:
        """The (algo, proto) entries NCCL offered for this call."""
        return frozenset((a, p) for a in Algo for p in Proto
                         if self.table_mask >> (a.nccl_index * len(Proto) + p.nccl_index) & 1)


@dataclass(frozen=True)
class Event:
    """One collective as NCCL's profiler reported it: what really ran, and when."""

    comm: int
    op: Op | None
    nbytes: int
    seq: int
    occurrence: int
    algo: Algo | None
    proto: Proto | None
    nchannels: int
    nwarps: int
    start_ns: int
    stop_ns: int
    gpu_timer: bool
    """True: GPU globaltimer, first channel start to last channel stop; False: host clock around
    NCCL's enqueue (no kernel-channel events came)."""
    dtype: str | None
    """The element type NCCL named (:data:`DTYPES`); None if the plugin did not know the name."""

    @property
    def duration_ns(self) -> int:
        return self.stop_ns - self.start_ns


@dataclass(frozen=True)
class Dropped:
    """Ring entries lost because nobody drained the ring in time."""

    decisions: int
    events: int


@dataclass(frozen=True)
class Capacity:
    """The fixed rule tables: a key holds the rule in force and the ones still ahead (older ones are freed)."""

    rules: int
    keys: int


_LOADED: dict[str, Plugin] = {}


class Plugin:
    """One loaded instance of the plugin library (use :meth:`load` for the one NCCL shares)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.lib = lib = ctypes.CDLL(str(self.path))
        u64, i32 = ctypes.c_uint64, ctypes.c_int
        for name, restype, argtypes in (
            ("ccltwin_abi", i32, []),
            ("ccltwin_set_rule", i32, [u64, i32, u64, u64, i32, i32, i32, u64, ctypes.c_uint32]),
            ("ccltwin_clear_rules", i32, [u64]),
            ("ccltwin_comms", i32, [ctypes.POINTER(_CommStruct), i32]),
            ("ccltwin_drain_decisions", i32, [ctypes.POINTER(_DecisionStruct), i32]),
            ("ccltwin_drain_events", i32, [ctypes.POINTER(_EventStruct), i32]),
            ("ccltwin_dropped", u64, [i32]),
            ("ccltwin_set_comm_id", i32, [u64, u64]),
            ("ccltwin_occurrences", u64, [u64, i32, u64]),
            ("ccltwin_rule_capacity", i32, []),
            ("ccltwin_key_capacity", i32, []),
            ("ccltwin_sizeof", ctypes.c_size_t, [i32]),
        ):
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = restype, argtypes
        if lib.ccltwin_abi() != ABI:
            raise ValueError(f"{self.path}: control ABI {lib.ccltwin_abi()}, this binding speaks {ABI}")
        for which, struct in enumerate((_CommStruct, _DecisionStruct, _EventStruct)):
            if lib.ccltwin_sizeof(which) != ctypes.sizeof(struct):
                raise ValueError(f"{self.path}: struct {struct.__name__} is {lib.ccltwin_sizeof(which)} bytes in C, "
                                 f"{ctypes.sizeof(struct)} here")

    @classmethod
    def load(cls, env: MutableMapping[str, str] = os.environ) -> Plugin:
        """This process's instance: the library the environment names for NCCL, else the cached build."""
        path = _named_library(env) or build(env)
        key = os.path.realpath(path)
        if key not in _LOADED:
            _LOADED[key] = cls(path)
        return _LOADED[key]

    def set_rule(self, comm: int, op: Op, nbytes: int, from_occurrence: int, *, version: int,
                 algo: Algo | None = None, proto: Proto | None = None, nchannels: int = 0,
                 chunk_bytes: int = 0) -> None:
        """From occurrence ``from_occurrence`` of task (comm, op, nbytes) use this config (``None``/0:
        NCCL's own choice for that field).  ``RuleTableFull`` when the plugin has no room."""
        if op not in NCCL_FUNC:
            raise ValueError(f"{op} never reaches NCCL's tuner (only {', '.join(NCCL_FUNC)})")
        for name, value, top in (("nbytes", nbytes, 2**64), ("from_occurrence", from_occurrence, 2**64),
                                 ("chunk_bytes", chunk_bytes, 2**64), ("version", version, 2**32),
                                 ("nchannels", nchannels, MAX_CHANNELS + 1)):
            if not 0 <= value < top:
                raise ValueError(f"{name} must be in 0..{top - 1}, got {value}")
        rc = self.lib.ccltwin_set_rule(comm, NCCL_FUNC[op], nbytes, from_occurrence,
                                       -1 if algo is None else algo.nccl_index,
                                       -1 if proto is None else proto.nccl_index, nchannels, chunk_bytes, version)
        if rc == EFULL:
            raise RuleTableFull(f"no room for a rule of comm {comm:#x} {op} {nbytes} B")
        assert rc == 0, f"ccltwin_set_rule refused checked fields ({rc})"

    def clear_rules(self, comm: int) -> int:
        """Forget a communicator's schedule (its calls fall back to NCCL's default); rules removed."""
        return self.lib.ccltwin_clear_rules(comm)

    def comms(self) -> list[CommInfo]:
        """Every context the plugin has seen, in creation order."""
        out = (_CommStruct * max(1, self.lib.ccltwin_comms(None, 0)))()
        n = self.lib.ccltwin_comms(out, len(out))
        return [CommInfo(c.comm, c.local_ctx_id, c.nranks, c.nnodes, c.rank, c.tuner_abi, c.profiler_abi,
                         bool(c.alive)) for c in out[:n]]

    def drain_decisions(self) -> list[Decision]:
        """Every decision since the last drain, oldest first."""
        return _drain(self.lib.ccltwin_drain_decisions, _DecisionStruct, lambda d: Decision(
            d.comm, OP_OF_FUNC.get(d.coll), d.nbytes, d.occurrence, algo_of(d.algo), proto_of(d.proto), d.nchannels,
            d.chunk_bytes, d.version, d.flags, d.table_mask, algo_of(d.nccl_algo), proto_of(d.nccl_proto)))

    def drain_events(self) -> list[Event]:
        """Every finished collective event since the last drain, oldest first."""
        return _drain(self.lib.ccltwin_drain_events, _EventStruct, lambda e: Event(
            e.comm, OP_OF_FUNC.get(e.coll), e.nbytes, e.seq, e.occurrence, algo_of(e.algo), proto_of(e.proto),
            e.nchannels, e.nwarps, e.start_ns, e.stop_ns, e.timer == 0,
            DTYPES[e.dtype] if 0 <= e.dtype < len(DTYPES) else None))

    def capacity(self) -> Capacity:
        """How many rules, and distinct task keys with rules, the plugin holds at once."""
        return Capacity(self.lib.ccltwin_rule_capacity(), self.lib.ccltwin_key_capacity())

    def dropped(self) -> Dropped:
        return Dropped(self.lib.ccltwin_dropped(0), self.lib.ccltwin_dropped(1))

    def set_comm_id(self, local_ctx_id: int, comm: int) -> None:
        """Name a context's communicator where NCCL did not (tuner v3/v4 without our profiler)."""
        if self.lib.ccltwin_set_comm_id(local_ctx_id, comm):
            raise ValueError(f"the plugin has no context {local_ctx_id}")

    def occurrences(self, comm: int, op: Op, nbytes: int) -> int:
        """How many calls of this task a live context of ``comm`` has decided so far (the most of any)."""
        return self.lib.ccltwin_occurrences(comm, NCCL_FUNC[op], nbytes)


def _drain(fn, struct, convert) -> list:
    out, batch = [], (struct * 1024)()
    while n := fn(batch, len(batch)):
        out.extend(convert(item) for item in batch[:n])  # converted now: the next batch reuses the memory
        if n < len(batch):
            break
    return out


def _named_library(env: MutableMapping[str, str]) -> str | None:
    for var in ENV_VARS:
        value = env.get(var, "")
        if Path(value).name == LIBRARY and os.path.isfile(value):
            return value
    return None


@dataclass(frozen=True)
class Installed:
    """What :func:`install_env` left in the environment."""

    path: Path
    tuner: bool
    """NCCL_TUNER_PLUGIN names our library (False: the user set it to something else, e.g. ``none``)."""
    profiler: bool


def install_env(env: MutableMapping[str, str] = os.environ) -> Installed:
    """Point NCCL_TUNER_PLUGIN and NCCL_PROFILER_PLUGIN at the plugin, unless the user set them to
    something else (``none`` turns each off).  NCCL reads them once per process, at its first
    communicator: call this before it."""
    path = Plugin.load(env).path
    ours = {}
    for var in ENV_VARS:
        env.setdefault(var, str(path))
        ours[var] = os.path.realpath(env[var]) == os.path.realpath(path)
        if not ours[var]:
            say_once(f"env-{var}", f"{var}={env[var]} is set; leaving it (live tuning through it is off)")
    if _nccl_group_exists():
        say_once("late-install", "a NCCL process group exists already; NCCL loads its plugins at its first "
                 "communicator, so collectives of communicators created before this are not tuned")
    return Installed(path, ours["NCCL_TUNER_PLUGIN"], ours["NCCL_PROFILER_PLUGIN"])


def _nccl_group_exists() -> bool:
    dist = sys.modules.get("torch.distributed")  # never import torch here
    return bool(dist and dist.is_available() and dist.is_initialized() and "nccl" in str(dist.get_backend()))
