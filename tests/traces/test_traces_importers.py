"""Execution-trace (Chakra) and flight-recorder imports, and the ``ccltwin trace`` commands."""

from __future__ import annotations

import gzip
import json
import tarfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from ccltwin.trace import app
from tests.testdata import DATA
from traces.chakra import read_chakra
from traces.errors import TraceError
from traces.flight_recorder import read_flight_recorder
from traces.formats import detect_format
from traces.task import Op, Task
from traces.trace_file import load_trace

FR = DATA / "traces" / "flight-recorder"
FR_FILES = sorted(FR.glob("nccl_trace_rank_*.json"))
RESNET = DATA / "traces" / "param" / "resnet_2gpu_et.json.gz"


@pytest.fixture(scope="module")
def chakra_sample(tmp_path_factory) -> Path:
    """The JSON inside tests/data/traces/chakra/1.0.2-chakra.0.0.4.tgz."""
    out = tmp_path_factory.mktemp("chakra") / "1.0.2-chakra.0.0.4.json"
    with tarfile.open(DATA / "traces" / "chakra" / "1.0.2-chakra.0.0.4.tgz") as archive:
        out.write_bytes(archive.extractfile(out.name).read())  # no extract(filter=): Python < 3.11.4 lacks it
    return out


RESNET_TASKS = {  # ResNet DDP on 2 GPUs: 5 gradient buckets and 2 buffer broadcasts per step
    Task(Op.ALLREDUCE, 2049000 * 4, 2, "float32", "0"): 1.0,
    Task(Op.ALLREDUCE, 7875584 * 4, 2, "float32", "0"): 1.0,
    Task(Op.ALLREDUCE, 6563840 * 4, 2, "float32", "0"): 1.0,
    Task(Op.ALLREDUCE, 6637568 * 4, 2, "float32", "0"): 1.0,
    Task(Op.ALLREDUCE, 2431040 * 4, 2, "float32", "0"): 1.0,
    Task(Op.BROADCAST, 53120 * 4, 2, "float32", "0"): 1.0,
    Task(Op.BROADCAST, 53 * 8, 2, "int64", "0"): 1.0,
}


def test_param_resnet_execution_trace():
    trace = read_chakra([RESNET])
    assert (trace.world_size, [r.rank for r in trace.ranks], trace.iterations) == (2, [1], 3)
    assert trace.metadata["schemas"] == ["1.1.0-chakra.0.0.4"]
    assert trace.tasks() == RESNET_TASKS
    assert trace.group("0").name == "default_pg"
    broadcast = trace.ranks[0].events[0]
    assert (broadcast.op, broadcast.root, broadcast.iteration) == (Op.BROADCAST, 0, 0)


def test_same_job_from_kineto_and_execution_trace():
    """The HTA Kineto trace (rank 0) and the PARAM execution trace (rank 1) are one ResNet run."""
    from traces.kineto import read_kineto

    assert read_kineto([DATA / "traces" / "hta" / "a100-2rank-nccl_data.json.gz"]).tasks() == RESNET_TASKS


def test_chakra_1_0_schema(chakra_sample):
    trace = read_chakra([chakra_sample])
    assert trace.metadata["schemas"] == ["1.0.2-chakra.0.0.4"]
    assert (trace.world_size, trace.ranks[0].rank) == (2, 0)
    assert trace.tasks() == {Task(Op.ALLGATHER, 8, 2, "float32", "0"): 10.0}


def et_doc(schema="1.1.0-chakra.0.0.4", rank=0, nelems=(64, 128)) -> dict:
    nodes = [{"id": 1, "name": "ProfilerStep#7", "ctrl_deps": 0, "inputs": {}, "outputs": {}, "attrs": []}]
    for i, n in enumerate(nelems):
        nodes.append(
            {
                "id": 10 + i,
                "name": "record_param_comms",
                "ctrl_deps": 1,
                "inputs": {
                    "values": [
                        [[5, 6, 0, n, 2, "cuda:0"]],
                        i,
                        ["0", "default_pg"],
                        rank,
                        "allreduce",
                        [],
                        [],
                        0,
                        1,
                        2,
                    ],
                    "types": ["GenericList[Tensor(c10::BFloat16)]"],
                },
                "outputs": {"values": [[[5, 6, 0, n, 2, "cuda:0"]]]},
                "attrs": [],
            }
        )
    return {"schema": schema, "pid": 1, "nodes": nodes}


def write(tmp_path, name, doc):
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def test_chakra_merge_and_errors(tmp_path):
    trace = read_chakra(
        [write(tmp_path, "a.json", et_doc(rank=0)), write(tmp_path, "b.json", et_doc(rank=1))]
    )
    assert trace.tasks() == {
        Task(Op.ALLREDUCE, 128, 2, "bfloat16", "0"): 1.0,
        Task(Op.ALLREDUCE, 256, 2, "bfloat16", "0"): 1.0,
    }
    with pytest.raises(
        TraceError, match=r"b\.json, rank 1, event 1: collective #1 on group '0' is allreduce of 200 B"
    ):
        read_chakra(
            [
                write(tmp_path, "a.json", et_doc(rank=0)),
                write(tmp_path, "b.json", et_doc(rank=1, nelems=(64, 100))),
            ]
        )
    with pytest.raises(
        TraceError, match=r"a\.json: unknown execution trace schema '2\.0\.0-chakra\.0\.0\.9'"
    ):
        read_chakra([write(tmp_path, "a.json", et_doc(schema="2.0.0-chakra.0.0.9"))])
    with pytest.raises(TraceError, match=r"a\.json: no 'nodes' array"):
        read_chakra([write(tmp_path, "a.json", {"schema": "1.1.0-chakra.0.0.4"})])
    (tmp_path / "cut.json").write_text(json.dumps(et_doc())[:-30])
    with pytest.raises(TraceError, match=r"cut\.json: truncated JSON"):
        read_chakra([tmp_path / "cut.json"])
    assert read_chakra([write(tmp_path, "a.json", et_doc(rank=0))], ranks=[1]).ranks[0].rank == 1


def test_flight_recorder_sample():
    """Synthetic dumps (see tests/data/traces/README.md); rank 1's ring buffer lost its 2 oldest entries."""
    trace = read_flight_recorder(FR_FILES)
    assert (trace.world_size, [len(r.events) for r in trace.ranks]) == (4, [10, 10])
    assert trace.metadata["not_imported"] == {"collectives outside the window all ranks hold": 2}
    assert trace.tasks() == {
        Task(Op.ALLREDUCE, 4194304 * 4, 4, "float32", "0"): 3.0,
        Task(Op.ALLGATHER, 4096 * 1024 * 2, 2, "bfloat16", "1"): 4.0,
        Task(Op.SENDRECV, 1024 * 1024 * 2, 2, "bfloat16", "1"): 3.0,
    }
    recv = trace.ranks[1].events[0]
    assert (recv.op, recv.peer, recv.duration_us) == (Op.SENDRECV, 0, pytest.approx(95.0))


def fr_dumps() -> list[dict]:
    return [json.loads(p.read_text()) for p in FR_FILES]


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (lambda d: d[1].update(version="3.0"), r"rank_1\.json: unknown flight-recorder version '3\.0'"),
        (lambda d: d[1].pop("entries"), r"rank_1\.json: not a flight-recorder dump"),
        (
            lambda d: d[1]["entries"][5]["input_sizes"].__setitem__(0, [1, 1]),
            r"rank_1\.json, rank 1, event 5: collective #1 on group '0' is allreduce of 4 B",
        ),
        (
            lambda d: d[1]["pg_config"]["1"].update(ranks="[0, 2]"),
            r"rank_1\.json: group '1' has ranks \[0, 2\] here",
        ),
        (
            lambda d: d[0]["entries"][0].update(input_dtypes=["Quaternion"]),
            r"rank_0\.json, rank 0: record 0 \(nccl:_allgather_base\): unknown dtype",
        ),
    ],
)
def test_flight_recorder_errors(tmp_path, edit, problem):
    dumps = fr_dumps()
    edit(dumps)
    paths = [write(tmp_path, f"nccl_trace_rank_{i}.json", d) for i, d in enumerate(dumps)]
    with pytest.raises(TraceError, match=problem):
        read_flight_recorder(paths)


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_flight_recorder_corruption_raises_only_trace_error(tmp_path, data):
    dumps = fr_dumps()
    for _ in range(data.draw(st.integers(1, 3))):
        dump = dumps[data.draw(st.integers(0, 1))]
        entry = dump["entries"][data.draw(st.integers(0, len(dump["entries"]) - 1))]
        key = data.draw(st.sampled_from(sorted(entry)))
        entry[key] = data.draw(
            st.none() | st.integers(-2, 5) | st.text(max_size=8) | st.lists(st.integers(0, 3))
        )
    paths = [write(tmp_path, f"nccl_trace_rank_{i}.json", d) for i, d in enumerate(dumps)]
    try:
        read_flight_recorder(paths)
    except TraceError as err:
        assert "nccl_trace_rank_" in str(err)


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_execution_trace_corruption_raises_only_trace_error(tmp_path, data):
    doc = et_doc()
    node = doc["nodes"][data.draw(st.integers(0, 2))]
    section = data.draw(st.sampled_from(["inputs", "outputs", "attrs", "ctrl_deps", "id", "name"]))
    node[section] = data.draw(
        st.none()
        | st.integers(-1, 3)
        | st.text(max_size=5)
        | st.just({"values": [[1]]})
        | st.just([{"name": "dtype", "value": "Float"}, {"name": "in_msg_nelems", "value": 4}])
    )
    try:
        read_chakra([write(tmp_path, "et.json", doc)])
    except TraceError as err:
        assert "et.json" in str(err)


# ---- commands -----------------------------------------------------------------------------

runner = CliRunner()


def test_detect_format(chakra_sample):
    assert detect_format(str(DATA / "traces" / "hta" / "a100-2rank-nccl_data.json.gz")) == "kineto"
    assert detect_format(str(RESNET)) == "chakra" and detect_format(str(chakra_sample)) == "chakra"
    assert detect_format(str(FR_FILES[0])) == "flight-recorder"
    assert detect_format(str(DATA / "nccl-tests" / "echo-azure-ndA100v4-allreduce-8gpu.txt")) == "nccl-tests"
    assert detect_format(str(FR.parent / "nccl-tests-all_gather-2x4-synthetic.json")) == "nccl-tests"


def test_import_and_summary(tmp_path):
    out = tmp_path / "job.json.gz"
    result = runner.invoke(app, ["import", *map(str, FR_FILES), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "2 rank(s) in the trace, 20 events, 3 distinct tasks" in result.output
    assert load_trace(out).world_size == 4 and gzip.decompress(out.read_bytes()).startswith(b'{"format"')
    table = runner.invoke(app, ["summary", str(out)])
    assert table.exit_code == 0 and "allreduce" in table.output and "55.8%" in table.output
    summary = json.loads(runner.invoke(app, ["summary", str(out), "--json"]).output)
    assert summary["bytes_per_iteration"] == 3 * 16 * 2**20 + 4 * 8 * 2**20 + 3 * 2 * 2**20
    assert sum(row["share"] for row in summary["tasks"]) == pytest.approx(1.0)


def test_import_nccl_tests(tmp_path):
    """An nccl-tests run is imported as a trace (it used to be a document nothing read)."""
    out = tmp_path / "nt.json"
    logs = [
        DATA / "nccl-tests" / "abci-intra_anode-8gpu-1node-allreduce.txt",
        FR.parent / "nccl-tests-all_gather-2x4-synthetic.json",
    ]
    result = runner.invoke(app, ["import", *map(str, logs), "--format", "nccl-tests", "-o", str(out)])
    assert result.exit_code == 0, result.output
    trace = load_trace(out)
    assert [log["op"] for log in trace.metadata["logs"]] == ["allreduce", "allgather"]
    ops = [e.op for e in trace.ranks[0].events]
    assert (trace.world_size, ops.count(Op.ALLREDUCE), ops.count(Op.ALLGATHER)) == (8, 24, 9)


def test_failed_import_writes_nothing(tmp_path):
    out = tmp_path / "out.json"
    bad = write(tmp_path, "nccl_trace_rank_1.json", {**fr_dumps()[1], "version": "9.9"})
    result = runner.invoke(app, ["import", str(FR_FILES[0]), str(bad), "-o", str(out)])
    assert result.exit_code == 2 and "unknown flight-recorder version '9.9'" in result.output
    assert list(tmp_path.iterdir()) == [bad]
    result = runner.invoke(app, ["import", str(FR_FILES[0]), str(RESNET), "-o", str(out)])
    assert result.exit_code == 2 and "different formats" in result.output
    result = runner.invoke(app, ["summary", str(bad)])
    assert result.exit_code == 2 and "not a ccltwin trace" in result.output
