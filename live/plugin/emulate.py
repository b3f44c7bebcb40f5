"""Drive the loaded plugin exactly as NCCL does, where no NCCL runs (CI on gloo, tests).

An :class:`EmulatedComm` is one communicator's context in the plugin, opened through the exported
``ncclTunerPlugin_vN`` struct's ``init`` (after ``ncclProfiler_vN.init`` on the same thread, as
NCCL's comm init does, so tuner v3/v4 learn the communicator id).  :meth:`EmulatedComm.select`
then asks ``getCollInfo`` with a cost table laid out as NCCL lays it out (a contiguous
``float[7][3]`` passed as ``float**``), applies NCCL's own selection rule to the table the plugin
returns, and on tuner v6 asks ``getChunkSize`` for the selected algorithm and protocol::

    with EmulatedComm(Plugin.load(), comm=0x1234, nranks=4) as comm:
        chosen = comm.select(Op.ALLREDUCE, 1 << 20, cost_table({(Algo.RING, Proto.SIMPLE): 30.0}))
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from live.plugin.binding import NCCL_FUNC, Plugin, algo_of, proto_of
from traces.task import Op
from tuner.config import Algo, Proto

NUM_ALGOS, NUM_PROTOS = len(Algo), len(Proto)
NCCL_MAX_TIME = 3600000000.0
"""``topoGetAlgoInfo``'s starting minimum: entries at or above it are never chosen."""
IGNORE = -1.0
"""``NCCL_ALGO_PROTO_IGNORE``: the entry is not available on this communicator."""

_c = ctypes
LOGGER = _c.CFUNCTYPE(None, _c.c_int, _c.c_ulong, _c.c_char_p, _c.c_int, _c.c_char_p)
"""``ncclDebugLogger_t`` (level, flags, file, line, fmt, ...): the variadic arguments are not read."""
_TABLE = _c.POINTER(_c.POINTER(_c.c_float))
_CLOSE = _c.CFUNCTYPE(_c.c_int, _c.c_void_p)
_INIT_V3 = _c.CFUNCTYPE(_c.c_int, _c.c_size_t, _c.c_size_t, LOGGER, _c.POINTER(_c.c_void_p))
_INIT_V5 = _c.CFUNCTYPE(_c.c_int, _c.POINTER(_c.c_void_p), _c.c_uint64, _c.c_size_t, _c.c_size_t, LOGGER,
                        _c.c_void_p, _c.c_void_p)
_COLL_V3 = _c.CFUNCTYPE(_c.c_int, _c.c_void_p, _c.c_int, _c.c_size_t, _c.c_int, _TABLE, _c.c_int, _c.c_int,
                        _c.POINTER(_c.c_int))
_COLL_V4 = _c.CFUNCTYPE(_c.c_int, _c.c_void_p, _c.c_int, _c.c_size_t, _c.c_int, _TABLE, _c.c_int, _c.c_int,
                        _c.c_int, _c.POINTER(_c.c_int))
_CHUNK = _c.CFUNCTYPE(_c.c_int, _c.c_void_p, _c.c_int, _c.c_size_t, _c.c_int, _c.c_int, _c.c_int,
                      _c.POINTER(_c.c_size_t))
_PINIT_V4 = _c.CFUNCTYPE(_c.c_int, _c.POINTER(_c.c_void_p), _c.POINTER(_c.c_int), _c.c_char_p, _c.c_uint64,
                         _c.c_int, _c.c_int, _c.c_int, LOGGER)
_PINIT_V5 = _c.CFUNCTYPE(_c.c_int, _c.POINTER(_c.c_void_p), _c.c_uint64, _c.POINTER(_c.c_int), _c.c_char_p,
                         _c.c_int, _c.c_int, _c.c_int, LOGGER)


def _struct(name: str, fields: list[tuple[str, type]]) -> type[ctypes.Structure]:
    return type(name, (ctypes.Structure,), {"_fields_": [("name", _c.c_char_p), *fields]})


TUNER_STRUCTS = {  # ncclTuner_vN_t (abi.h): a name, then function pointers in NCCL's order
    3: _struct("TunerV3", [("init", _INIT_V3), ("getCollInfo", _COLL_V3), ("destroy", _CLOSE)]),
    4: _struct("TunerV4", [("init", _INIT_V3), ("getCollInfo", _COLL_V4), ("destroy", _CLOSE)]),
    5: _struct("TunerV5", [("init", _INIT_V5), ("getCollInfo", _COLL_V4), ("finalize", _CLOSE)]),
    6: _struct("TunerV6", [("init", _INIT_V5), ("getCollInfo", _COLL_V4), ("finalize", _CLOSE),
                           ("getChunkSize", _CHUNK)]),
}
_PROFILER_TAIL = [("startEvent", _c.c_void_p), ("stopEvent", _c.c_void_p), ("recordEventState", _c.c_void_p),
                  ("finalize", _CLOSE)]
PROFILER_STRUCTS = {  # ncclProfiler_vN_t: only init and finalize are called from here
    4: _struct("ProfilerV4", [("init", _PINIT_V4), *_PROFILER_TAIL]),
    5: _struct("ProfilerV5", [("init", _PINIT_V5), *_PROFILER_TAIL]),
    6: _struct("ProfilerV6", [("init", _PINIT_V5), *_PROFILER_TAIL]),
}
PAIRED_PROFILER = {3: None, 4: 4, 5: 5, 6: 6}
"""The profiler ABI the NCCL releases that take each tuner ABI load beside it (2.22/2.23 have no v4+)."""


@dataclass(frozen=True)
class Selection:
    """What NCCL runs for a call after the plugin: the table's argmin, the plugin's channels and chunk."""

    algo: Algo
    proto: Proto
    nchannels: int
    """0: NCCL's own count."""
    chunk_bytes: int
    """What ``getChunkSize`` set (NCCL clamps it to its buffer and aligns it down); 0: NCCL's."""


Table = Sequence[Sequence[float]]


def cost_table(times: Mapping[tuple[Algo, Proto], float]) -> list[list[float]]:
    """An NCCL cost table (µs) with these entries available and every other one -1.

    >>> cost_table({(Algo.RING, Proto.SIMPLE): 12.5})[1]
    [-1.0, -1.0, 12.5]
    """
    table = [[IGNORE] * NUM_PROTOS for _ in range(NUM_ALGOS)]
    for (algo, proto), time in times.items():
        table[algo.nccl_index][proto.nccl_index] = float(time)
    return table


def nccl_select(table: Table) -> tuple[int, int] | None:
    """NCCL's choice (``topoGetAlgoInfo``): the lowest entry ≥ 0, strict ``<`` so ties go to the lower
    algorithm, then protocol; ``None`` if nothing is available (NCCL fails such a call).

    >>> nccl_select([[5.0, -1.0, 3.0], [3.0, 0.5, -1.0]])
    (1, 1)
    """
    best, choice = NCCL_MAX_TIME, None
    for a, row in enumerate(table):
        for p, value in enumerate(row):
            if value != IGNORE and 0.0 <= value < best:
                best, choice = value, (a, p)
    return choice


class EmulatedComm:
    """One communicator context of ``plugin``, opened and called as NCCL opens and calls it."""

    def __init__(self, plugin: Plugin, comm: int, *, nranks: int, nnodes: int = 1, rank: int = 0,
                 tuner_abi: int = 6, profiler_abi: int | str | None = "paired",
                 log: Callable[[int, int, str, int, str], None] | None = None) -> None:
        if tuner_abi not in TUNER_STRUCTS:
            raise ValueError(f"tuner ABI {tuner_abi}: the plugin exports {sorted(TUNER_STRUCTS)}")
        self.plugin, self.comm, self.tuner_abi = plugin, comm, tuner_abi
        self.profiler_abi = PAIRED_PROFILER[tuner_abi] if profiler_abi == "paired" else profiler_abi
        self._log = LOGGER((lambda *a: log(a[0], a[1], a[2].decode(), a[3], a[4].decode())) if log else 0)
        self.tuner = TUNER_STRUCTS[tuner_abi].in_dll(plugin.lib, f"ncclTunerPlugin_v{tuner_abi}")
        self.context, self.profiler_context = _c.c_void_p(), _c.c_void_p()
        self.profiler, self.event_mask = None, None
        if self.profiler_abi is not None:
            self.profiler = PROFILER_STRUCTS[self.profiler_abi].in_dll(plugin.lib, f"ncclProfiler_v{self.profiler_abi}")
            mask, pctx = _c.c_int(0), _c.byref(self.profiler_context)
            if self.profiler_abi >= 5:  # v5/v6: (ctx, commId, mask, commName, nNodes, nranks, rank, log)
                rc = self.profiler.init(pctx, comm, _c.byref(mask), None, nnodes, nranks, rank, self._log)
            else:  # v4: (ctx, mask, commName, commHash, nNodes, nranks, rank, log)
                rc = self.profiler.init(pctx, _c.byref(mask), None, comm, nnodes, nranks, rank, self._log)
            _check(rc, "profiler init")
            self.event_mask = mask.value
        if tuner_abi >= 5:
            _check(self.tuner.init(_c.byref(self.context), comm, nranks, nnodes, self._log, None, None), "init")
        else:
            _check(self.tuner.init(nranks, nnodes, self._log, _c.byref(self.context)), "init")
        self.local_ctx_id = max(c.local_ctx_id for c in plugin.comms())  # the one just opened: open them
        # from one thread at a time
        if self.profiler is None and tuner_abi < 5:
            plugin.set_comm_id(self.local_ctx_id, comm)  # what live does where no profiler paired

    def get_coll_info(self, op: Op, nbytes: int, table: Table, *, num_pipe_ops: int = 1,
                      reg_buff: int = 0) -> tuple[list[list[float]], int]:
        """One ``getCollInfo`` call: the cost table as the plugin left it, and ``*nChannels``."""
        num_algo, num_proto = len(table), len(table[0]) if len(table) else 0
        if any(len(row) != num_proto for row in table):
            raise ValueError("a cost table has the same number of protocols in every row")
        flat = (_c.c_float * max(1, num_algo * num_proto))(*[v for row in table for v in row])
        as_nccl_passes_it = _c.cast(flat, _TABLE)  # (float**)collCostTable: a cast, not row pointers
        nchannels = _c.c_int(0)
        args = (self.context, NCCL_FUNC[op], nbytes, num_pipe_ops, as_nccl_passes_it, num_algo, num_proto)
        if self.tuner_abi >= 4:
            args = (*args, reg_buff)
        _check(self.tuner.getCollInfo(*args, _c.byref(nchannels)), "getCollInfo")
        return [list(flat[a * num_proto:(a + 1) * num_proto]) for a in range(num_algo)], nchannels.value

    def get_chunk_size(self, op: Op, nbytes: int, algo: int, proto: int, *, nchannels: int = 1,
                       chunk_bytes: int = 0) -> int:
        """One ``getChunkSize`` call (tuner v6) with NCCL's chunk ``chunk_bytes``: what the plugin left."""
        chunk = _c.c_size_t(chunk_bytes)
        _check(self.tuner.getChunkSize(self.context, NCCL_FUNC[op], nbytes, algo, proto, nchannels, _c.byref(chunk)),
               "getChunkSize")
        return chunk.value

    def select(self, op: Op, nbytes: int, table: Table) -> Selection:
        """The config NCCL would run for this call: table argmin, channels, and chunk on tuner v6."""
        if len(table) != NUM_ALGOS or any(len(row) != NUM_PROTOS for row in table):
            raise ValueError(f"an NCCL cost table is {NUM_ALGOS}×{NUM_PROTOS} (algorithms × protocols)")
        after, nchannels = self.get_coll_info(op, nbytes, table)
        choice = nccl_select(after)
        if choice is None:
            raise ValueError(f"no entry of the cost table for {op} {nbytes} B is ≥ 0: NCCL would fail this call")
        algo, proto = choice
        chunk = self.get_chunk_size(op, nbytes, algo, proto) if self.tuner_abi >= 6 else 0
        return Selection(algo_of(algo), proto_of(proto), nchannels, chunk)

    def close(self) -> None:
        """``destroy``/``finalize`` of the tuner, then the profiler's ``finalize`` (NCCL's order)."""
        close = self.tuner.finalize if self.tuner_abi >= 5 else self.tuner.destroy
        _check(close(self.context), "finalize")
        if self.profiler is not None:
            _check(self.profiler.finalize(self.profiler_context), "finalize")

    def __enter__(self) -> EmulatedComm:
        return self

    def __exit__(self, *_exc_info) -> None:
        self.close()


def _check(result: int, call: str) -> None:
    if result:
        raise RuntimeError(f"the plugin's {call} returned ncclResult {result} (it must never fail)")
