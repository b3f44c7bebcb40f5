"""An empty Kineto trace or flight-recorder dump is an error, never a '0 events' trace or an empty plan."""

import json

import pytest
from typer.testing import CliRunner

from ccltwin import app
from tests.testdata import DATA

runner = CliRunner()


def _empty_flight_recorder(tmp_path):
    dump = json.loads((DATA / "traces" / "flight-recorder" / "nccl_trace_rank_0.json").read_text())
    dump["entries"] = []
    path = tmp_path / "nccl_trace_rank_0.json"
    path.write_text(json.dumps(dump))
    return path


def _empty_kineto(tmp_path):
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 2},
                                "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 5,
                                                 "pid": 1, "tid": 1}]}))
    return path


@pytest.mark.parametrize("make", [_empty_flight_recorder, _empty_kineto])
def test_an_empty_trace_is_refused_and_nothing_is_written(tmp_path, make):
    path = make(tmp_path)
    out = tmp_path / "job.json"
    result = runner.invoke(app, ["trace", "import", str(path), "-o", str(out)])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith(f"error: {path}: no collective in the") and "nothing to import" in lines[0]
    assert not out.exists()
