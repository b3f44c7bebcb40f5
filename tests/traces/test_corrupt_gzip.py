"""Corrupt or truncated gzip in every reader that decompresses: one line naming the file."""

import gzip

import pytest
from typer.testing import CliRunner

from ccltwin import app
from tests.testdata import DATA
from traces.errors import TraceError
from traces.flight_recorder import read_flight_recorder
from traces.formats import TraceFormat, read_files
from traces.trace_file import load_trace, save_trace

runner = CliRunner()
KINETO = DATA / "traces" / "hta" / "v100-2rank-ddp-small-allreduce.json.gz"


def _corruptions(data: bytes):
    yield "truncated", data[: len(data) // 2]
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0xFF
    yield "byte flipped", bytes(flipped)
    yield "bad header", b"\x1f\x8b\x08" + b"\xff" * 20


@pytest.mark.parametrize("kind", ["flight-recorder", "kineto", "trace"])
def test_a_corrupt_gzip_is_one_line_naming_the_file(tmp_path, kind):
    if kind == "flight-recorder":
        data = gzip.compress((DATA / "traces" / "flight-recorder" / "nccl_trace_rank_0.json").read_bytes())
        name = "nccl_trace_rank_0.json.gz"
    elif kind == "kineto":
        data, name = KINETO.read_bytes(), "rank0.json.gz"
    else:
        good = tmp_path / "good.json.gz"
        save_trace(read_flight_recorder(sorted((DATA / "traces" / "flight-recorder").glob("*.json"))), good)
        data, name = good.read_bytes(), "job.json.gz"
    for how, bad in _corruptions(data):
        path = tmp_path / name
        path.write_bytes(bad)
        with pytest.raises(TraceError, match=str(path)):
            if kind == "trace":
                load_trace(path)
            else:
                read_files([str(path)], TraceFormat.FLIGHT_RECORDER if kind == "flight-recorder"
                           else TraceFormat.KINETO, None)
        argv = (["trace", "summary", str(path)] if kind == "trace"
                else ["trace", "import", str(path), "-o", str(tmp_path / "o.json")])
        result = runner.invoke(app, argv)
        lines = result.output.strip().splitlines()
        assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith(f"error: {path}"), (how, lines)
        assert not (tmp_path / "o.json").exists()
