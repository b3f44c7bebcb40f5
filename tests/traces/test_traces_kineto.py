"""Kineto import: the real HTA traces, multi-rank merges, bad input, and the streaming reader."""

from __future__ import annotations

import gzip
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.testdata import DATA
from traces import json_stream
from traces.errors import TraceError
from traces.json_stream import stream_object
from traces.kineto import read_kineto
from traces.schema import CollectiveEvent, ComputeEvent
from traces.task import Op, Task

HTA = DATA / "traces" / "hta"


def test_a100_rank0():
    trace = read_kineto([HTA / "a100-2rank-nccl_data.json.gz"])
    assert (trace.world_size, [r.rank for r in trace.ranks], trace.iterations) == (2, [0], 3)
    assert trace.metadata["nccl_version"] == "2.17.1" and trace.metadata["profiler_steps"] == [4, 5, 6]
    ops = [e.op for _, e in trace.collectives()]
    assert (ops.count(Op.ALLREDUCE), ops.count(Op.BROADCAST)) == (15, 6)
    tasks = trace.tasks()
    assert len(tasks) == 7 and set(tasks.values()) == {1.0}  # 5 DDP buckets + 2 buffer broadcasts per step
    assert tasks[Task(Op.ALLREDUCE, 2049000 * 4, 2, "float32", "0")] == 1.0
    assert tasks[Task(Op.BROADCAST, 53 * 8, 2, "int64", "0")] == 1.0
    events = trace.ranks[0].events
    assert all(e.start_us <= e.end_us for e in events) and all(
        isinstance(e, CollectiveEvent | ComputeEvent) for e in events
    )
    first = next(e for e in events if isinstance(e, CollectiveEvent))
    assert first.after and first.stream == "40"


def test_v100_without_sizes():
    """PyTorch of late 2022 recorded no collective args: op and dtype come from the kernel name."""
    trace = read_kineto([HTA / "v100-2rank-ddp-small-allreduce.json.gz"])
    assert ([r.rank for r in trace.ranks], trace.iterations, trace.unsized()) == ([1], 5, 2020)
    collectives = [e for _, e in trace.collectives()]
    assert {(e.op, e.nbytes, e.dtype, e.group) for e in collectives} == {
        (Op.ALLREDUCE, None, "float32", "world")
    }
    assert trace.tasks() == {}
    assert trace.group("world").ranks == (0, 1)


# ---- synthetic multi-rank sets ------------------------------------------------------------


def kineto_doc(rank: int, world: int = 2, sizes=(1024, 4096), steps: int = 2) -> dict:
    events, ts, corr = [], 1000.0, 1
    for step in range(steps):
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{step}",
                "ts": ts,
                "dur": 500.0,
                "tid": 1,
                "args": {},
            }
        )
        for nelems in sizes:
            events += [
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "ts": ts + 1,
                    "dur": 2,
                    "tid": 1,
                    "args": {"correlation": corr},
                },
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": "gemm",
                    "ts": ts + 5,
                    "dur": 20.0,
                    "args": {"stream": 7, "correlation": corr},
                },
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "ts": ts + 3,
                    "dur": 2,
                    "tid": 1,
                    "args": {"correlation": corr + 1},
                },
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(x)",
                    "ts": ts + 30,
                    "dur": 40.0,
                    "args": {
                        "stream": 20,
                        "correlation": corr + 1,
                        "Collective name": "allreduce",
                        "In msg nelems": nelems,
                        "Out msg nelems": nelems,
                        "Group size": world,
                        "dtype": "BFloat16",
                        "Process Group Name": "0",
                        "Process Group Ranks": str(list(range(world))),
                    },
                },
            ]
            ts, corr = ts + 100, corr + 2
        ts += 200
    return {
        "schemaVersion": 1,
        "traceEvents": events,
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world, "nccl_version": "2.21.5"},
    }


def write(tmp_path, name, doc, gz=False):
    path = tmp_path / name
    text = json.dumps(doc)
    path.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    return path


def test_merge_ranks(tmp_path):
    paths = [write(tmp_path, f"r{r}.json.gz", kineto_doc(r), gz=True) for r in (1, 0)]
    trace = read_kineto(paths)
    assert [r.rank for r in trace.ranks] == [0, 1] and trace.iterations == 2
    assert trace.tasks() == {
        Task(Op.ALLREDUCE, 2048, 2, "bfloat16", "0"): 1.0,
        Task(Op.ALLREDUCE, 8192, 2, "bfloat16", "0"): 1.0,
    }
    events = trace.ranks[0].events
    assert [type(e).__name__ for e in events[:2]] == ["ComputeEvent", "CollectiveEvent"]
    assert events[1].after == (0,) and events[0].duration_us == 20.0


@pytest.mark.parametrize(
    ("docs", "problem"),
    [
        (
            [kineto_doc(0), kineto_doc(1, sizes=(1024, 999))],
            r"r1\.json, rank 1, event \d+: collective #1 on group '0'",
        ),
        ([kineto_doc(0), kineto_doc(1, steps=1)], r"r1\.json, rank 1: issues 2 collectives on group '0'"),
        ([kineto_doc(0), kineto_doc(0)], r"r1\.json: rank 0 is also in"),
        ([kineto_doc(0), kineto_doc(1, world=4)], r"r1\.json: world size 4 here but 2 in"),
        ([{"traceEvents": []}], r"r0\.json: no distributedInfo"),
        ([{"distributedInfo": {"rank": 0, "world_size": 1}}], r"r0\.json: no 'traceEvents' array"),
    ],
)
def test_bad_sets(tmp_path, docs, problem):
    paths = [write(tmp_path, f"r{i}.json", doc) for i, doc in enumerate(docs)]
    with pytest.raises(TraceError, match=problem):
        read_kineto(paths)


def test_unknown_collective_and_dtype(tmp_path):
    doc = kineto_doc(0, world=1)
    doc["traceEvents"][4]["args"]["Collective name"] = "allfrobnicate"
    with pytest.raises(
        TraceError, match=r"r\.json: NCCL kernel at [\d.]+ µs: unknown collective 'allfrobnicate'"
    ):
        read_kineto([write(tmp_path, "r.json", doc)])
    doc = kineto_doc(0, world=1)
    doc["traceEvents"][4]["args"]["dtype"] = "Complex"
    with pytest.raises(TraceError, match="unknown dtype 'Complex'"):
        read_kineto([write(tmp_path, "r.json", doc)])


@pytest.mark.parametrize("cut", [0.1, 0.999])
def test_truncated_files(tmp_path, cut):
    text = (HTA / "a100-2rank-nccl_data.json.gz").read_bytes()
    raw = gzip.decompress(text)
    path = tmp_path / "cut.json"
    path.write_bytes(raw[: int(len(raw) * cut)])
    with pytest.raises(TraceError, match=r"cut\.json: (truncated|malformed) JSON"):
        read_kineto([path])
    gz = tmp_path / "cut.json.gz"
    gz.write_bytes(text[: int(len(text) * cut)])
    with pytest.raises(TraceError, match=r"cut\.json\.gz: "):
        read_kineto([gz])


json_scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
)
json_values = st.recursive(
    json_scalars, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(), c, max_size=4), max_leaves=20
)


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    others=st.dictionaries(st.text().filter(lambda k: k != "items"), json_values, max_size=4),
    items=st.lists(json_values, max_size=20),
    chunk=st.sampled_from([1, 3, 64, 1 << 20]),
    indent=st.sampled_from([None, 1]),
)
def test_stream_object_matches_json(tmp_path, monkeypatch, others, items, chunk, indent):
    monkeypatch.setattr(json_stream, "_CHUNK", chunk)
    doc = dict(others)
    doc["items"] = items
    path = tmp_path / "d.json"
    path.write_text(json.dumps(doc, indent=indent))
    seen = []
    assert stream_object(str(path), "items", seen.append) == others
    assert seen == items


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(items=st.lists(json_values, min_size=1, max_size=10), data=st.data())
def test_stream_object_truncated(tmp_path, monkeypatch, items, data):
    monkeypatch.setattr(json_stream, "_CHUNK", 5)
    text = json.dumps({"a": 1, "items": items})
    cut = data.draw(st.integers(0, len(text) - 1))
    path = tmp_path / "d.json"
    path.write_text(text[:cut])
    with pytest.raises(TraceError, match=r"d\.json: "):
        stream_object(str(path), "items", lambda _: None)


kineto_events = st.lists(
    st.fixed_dictionaries(
        {
            "cat": st.sampled_from(["kernel", "cuda_runtime", "cpu_op", "user_annotation", "gpu_memcpy"]),
            "name": st.sampled_from(
                [
                    "ncclKernel_AllReduce_RING_LL_Sum_float(x)",
                    "ncclDevKernel_SendRecv(x)",
                    "ncclKernel_Generic_x",
                    "gemm",
                    "record_param_comms",
                    "ProfilerStep#3",
                    "nccl:all_reduce",
                    "nccl:_all_gather_base",
                    "nccl:coalesced",
                    "c10d::alltoall_base_",
                    "aten::addmm",
                    "aten::_scaled_dot_product_flash_attention",
                ]
            ),
            "ts": st.floats(0, 1e6) | st.integers(0, 10**6),
            "dur": st.floats(0, 1e3) | st.text(max_size=1),
            "tid": st.integers(0, 2),
            "args": st.fixed_dictionaries(
                {},
                optional={
                    "stream": st.integers(0, 3),
                    "correlation": st.integers(0, 5),
                    "Collective name": st.sampled_from(
                        ["allreduce", "allgather", "wait", "send", "bogus", "barrier"]
                    ),
                    "In msg nelems": st.integers(-1, 100),
                    "Out msg nelems": st.integers(0, 100),
                    "dtype": st.sampled_from(["Float", "Half", "Qint"]),
                    "Group size": st.integers(0, 3),
                    "Process Group Name": st.sampled_from(["0", "1"]),
                    "Process Group Ranks": st.sampled_from(["[0, 1]", "[]", "x"]),
                    "Input Dims": st.lists(st.lists(st.integers(-2, 9) | st.text(max_size=1), max_size=4)
                                           | st.integers(), max_size=4) | st.text(max_size=2),
                    "Input type": st.lists(st.sampled_from(["float", "c10::Half", "long int", "Scalar", ""])
                                           | st.integers(), max_size=4) | st.none(),
                },
            ),
        }
    ),
    max_size=12,
)


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=kineto_events, rank=st.integers(0, 1))
def test_random_kineto_raises_only_trace_error(tmp_path, events, rank):
    path = write(
        tmp_path, "k.json", {"traceEvents": events, "distributedInfo": {"rank": rank, "world_size": 2}}
    )
    try:
        trace = read_kineto([path])
    except TraceError as err:
        assert "k.json" in str(err)
    else:
        assert trace.ranks[0].rank == rank
