"""The profiler side, driven from C as NCCL drives it (tests/live/plugin_harness.c): coll events with
NCCL's descriptors for profiler ABI v4 (NCCL 2.27), v5 (2.28) and v6 (2.29/2.30), kernel-channel events
from another thread, pairing with the tuner init, and the whole plugin under ThreadSanitizer and
AddressSanitizer + UBSan with many threads at once."""

from __future__ import annotations

import ctypes

import pytest
from plugin_support import fresh_plugin, records, run_harness

from live.plugin.binding import Event
from live.plugin.emulate import PROFILER_STRUCTS, EmulatedComm
from traces.task import Op
from tuner.config import Algo, Proto

UNKNOWN = 2**64 - 1


@pytest.mark.parametrize("abi", [4, 5, 6])
def test_coll_events_carry_what_nccl_ran_and_gpu_times(abi):
    done = run_harness("events", str(abi))
    assert done.returncode == 0, done.stderr
    (before,), after = records(done.stdout, "comm")[:1], records(done.stdout, "comm")[1:]
    assert before == dict(comm=77, local=1, nranks=4, nnodes=1, rank=2, tuner=abi, profiler=abi, alive=1)
    assert after == [before | dict(alive=0)]
    assert "mask 66" in done.stdout  # ncclProfileColl | ncclProfileKernelCh
    assert "untracked_handle (nil)" in done.stdout
    events = records(done.stdout, "event")
    # channel c of a collective started at t0 runs [t0 + 100c, t0 + 1000 + 200c] (GPU globaltimer ns)
    common = dict(comm=77, timer=0)
    # AllGather of bf16 over 4 ranks, RING LL128
    assert events[0] == common | dict(coll=2, nbytes=1024 * 2 * 4, seq=0, algo=1, proto=1, nchannels=2, nwarps=16,
                                      start=1000, stop=2200, occurrence=0, dtype=9)
    assert events[1] == common | dict(coll=4, nbytes=256 * 4, seq=0, algo=0, proto=2, nchannels=1, nwarps=8,
                                      start=5000, stop=6000, occurrence=0, dtype=7)  # AllReduce fp32, TREE SIMPLE
    assert events[2] == events[0] | dict(seq=1, start=9000, stop=10200, occurrence=1)
    unknown = events[3]  # names this plugin does not know yet, and no channels: host times
    assert [unknown[k] for k in ("coll", "nbytes", "algo", "proto", "timer", "dtype")] == [-1, 0, -1, -1, 1, -1]
    assert unknown["occurrence"] == UNKNOWN and 0 < unknown["start"] <= unknown["stop"]
    assert len(events) == 4


@pytest.mark.parametrize(("setting", "mask"), [("coll", 2), ("off", 0)])
def test_events_setting_chooses_what_nccl_reports(setting, mask):
    done = run_harness("events", "5", env={"CCLTWIN_LIVE_EVENTS": setting})
    assert done.returncode == 0, done.stderr
    assert f"mask {mask}\n" in done.stdout
    events = records(done.stdout, "event")  # the harness still calls: without kernel events all are host-timed
    assert [e["timer"] for e in events] == [1, 1, 1, 1]


@pytest.mark.parametrize("sanitizer", ["plain", "thread", "address"])
def test_many_threads_at_full_speed(sanitizer):
    threads, iters = (8, 20000) if sanitizer == "plain" else (6, 2000)
    done = run_harness("stress", str(threads), str(iters), sanitizer=sanitizer)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "WARNING: ThreadSanitizer" not in done.stderr and "ERROR: AddressSanitizer" not in done.stderr
    (summary,) = records("stress " + done.stdout.strip(), "stress")
    assert summary["mismatches"] == 0
    assert summary["decisions"] + summary["dropped_decisions"] == threads * iters
    assert summary["events"] + summary["dropped_events"] == threads * iters


@pytest.mark.parametrize("abi", [4, 5, 6])
def test_event_flow_is_clean_under_address_sanitizer(abi):
    done = run_harness("events", str(abi), sanitizer="address")
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(records(done.stdout, "event")) == 4


class _Coll(ctypes.Structure):  # the coll member of ncclProfilerEventDescr_v5_t (abi.h: ct_prof_coll_v5_t)
    _fields_ = [("seqNumber", ctypes.c_uint64), ("func", ctypes.c_char_p), ("sendBuff", ctypes.c_void_p),
                ("recvBuff", ctypes.c_void_p), ("count", ctypes.c_size_t), ("root", ctypes.c_int),
                ("datatype", ctypes.c_char_p), ("nChannels", ctypes.c_uint8), ("nWarps", ctypes.c_uint8),
                ("algo", ctypes.c_char_p), ("proto", ctypes.c_char_p), ("parentGroup", ctypes.c_void_p)]


class _KernelCh(ctypes.Structure):
    _fields_ = [("channelId", ctypes.c_uint8), ("pTimer", ctypes.c_uint64)]


class _Descr(ctypes.Structure):  # ncclProfilerEventDescr_v5_t: type, parentObj, rank, then the union at 24
    _fields_ = [("type", ctypes.c_uint64), ("parentObj", ctypes.c_void_p), ("rank", ctypes.c_int),
                ("u", type("U", (ctypes.Union,), {"_fields_": [("coll", _Coll), ("kernelCh", _KernelCh)]}))]


def test_the_binding_reads_events_as_the_profiler_wrote_them():
    plugin = fresh_plugin()
    prof = PROFILER_STRUCTS[5].in_dll(plugin.lib, "ncclProfiler_v5")
    start = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                             ctypes.POINTER(_Descr))(prof.startEvent)
    stop = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)(prof.stopEvent)
    record = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_uint64))(
        prof.recordEventState)
    with EmulatedComm(plugin, 0x42, nranks=8, tuner_abi=5) as comm:
        for seq, (dtype, count) in enumerate([(b"ncclBfloat16", 4096), (b"ncclFloat8e4m3", 64)]):
            coll, ch = ctypes.c_void_p(), ctypes.c_void_p()
            d = _Descr(type=1 << 1)
            d.u.coll = _Coll(seqNumber=seq, func=b"ReduceScatter", count=count, datatype=dtype, nChannels=1,
                             nWarps=20, algo=b"PAT", proto=b"SIMPLE")
            assert start(comm.profiler_context, ctypes.byref(coll), ctypes.byref(d)) == 0 and coll.value
            k = _Descr(type=1 << 6, parentObj=coll)
            k.u.kernelCh = _KernelCh(channelId=0, pTimer=10_000 * (seq + 1))
            assert start(comm.profiler_context, ctypes.byref(ch), ctypes.byref(k)) == 0 and ch.value
            assert stop(coll) == 0
            assert record(ch, 22, ctypes.byref(ctypes.c_uint64(10_000 * (seq + 1) + 2_500))) == 0
            assert stop(ch) == 0
    first, second = plugin.drain_events()
    assert first == Event(0x42, Op.REDUCESCATTER, 4096 * 2 * 8, 0, 0, Algo.PAT, Proto.SIMPLE, 1, 20, 10_000, 12_500,
                          True, "bfloat16")
    assert (second.nbytes, second.dtype, second.duration_ns, second.seq) == (64 * 8, "fp8_e4m3", 2_500, 1)
    assert plugin.dropped().events == 0
