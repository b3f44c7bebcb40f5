"""``ccltwin calibrate``: a real log in, a profile out that ``--show`` describes and ``--profile`` uses."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from ccltwin import app
from tests.testdata import DATA
from tuner.measurement import read_nccl_tests_measurements

LOG = DATA / "nccl-tests" / "echo-azure-ndA100v4-allreduce-8gpu.txt"
runner = CliRunner()


def test_a_real_log_calibrates_a_profile_that_show_and_simulate_read(tmp_path):
    profile = tmp_path / "a100.json"
    result = runner.invoke(app, ["calibrate", "-m", str(LOG), "--topology", "dgx-a100", "-o", str(profile)])
    assert result.exit_code == 0, result.output
    assert "held-out median |busbw error|" in result.stdout and "moved (" in result.stdout
    doc = json.loads(profile.read_text())
    assert doc["format"] == "ccltwin-profile" and doc["meta"]["hardware"] == "dgx-a100:8x1"
    shown = runner.invoke(app, ["calibrate", "--show", str(profile)])
    assert shown.exit_code == 0 and "cluster: dgx-a100:8x1" in shown.stdout
    measured = next(m.time_us for m in read_nccl_tests_measurements(LOG) if m.task.nbytes == 256 << 20)
    args = ["simulate", "--topology", "dgx-a100", "--op", "allreduce", "--sizes", "256MiB", "--gpus-per-process", "8",
            "--json"]  # the log's run: one process drove the node's 8 GPUs (-g 8)
    default = json.loads(runner.invoke(app, args).stdout)[0]["time_us"]
    calibrated = runner.invoke(app, [*args, "--profile", str(profile)])
    assert calibrated.exit_code == 0, calibrated.output
    assert abs(json.loads(calibrated.stdout)[0]["time_us"] - measured) < abs(default - measured)


def test_missing_inputs_and_unwritable_outputs_are_one_line_errors(tmp_path):
    result = runner.invoke(app, ["calibrate", "-m", str(LOG)])
    assert result.exit_code == 2 and "needs --measurements and --topology" in result.output
    (tmp_path / "dir").mkdir()
    result = runner.invoke(app, ["calibrate", "-m", str(LOG), "--topology", "dgx-a100", "-o", str(tmp_path / "dir")])
    assert result.exit_code == 2 and "dir" in result.output
    result = runner.invoke(app, ["calibrate", "-m", str(tmp_path / "nope.log"), "--topology", "dgx-a100"])
    assert result.exit_code == 2 and "nope.log" in result.output
