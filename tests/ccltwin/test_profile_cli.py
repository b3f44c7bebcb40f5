"""``--profile``: a calibration profile's constants reach the twin through every command, and the
output says which constants it was predicted with; a bad profile is one line and exit status 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ccltwin import app
from tuner.plan import load_plan
from twin.params import DEFAULT_PARAMS
from twin.profile import ProfileMeta, save_profile

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()
SIMULATE = ["simulate", "--topology", "dgx-h100", "--op", "allreduce", "--nranks", "8", "--sizes", "256MiB"]


@pytest.fixture
def slow_nvlink(tmp_path):
    """A profile whose NVLink moves data at half the default efficiency."""
    path = tmp_path / "slow-nvlink.json"
    name = "link.nvlink.efficiency"
    slower = DEFAULT_PARAMS.replace(**{name: DEFAULT_PARAMS.to_dict()[name] / 2})
    save_profile(slower, path, meta=ProfileMeta(moved=(name,)))
    return path


def simulated_us(*extra: str) -> float:
    result = runner.invoke(app, [*SIMULATE, "--json", *extra])
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.stdout)
    return row["time_us"]


def test_a_slower_nvlink_profile_makes_an_intra_node_allreduce_slower(slow_nvlink):
    default, slow = simulated_us(), simulated_us("--profile", str(slow_nvlink))
    # A 256 MiB all-reduce on one NVSwitch node is bandwidth-bound: half the link efficiency makes it
    # clearly slower, yet less than twice as slow (latency, and other limits, do not change).
    assert 1.2 * default < slow < 2 * default


def test_headers_name_the_profile(slow_nvlink):
    plain = runner.invoke(app, SIMULATE)
    assert plain.exit_code == 0, plain.output
    assert "default constants; predicted, not measured" in plain.stdout.splitlines()[0]
    profiled = runner.invoke(app, [*SIMULATE, "--profile", str(slow_nvlink)])
    assert profiled.exit_code == 0, profiled.output
    assert f"profile {slow_nvlink}; predicted" in profiled.stdout.splitlines()[0]
    tuned = runner.invoke(app, ["tune", "--topology", "dgx-h100", "--op", "allreduce", "--nbytes", "64MiB",
                                "--nranks", "8", "--max-trials", "5", "--profile", str(slow_nvlink)])
    assert tuned.exit_code == 0, tuned.output
    assert f"profile {slow_nvlink}; predicted" in tuned.stdout.splitlines()[0]


def test_the_tuning_executor_times_with_the_profile(slow_nvlink):
    def default_us(*extra: str) -> float:
        result = runner.invoke(app, ["tune", "--topology", "dgx-h100", "--op", "allreduce", "--nbytes", "256MiB",
                                     "--nranks", "8", "--max-trials", "3", "--noise", "0", "--json", *extra])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)[0]["default_time_us"]

    assert default_us("--profile", str(slow_nvlink)) > 1.2 * default_us()


@pytest.mark.parametrize(("text", "problem"), [
    ('{"format": "something-else"}', "not a ccltwin profile"),
    ('{"format": "ccltwin-profile", "version": 1, "params": {"link.nvlink.efficiency": 7}}', "link.nvlink.efficiency"),
    ('{"format": "ccltwin-profile", "version": 1, "params": {"no.such.constant": 1}}', "no.such.constant"),
    ("{not json", "profile"),
])
@pytest.mark.parametrize("command", [SIMULATE, ["whatif", "--no-tuned"], ["dashboard", "--port", "1"]])
def test_a_bad_profile_is_one_line_naming_the_file_and_exit_2(tmp_path, text, problem, command):
    path = tmp_path / "bad-profile.json"
    path.write_text(text)
    result = runner.invoke(app, [*command, "--profile", str(path)])
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert str(path) in result.stderr and problem in result.stderr


def test_a_missing_profile_is_an_error_naming_it(tmp_path):
    result = runner.invoke(app, [*SIMULATE, "--profile", str(tmp_path / "absent.json")])
    assert result.exit_code == 2 and "absent.json" in result.stderr and result.stderr.count("\n") == 1


def test_rank_predicts_with_the_profile_and_says_so(slow_nvlink, tmp_path):
    trace = ROOT / "traces" / "examples" / "phi2-tp8dp4.json.gz"
    times = {}
    for name, extra in (("default", []), ("slow", ["--profile", str(slow_nvlink)])):
        plan = tmp_path / f"{name}.json"
        result = runner.invoke(app, ["rank", "--trace", str(trace), "--topology", "dgx-h100", "-o", str(plan),
                                     *extra])
        assert result.exit_code == 0, result.output
        header = result.stdout.splitlines()[0]
        assert (f"profile {slow_nvlink}; predicted" if extra else "default constants; predicted") in header
        times[name] = [e.best.time_us for e in load_plan(plan).entries]
    assert len(times["slow"]) == len(times["default"]) > 0
    assert all(s >= d for s, d in zip(times["slow"], times["default"], strict=True))
    assert max(s / d for s, d in zip(times["slow"], times["default"], strict=True)) > 1.2
