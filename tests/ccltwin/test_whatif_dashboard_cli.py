"""``ccltwin whatif --html`` and ``ccltwin dashboard``: the README's first command writes the offline
report and says where; the dashboard command serves the app with the store and profile given."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from typer.testing import CliRunner

from ccltwin import app
from traces.examples import default_trace
from traces.trace_file import load_trace
from tuner.store import Store
from twin.params import DEFAULT_PARAMS
from twin.profile import ProfileMeta, save_profile
from twin.whatif import Candidate, what_if

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def test_the_readmes_first_command_writes_the_html_report_and_says_where(tmp_path):
    out = tmp_path / "whatif-report.html"
    result = runner.invoke(app, ["whatif", "--html", str(out)])
    assert result.exit_code == 0, result.output
    assert f"wrote {out}" in result.stderr
    assert result.stdout.startswith("# ccltwin whatif: phi2-tp8dp4")
    page = out.read_text()
    assert page.count("<script") >= 4 and "plotly" in page and "dgx-h100:8x4" in page and "dgx-a100:8x4" in page
    assert "default constants" in page


def test_json_is_quiet_on_stderr_and_the_parallel_replay_matches_the_serial_one():
    local = runner.invoke(app, ["whatif", "--topology", "l40s-pcie", "--topology", "a40-pcie", "--no-tuned", "--json",
                                "--engine", "local"])
    assert local.exit_code == 0, local.output
    assert local.stderr == ""
    path, name = default_trace()
    serial = what_if(load_trace(path), [Candidate("l40s-pcie"), Candidate("a40-pcie")], tuned=False, name=name)
    assert json.loads(local.stdout) == json.loads(json.dumps(serial.as_dict()))


def test_an_unknown_engine_or_an_unwritable_html_path_is_exit_2(tmp_path):
    bad = runner.invoke(app, ["whatif", "--engine", "gpu"])
    assert bad.exit_code == 2 and bad.stderr == "error: --engine gpu: expected one of local, ray\n"
    nowhere = runner.invoke(app, ["whatif", "--html", str(tmp_path / "missing" / "r.html")])
    assert nowhere.exit_code == 2 and "missing" in nowhere.stderr and nowhere.stderr.count("\n") == 1
    assert not (tmp_path / "missing").exists()


def test_the_dashboard_command_serves_the_app_with_its_store_and_profile(tmp_path):
    store = tmp_path / "tuning.db"
    Store(store).close()
    profile = tmp_path / "h200-fit.json"
    save_profile(DEFAULT_PARAMS.replace(**{"link.nvlink.efficiency": 0.7}), profile, meta=ProfileMeta())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen([sys.executable, "-m", "ccltwin", "dashboard", "--store", str(store), "--profile",
                               str(profile), "--port", str(port)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT)
    try:
        layout = None
        deadline = time.monotonic() + 60
        while layout is None and time.monotonic() < deadline:
            assert server.poll() is None, server.stdout.read().decode()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_dash-layout", timeout=2) as response:
                    layout = response.read().decode()
            except OSError:
                time.sleep(0.3)
        assert layout is not None, "the dashboard did not answer within 60 s"
        assert "store tuning.db" in layout and "profile h200-fit.json" in layout
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_the_dashboard_refuses_a_missing_store_before_serving(tmp_path):
    result = runner.invoke(app, ["dashboard", "--store", str(tmp_path / "absent.db")])
    assert result.exit_code == 2 and "absent.db" in result.stderr and result.stderr.count("\n") == 1
