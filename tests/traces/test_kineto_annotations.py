"""Kineto traces of PyTorch 1.13–2.0 (sizes on ``nccl:*`` annotations and ``c10d::*`` ops), the
8-rank DLRM step merged from a directory with each rank's clock kept, all-to-allv, coalesced calls."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from ccltwin.trace import app
from tests.testdata import DATA
from traces.errors import CcltwinWarning
from traces.kineto import read_kineto
from traces.kineto_calls import Spans
from traces.task import Op, Task
from traces.trace_file import load_trace

HTA16 = DATA / "traces" / "hta" / "16rank-rank0-alltoall-allgather-reducescatter.json.gz"
runner = CliRunner()


DLRM_TASKS = {  # per step: 3 gradient all-reduces, 5 embedding all-to-alls (one of them all-to-allv)
    Task(Op.ALLREDUCE, 394241 * 4, 8, "float32", "world"): 1.0,
    Task(Op.ALLREDUCE, 226960 * 4, 8, "float32", "world"): 1.0,
    Task(Op.ALLREDUCE, 112 * 4, 8, "float32", "world"): 1.0,
    Task(Op.ALLTOALL, 6144 * 4, 8, "float32", "world"): 2.0,
    Task(Op.ALLTOALL, 24 * 8, 8, "int64", "world"): 1.0,
    Task(Op.ALLTOALL, 384 * 4, 8, "int32", "world"): 1.0,
    Task(Op.ALLTOALL, 13312 * 4, 8, "int32", "world"): 1.0,  # all-to-allv: rank 3's 13,312 of int32
}


def first_nccl_kernel(path: Path) -> float:
    events = json.loads(path.read_text())["traceEvents"]
    return min(e["ts"] for e in events if e.get("cat") == "kernel" and e["name"].startswith("ncclKernel"))


def test_dlrm_eight_ranks_from_a_directory(dlrm, tmp_path):
    """The 8-rank PyTorch 2.0-era profile that used to import as "0 distinct tasks"."""
    out = tmp_path / "dlrm.json"
    result = runner.invoke(app, ["import", str(dlrm / "dlrm_kineto"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "8 rank(s) in the trace, 722 events, 7 distinct tasks" in result.output
    trace = load_trace(out)
    assert trace.world_size == 8 and [r.rank for r in trace.ranks] == list(range(8))
    assert trace.tasks() == DLRM_TASKS and trace.unsized() == 0
    assert trace.metadata["devices"] == ["Tesla V100-SXM2-32GB"] and trace.metadata["profiler_steps"] == [10]
    # all-to-allv: each rank sent a different amount in the 4th call on the group
    (uneven,) = trace.metadata["alltoallv"]
    assert uneven["call"] == 3 and uneven["bytes"]["3"] == 13312 * 4 and uneven["bytes"]["0"] == 3392 * 4
    # each rank keeps its own clock: the first NCCL kernel starts where that rank's file says
    files = sorted((dlrm / "dlrm_kineto").glob("worker*.json"), key=lambda p: int(p.name[6]))
    starts = [next(e.start_us for e in r.events if hasattr(e, "op")) for r in trace.ranks]
    assert starts == [first_nccl_kernel(f) for f in files] and len(set(starts)) == 8


def test_same_job_from_files_in_any_order(dlrm):
    files = sorted((dlrm / "dlrm_kineto").glob("worker*.json"))
    assert read_kineto(files[::-1]).tasks() == read_kineto(files).tasks() == DLRM_TASKS


def test_sixteen_rank_job_all_ops():
    """_allgather_base and _reduce_scatter_base (their c10d ops give output and input: 8 ranks of the 16,
    assumed to be the 8 around rank 0, and said), all-to-all and all-reduce (on all ranks)."""
    with pytest.warns(CcltwinWarning, match=r"16rank-rank0-alltoall-allgather-reducescatter\.json\.gz: "
                      r"reducescatter with 25165824 elements in all and 3145728 per rank runs on 8 of the job's 16 "
                      r"ranks; the profile names no groups, so ranks 0-7 are assumed"):
        trace = read_kineto([HTA16])
    assert (trace.world_size, trace.iterations, trace.unsized()) == (16, 5, 0)
    assert trace.group("assumed:0-7").ranks == tuple(range(8))
    tasks = trace.tasks()
    assert tasks[Task(Op.ALLGATHER, 65536 * 64 * 4, 8, "float32", "assumed:0-7")] == 1.0
    assert tasks[Task(Op.REDUCESCATTER, 65536 * 384 * 4, 8, "float32", "assumed:0-7")] == 1.0
    assert tasks[Task(Op.ALLTOALL, 3145728 * 4, 16, "float32", "world")] == 2.0  # input 3145728 > output
    assert tasks[Task(Op.ALLREDUCE, 366336 * 4, 16, "float32", "world")] == 1.0
    assert {t.op for t in tasks} == {Op.ALLREDUCE, Op.ALLGATHER, Op.REDUCESCATTER, Op.ALLTOALL}


# ---- coalesced calls and the span index, on generated profiles -----------------------------


def profile(calls: list[tuple[str, int]], coalesced: bool) -> dict:
    """A PyTorch 2.0-style profile: one ``nccl:<op>`` annotation per call; one NCCL kernel per call,
    or one for all of them inside ``nccl:coalesced``."""
    events, ts = [], 1000.0

    def launch(correlation: int, at: float, kernel: str) -> None:
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "tid": 7, "ts": at,
                       "dur": 1, "args": {"correlation": correlation}})
        events.append({"ph": "X", "cat": "kernel", "name": f"ncclKernel_{kernel}_RING_LL_Sum_float",
                       "tid": 9, "ts": at + 50, "dur": 10, "args": {"stream": 9, "correlation": correlation}})

    for index, (op, n) in enumerate(calls):
        events.append({"ph": "X", "cat": "user_annotation", "name": f"nccl:{op}", "tid": 7, "ts": ts, "dur": 5,
                       "args": {"Input Dims": [[n]], "Input type": ["float"]}})
        if not coalesced:
            launch(index + 1, ts + 2, "AllReduce")
        ts += 10
    if coalesced:
        events.append({"ph": "X", "cat": "user_annotation", "name": "nccl:coalesced", "tid": 7, "ts": ts,
                       "dur": 5, "args": {}})
        launch(100, ts + 2, "AllReduce")
    return {"traceEvents": events, "distributedInfo": {"rank": 0, "world_size": 4}}


sizes = st.lists(st.integers(1, 1 << 20), min_size=1, max_size=6)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=sizes)
def test_coalesced_is_one_call_of_the_summed_size(tmp_path, sizes):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(profile([("all_reduce", n) for n in sizes], coalesced=True)))
    assert read_kineto([path]).tasks() == {Task(Op.ALLREDUCE, 4 * sum(sizes), 4, "float32", "world"): 1.0}
    path.write_text(json.dumps(profile([("all_reduce", n) for n in sizes], coalesced=False)))
    assert [e.nbytes for _, e in read_kineto([path]).collectives()] == [4 * n for n in sizes]


def test_coalesced_mixed_ops_stay_unsized_and_said(tmp_path):
    """A coalesced group of different ops is no one collective: op from the kernel, size unknown, and said."""
    path = tmp_path / "r.json"
    path.write_text(json.dumps(profile([("all_reduce", 8), ("broadcast", 8), ("all_reduce", 8)], True)))
    trace = read_kineto([path])
    assert trace.metadata["not_imported"] == {"coalesced calls of mixed ops or types": 1}
    assert trace.tasks() == {} and trace.unsized() == 1


@given(st.lists(st.tuples(st.integers(0, 100), st.integers(0, 20)), max_size=30), st.integers(-5, 130))
def test_spans_holding_is_the_innermost(spans, ts):
    index = Spans()
    nested = []
    for start, length in spans:
        index.add(0, float(start), float(start + length), (start, length))
        nested.append((start, length))
    holders = [(s, n) for s, n in nested if s <= ts <= s + n]
    found = index.holding(0, float(ts))
    if not holders:
        assert found is None
    else:
        assert found in holders and found[0] == max(s for s, _ in holders)


def test_directory_without_traces(tmp_path):
    (tmp_path / "notes.md").write_text("not a trace")
    result = runner.invoke(app, ["import", str(tmp_path), "-o", str(tmp_path / "out.json")])
    assert result.exit_code == 2 and result.output.count("\n") == 1
    assert f"{tmp_path}: no trace files" in result.output and not (tmp_path / "out.json").exists()


def test_coalesced_record_param_comms_skip_waits(tmp_path):
    """PyTorch ≥ 2.1 names coalesced members on record_param_comms; a ``wait`` between them is no member."""
    events, ts = [], 1000.0
    for name, n in [("allreduce", 100), ("wait", 0), ("allreduce", 300)]:
        events.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "tid": 7, "ts": ts, "dur": 5,
                       "args": {"Collective name": name, "dtype": "BFloat16", "In msg nelems": n,
                                "Out msg nelems": n, "Group size": 2, "Process Group Name": "0",
                                "Process Group Ranks": "[0, 1]"}})
        ts += 10
    events += [
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "tid": 7, "ts": ts, "dur": 5,
         "args": {"Collective name": "coalesced", "Process Group Name": "0"}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "tid": 7, "ts": ts + 1, "dur": 1,
         "args": {"correlation": 5}},
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(x)", "tid": 9,
         "ts": ts + 20, "dur": 10, "args": {"stream": 9, "correlation": 5}},
    ]
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"traceEvents": events, "distributedInfo": {"rank": 0, "world_size": 2}}))
    assert read_kineto([path]).tasks() == {Task(Op.ALLREDUCE, 800, 2, "bfloat16", "0"): 1.0}
