"""The shared plausibility check, and nccl-tests logs whose numbers no hardware produces."""

import json
import re

import pytest
from typer.testing import CliRunner

from ccltwin import app
from tests.testdata import DATA
from traces.errors import CcltwinWarning, TraceError
from traces.nccl_tests import read_nccl_tests
from traces.plausibility import MAX_BUSBW_GBPS, implausible

runner = CliRunner()
LOG = DATA / "nccl-tests" / "stanford-farmshare-l40s-pcie-2gpu-allreduce-auto_simple.txt"
JSON_LOG = DATA / "traces" / "nccl-tests-all_gather-2x4-synthetic.json"


def test_every_real_log_in_the_repository_is_plausible():
    logs = [p for p in (DATA / "nccl-tests").glob("*.txt")] + [JSON_LOG]
    assert len(logs) > 15
    for path in logs:
        assert read_nccl_tests(path).rows


def test_the_bounds_reject_the_impossible_only():
    assert implausible(nbytes=1 << 30, count=1 << 28, dtype="float", time_us=2e3, busbw=480.0) is None
    assert "busbw" in implausible(nbytes=1024, busbw=MAX_BUSBW_GBPS * 1.01)
    assert "busbw -1.0" in implausible(nbytes=1024, busbw=-1.0)
    assert "time 0.0" in implausible(nbytes=1024, time_us=0.0)
    assert "over a day" in implausible(nbytes=1024, time_us=1e12)
    assert "size" in implausible(nbytes=2 ** 63)


def _row_line(text: str, old: str, new: str, count: int = 1) -> str:
    assert old in text
    return text.replace(old, new, count)


def first_row(path):
    for line in path.read_text().splitlines():
        if line.split()[:1] and line.split()[0].isdigit():
            return line
    raise AssertionError(path)


@pytest.mark.parametrize("change, problem", [
    (lambda cells: cells.__setitem__(5, "-8.98"), "not a positive finite number"),
    (lambda cells: cells.__setitem__(5, "0.00"), "time 0.0 us is not a positive"),
    (lambda cells: cells.__setitem__(5, "1e999"), "is not a finite number"),
    (lambda cells: cells.__setitem__(7, "-0.01"), "busbw -0.01 GB/s is outside"),
    (lambda cells: cells.__setitem__(7, "1e30"), "busbw 1e+30 GB/s is outside"),
    (lambda cells: cells.__setitem__(1, "3"), "nor a whole multiple"),
])
def test_an_impossible_row_is_an_error_naming_the_line(tmp_path, change, problem):
    text = LOG.read_text()
    row = first_row(LOG)
    cells = row.split()
    change(cells)
    bad = tmp_path / "bad.txt"
    bad.write_text(text.replace(row, "  ".join(cells), 1))
    number = text.splitlines().index(row) + 1
    with pytest.raises(TraceError, match=f"bad.txt:{number}: .*{re.escape(problem)}"):
        read_nccl_tests(bad)
    result = runner.invoke(app, ["store", "import", str(tmp_path / "t.db"), str(bad), "--hardware", "l40s"])
    assert result.exit_code == 2 and f"bad.txt:{number}" in result.output and problem.split()[0] in result.output
    assert not (tmp_path / "t.db").exists()


@pytest.mark.parametrize("edit, problem", [
    (lambda doc: doc["results"][0]["out_of_place"].__setitem__("time", float("inf")), "not a number"),
    (lambda doc: doc["config"].__setitem__("nthreads", 0), "config.nthreads 0 is not a positive integer"),
    (lambda doc: doc["results"][0].__setitem__("size", 2 ** 63), "size 9223372036854775808 B is outside"),
])
def test_extreme_values_in_nccl_tests_json_are_errors(tmp_path, edit, problem):
    doc = json.loads(JSON_LOG.read_text())
    edit(doc)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc).replace("Infinity", "1e999"))
    with pytest.raises(TraceError, match=problem):
        read_nccl_tests(bad)
    for argv in (["store", "import", str(tmp_path / "t.db"), str(bad), "--hardware", "x"],
                 ["trace", "import", str(bad), "--format", "nccl-tests", "-o", str(tmp_path / "o.json")]):
        result = runner.invoke(app, argv)
        assert result.exit_code == 2 and problem in result.output and "Traceback" not in result.output
    assert not (tmp_path / "t.db").exists() and not (tmp_path / "o.json").exists()


def test_trace_import_writes_strict_json(tmp_path):
    out = tmp_path / "o.json"
    assert runner.invoke(app, ["trace", "import", str(LOG), "--format", "nccl-tests", "-o", str(out)]).exit_code == 0
    json.loads(out.read_text(), parse_constant=lambda name: pytest.fail(f"{name} in the JSON"))


def test_a_log_cut_mid_row_is_an_error_or_a_warning_naming_the_line(tmp_path):
    text = LOG.read_text()
    row = first_row(LOG)
    cut = tmp_path / "cut.txt"
    number = text[:text.index(row)].count("\n") + 1
    cut.write_text(text[:text.index(row) + len(row) - 12])  # columns lost: an error
    with pytest.raises(TraceError, match=f"cut.txt:{number}: expected 13 columns"):
        read_nccl_tests(cut)
    end = text.index(row) + len(row)  # every column there, but no line end: the last value may be cut
    cut.write_text(text[:end])
    with pytest.warns(CcltwinWarning, match=f"cut.txt:{number}: the log ends inside this row"):
        read_nccl_tests(cut)
    result = runner.invoke(app, ["trace", "import", str(cut), "--format", "nccl-tests", "-o",
                                 str(tmp_path / "o.json")])
    assert result.exit_code == 0 and f"warning: {cut}:{number}: the log ends inside this row" in result.output
