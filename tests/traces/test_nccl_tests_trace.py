"""nccl-tests logs imported as traces that summary and whatif take, with the NCCL version kept."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from ccltwin import app
from tests.testdata import DATA
from traces.errors import TraceError
from traces.nccl_tests import read_nccl_tests
from traces.nccl_tests_trace import log_trace, read_nccl_tests_trace
from traces.task import Op, Task
from traces.trace_file import load_trace

NT = DATA / "nccl-tests"
ABCI_2NODE = NT / "abci-inter_anode-16gpu-2node-allreduce.txt"
L40S = NT / "stanford-farmshare-l40s-pcie-2gpu-allreduce-ring.txt"
runner = CliRunner()


def test_two_node_run_is_a_trace_of_its_sizes():
    trace = read_nccl_tests_trace([ABCI_2NODE])
    log = read_nccl_tests(ABCI_2NODE)
    assert (trace.world_size, len(trace.ranks), trace.source) == (16, 16, "nccl-tests")
    assert {r.node for r in trace.ranks} == {"a0008", "a0009"} and trace.shape(range(16)) == "8x2"
    assert trace.tasks() == {Task(Op.ALLREDUCE, row.nbytes, 16, "float32", "8x2"): 1.0 for row in log.rows}
    for rank in trace.ranks:  # every rank issues every size, timed as the log measured it
        assert [(e.nbytes, e.duration_us) for e in rank.events] == [(r.nbytes, r.oop_time_us) for r in log.rows]
    assert trace.metadata["nccl_version"] == "2.8.4"
    assert len(trace.metadata["measurements"]) == len(log.rows) == 24
    assert trace.metadata["measurements"][-1]["oop_busbw"] == log.rows[-1].oop_busbw


def test_versions_library_and_headers():
    trace = read_nccl_tests_trace([L40S])
    assert (trace.metadata["nccl_version"], trace.metadata["nccl_headers_version"]) == ("2.29.2", "2.29.2")
    assert trace.metadata["env"] == {"NCCL_ALGO": "ring"}


def test_import_summary_and_whatif_take_it(tmp_path):
    out = tmp_path / "l40s.json"
    result = runner.invoke(app, ["trace", "import", str(L40S), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "2 rank(s) in the trace, 50 events, 25 distinct tasks" in result.output
    summary = json.loads(runner.invoke(app, ["trace", "summary", str(out), "--json"]).output)
    assert len(summary["tasks"]) == 25 and summary["bytes_per_iteration"] == sum(2**k for k in range(3, 28))
    whatif = runner.invoke(app, ["whatif", "--trace", str(out), "--topology", "dgx-a100", "--no-tuned", "--json"])
    assert whatif.exit_code == 0, whatif.output
    report = json.loads(whatif.output)
    assert report["trace"]["source"] == "nccl-tests" and report["clusters"][0]["default"]["comm_us"] > 0
    assert load_trace(out).metadata["nccl_version"] == "2.29.2"


def test_bad_sets(tmp_path):
    with pytest.raises(TraceError, match=r"abci-intra_anode-8gpu-1node-allreduce\.txt: 8 ranks here but 16 in"):
        read_nccl_tests_trace([ABCI_2NODE, NT / "abci-intra_anode-8gpu-1node-allreduce.txt"])
    text = "\n".join(line for line in L40S.read_text().splitlines()
                     if not line.startswith(("# HARDWARE", "# COMMAND", "#  Rank", "# nThread")))
    unknown = tmp_path / "no-ranks.txt"
    unknown.write_text(text + "\n")
    result = runner.invoke(app, ["trace", "import", str(unknown), "-o", str(tmp_path / "out.json")])
    assert result.exit_code == 2 and result.output.count("\n") == 1
    assert f"{unknown}: the rank count of this run is not in the log" in result.output
    assert not (tmp_path / "out.json").exists()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_rows_of_a_real_log(data):
    log = read_nccl_tests(ABCI_2NODE)
    rows = data.draw(st.lists(st.sampled_from(log.rows), min_size=1, max_size=30))
    trace = log_trace([type(log)(**{**log.__dict__, "rows": rows})])
    assert [len(r.events) for r in trace.ranks] == [len(rows)] * 16
    tasks = trace.tasks()
    assert sum(tasks.values()) == len(rows) and {t.nbytes for t in tasks} == {r.nbytes for r in rows}


def test_version_from_nccl_info_lines(tmp_path):
    """A log run with NCCL_DEBUG=INFO says the version on its ``NCCL INFO`` lines (prefixed host:pid:tid)."""
    lines = [line for line in L40S.read_text().splitlines()
             if not line.startswith(("# NCCL:", "NCCL version", "# nccl-tests version"))]
    at = next(i for i, line in enumerate(lines) if line.startswith("#  Rank  1"))
    lines[at + 1:at + 1] = ["oat-04:1149754:1149754 [0] NCCL INFO NCCL version 2.18.5+cuda12.2",
                            "oat-04:1149754:1149760 [0] NCCL INFO Using network Socket"]
    lines.insert(0, "# nccl-tests version 2.13.8 nccl-headers=21805 nccl-library=21805")
    path = tmp_path / "info.txt"
    path.write_text("\n".join(lines) + "\n")
    trace = read_nccl_tests_trace([path])
    assert (trace.metadata["nccl_version"], trace.metadata["nccl_headers_version"]) == ("2.18.5", "2.18.5")
    assert trace.tasks() == read_nccl_tests_trace([L40S]).tasks()
