"""live.nccl_source on the real plugin, driven as NCCL drives it: getCollInfo through the tuner
ABI and the collective's profiler events (start, kernel channel start and stop) through the
profiler ABI, as ``tests/live/test_plugin_events.py`` does. No GPU: the events carry the GPU
timestamps NCCL would have read."""

from __future__ import annotations

import ctypes

from plugin_support import fresh_plugin
from test_plugin_events import _Coll, _Descr, _KernelCh

from live.nccl_source import NcclObserver, NcclSource
from live.observe import key_of
from live.plugin.emulate import PROFILER_STRUCTS, EmulatedComm, cost_table
from live.schedule import Rule, TaskKey, install
from traces.task import Op, Task
from tuner.config import Algo, Config, Proto, Transport

COMM = 0x5EED
TABLE = cost_table({(Algo.RING, Proto.LL): 7.0, (Algo.RING, Proto.SIMPLE): 9.0, (Algo.TREE, Proto.LL): 8.0})


def _profile(plugin, comm, seq: int, algo: bytes, proto: bytes, channels: int, start_ns: int, ns: int) -> None:
    """The events NCCL's profiler gets for one AllReduce of 5,200 floats."""
    prof = PROFILER_STRUCTS[5].in_dll(plugin.lib, "ncclProfiler_v5")
    start = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                             ctypes.POINTER(_Descr))(prof.startEvent)
    stop = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)(prof.stopEvent)
    record = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_uint64))(
        prof.recordEventState)
    coll = ctypes.c_void_p()
    d = _Descr(type=1 << 1)
    d.u.coll = _Coll(seqNumber=seq, func=b"AllReduce", count=5200, datatype=b"ncclFloat32", nChannels=channels,
                     nWarps=16, algo=algo, proto=proto)
    assert start(comm.profiler_context, ctypes.byref(coll), ctypes.byref(d)) == 0
    assert stop(coll) == 0
    for channel in range(channels):  # the last channel stops last
        ch, k = ctypes.c_void_p(), _Descr(type=1 << 6, parentObj=coll)
        k.u.kernelCh = _KernelCh(channelId=channel, pTimer=start_ns + channel)
        assert start(comm.profiler_context, ctypes.byref(ch), ctypes.byref(k)) == 0
        assert record(ch, 22, ctypes.byref(ctypes.c_uint64(start_ns + ns - channels + 1 + channel))) == 0
        assert stop(ch) == 0


def test_calls_their_gpu_times_and_nccls_own_config_come_from_the_plugin():
    plugin = fresh_plugin()
    said = []
    source = NcclSource(plugin, (2, 28, 9), sm_count=132, sm_version=90)
    observer = NcclObserver(plugin, source, say=said.append)
    with EmulatedComm(plugin, COMM, nranks=2, nnodes=1, rank=1, tuner_abi=5) as comm:
        comm.select(Op.ALLREDUCE, 20_800, TABLE)
        first = observer.poll()
        task = observer.task(key_of(first[0]))
        assert not source.ready(task)  # NCCL's own config is known once its call is timed
        _profile(plugin, comm, 0, b"RING", b"LL", 2, 1_000, 7_500)
        key = TaskKey(COMM, Op.ALLREDUCE, 20_800)
        install(plugin, Rule(key, 1, (Algo.TREE, Proto.LL, 4, 0), 3))
        comm.select(Op.ALLREDUCE, 20_800, TABLE)
        _profile(plugin, comm, 1, b"TREE", b"LL", 4, 20_000, 9_250)
        second = observer.poll()
    task = observer.task(key)
    assert task == Task(Op.ALLREDUCE, 20_800, 2, "float32", "2x1")
    assert observer.views.by_comm[COMM].rank == 1 and source.ready(task)
    assert source.default_config(task) == Config(Algo.RING, Proto.LL, Transport.P2P, 2, 512, 32_768)
    facts = source.facts(task)
    assert (facts.nvls, facts.pat, facts.ll128, facts.channel_cap) == (False, False, False, 4)
    (call,) = second
    assert (call.algo, call.nchannels, call.version) == (Algo.TREE, 4, 3)
    assert source.time_us(task, None, call) == 9.25
    assert source.time_us(task, None, call) is None  # one event, one time
    assert source.time_us(task, None, first[0]) == 7.5 and not said
