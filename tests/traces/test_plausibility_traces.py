"""The shared plausibility checks on Kineto and flight-recorder events: the impossible is an error
naming file, rank and event; a 0 µs time a warning."""

from __future__ import annotations

import gzip
import json
import re
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from ccltwin import app
from tests.testdata import DATA
from tests.traces.test_kineto_annotations import HTA16, profile
from traces.errors import CcltwinWarning, TraceError
from traces.flight_recorder import read_flight_recorder
from traces.kineto import read_kineto
from traces.plausibility import implausible_call
from traces.task import Op

FR = sorted((DATA / "traces" / "flight-recorder").glob("nccl_trace_rank_*.json"))
runner = CliRunner()


def dlrm_rank0(dlrm) -> dict:
    return json.loads(next((dlrm / "dlrm_kineto").glob("worker0_*.json")).read_text())


def first_allreduce(doc: dict) -> dict:
    """The first NCCL all-reduce kernel: 394,241 float32 on 8 ranks."""
    return min((e for e in doc["traceEvents"] if e.get("name", "").startswith("ncclKernel_AllReduce")),
               key=lambda e: e["ts"])


def test_kineto_kernel_faster_than_any_link(tmp_path):
    """Rank 0 of 16, its NCCL kernels (up to a 1.7 GiB all-reduce) said to take 1 µs each."""
    doc = json.loads(gzip.decompress(HTA16.read_bytes()))
    for event in doc["traceEvents"]:
        if event.get("name", "").startswith("ncclKernel_"):
            event["dur"] = 1.0
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(doc))
    result = runner.invoke(app, ["trace", "import", str(path), "-o", str(tmp_path / "out.json")])
    lines = result.output.splitlines()  # the error, and the warning that 8-rank groups are assumed
    (error,) = [line for line in lines if not line.startswith("warning: ")]
    assert result.exit_code == 2 and len(lines) == 2
    assert not (tmp_path / "out.json").exists()
    assert re.search(rf"^error: {re.escape(str(path))}, rank 0, event \d+: ncclKernel_\S* .*busbw \S+ GB/s is "
                     "outside 0 to 10000 GB/s", error)


def test_kineto_kernel_of_zero_time_is_a_warning(dlrm, tmp_path):
    doc = dlrm_rank0(dlrm)
    first_allreduce(doc)["dur"] = 0
    path = tmp_path / "worker0.json"
    path.write_text(json.dumps(doc))
    with pytest.warns(CcltwinWarning, match=r"worker0\.json, rank 0, event \d+ \(ncclKernel_AllReduce.*timed at 0 us"):
        trace = read_kineto([path])
    zero = next(e for _, e in trace.collectives() if e.op is Op.ALLREDUCE)
    assert zero.start_us == zero.end_us and zero.nbytes == 394241 * 4
    result = runner.invoke(app, ["trace", "import", str(path), "-o", str(tmp_path / "out.json")])
    assert result.exit_code == 0 and "warning: " in result.output


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 1 << 28), dur=st.one_of(st.floats(1e-3, 1e4), st.just(0.0)))
def test_kineto_any_duration_is_kept_or_refused_as_the_check_says(tmp_path, n, dur):
    doc = profile([("all_reduce", n)], coalesced=False)
    kernel = next(e for e in doc["traceEvents"] if e["cat"] == "kernel")
    kernel["dur"] = dur
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    problem = implausible_call(Op.ALLREDUCE, nbytes=4 * n, nranks=4, time_us=dur) if dur else None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CcltwinWarning)
        if problem:
            with pytest.raises(TraceError, match=rf"r\.json, rank 0, event 0: .*{re.escape(problem)}"):
                read_kineto([path])
            return
        (event,) = [e for _, e in read_kineto([path]).collectives()]
    assert event.end_us - event.start_us == pytest.approx(dur) and len(caught) == (dur == 0)


def fr_with(duration_ms: float, tmp_path) -> list:
    docs = [json.loads(p.read_text()) for p in FR]
    entry = next(e for e in docs[0]["entries"] if e["profiling_name"] == "nccl:all_reduce")
    entry["duration_ms"] = duration_ms
    paths = []
    for path, doc in zip(FR, docs, strict=True):
        paths.append(tmp_path / path.name)
        paths[-1].write_text(json.dumps(doc))
    return paths


@pytest.mark.parametrize(("duration_ms", "problem"), [
    (-1.0, r"time -1000\.0 us is not a positive finite number"),
    (1e-9, r"busbw \S+ GB/s is outside 0 to 10000 GB/s"),
])
def test_flight_recorder_impossible_times(tmp_path, duration_ms, problem):
    with pytest.raises(TraceError, match=rf"nccl_trace_rank_0\.json, rank 0, event \d+: nccl:all_reduce: {problem}"):
        read_flight_recorder(fr_with(duration_ms, tmp_path))


def test_flight_recorder_zero_time_is_a_warning(tmp_path):
    with pytest.warns(CcltwinWarning, match=r"nccl_trace_rank_0\.json, rank 0, event \d+ \(nccl:all_reduce\): "
                                            "timed at 0 us"):
        trace = read_flight_recorder(fr_with(0.0, tmp_path))
    rank0 = [e for r, e in trace.collectives() if r == 0 and e.op is Op.ALLREDUCE]
    assert [e.duration_us for e in rank0].count(None) == 1
    assert 0.0 not in [e.duration_us for _, e in trace.collectives()]
    timed = read_flight_recorder(FR)
    assert [e.duration_us for r, e in timed.collectives() if r == 0 and e.op is Op.ALLREDUCE].count(None) == 0
