"""Fixtures of the dashboard tests: a real tuning store, a served app, and a headless Chromium.

The store is built the way a user builds one: the rows of three real nccl-tests logs
(tests/data/nccl-tests) read by ``ccltwin store import``'s reader, plus two tuning runs of the
twin's executor (AutoCCL and ours on a 64 MiB AllReduce of one DGX H100). The app runs in a
subprocess on a free localhost port; Chromium is Debian's, driven by Playwright (`.ci/run`
installs it). Without Chromium the browser tests are skipped, except under CI, where they fail.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from dashboards.clusters import CandidateCluster
from dashboards.twin_api import Communicator, tune_trajectory
from traces.task import Op
from tuner.measurement import read_nccl_tests_measurements
from tuner.store import Store

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "tests" / "data" / "nccl-tests"
STORE_LOGS = ("nvidia-dgxc-dgxh100-8gpu-intranode-allreduce-sample.txt", "abci-inter_anode-16gpu-2node-allreduce.txt",
              "stanford-farmshare-l40s-pcie-2gpu-allreduce-ring.txt")
"""The real logs the dashboards' store holds (``tests/data/nccl-tests/SOURCES.md``)."""
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SCREENSHOTS = os.environ.get("CCLTWIN_SCREENSHOTS")
"""Set to a folder (docs/dashboards) to keep the pages' screenshots there."""


def build_store(path: Path) -> Path:
    """A store of the real logs' rows and two twin tuning runs."""
    with Store(path) as db:
        db.add_many([m for log in STORE_LOGS for m in read_nccl_tests_measurements(LOGS / log)])
        cluster = CandidateCluster(preset="dgx-h100").build(1)
        task = Communicator.first(cluster).task(Op.ALLREDUCE, 64 << 20)
        for search in ("autoccl", "ours"):
            tune_trajectory(cluster, task, search, store=db)
    return path


@pytest.fixture(scope="session")
def store_path(tmp_path_factory) -> Path:
    return build_store(tmp_path_factory.mktemp("store") / "tuning.db")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def chromium():
    """A headless Chromium (Playwright's browser object)."""
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail(f"no Chromium at {CHROMIUM}: .ci/run installs Debian's chromium")
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def server(store_path, tmp_path_factory):
    """The dashboard serving the test store on a free port: its base URL."""
    port = free_port()
    log = tmp_path_factory.mktemp("server") / "server.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = f"from dashboards.app import serve; serve(store={str(store_path)!r}, port={port})"
    with log.open("w") as out:
        process = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env, stdout=out,
                                   stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"the dashboard did not start:\n{log.read_text()}")
            time.sleep(0.3)
    yield url
    process.terminate()
    process.wait(timeout=10)
    assert "Traceback" not in log.read_text(), log.read_text()


@pytest.fixture
def page(chromium):
    """A fresh page that records console errors and uncaught exceptions in ``page.errors``."""
    context = chromium.new_context(viewport={"width": 1400, "height": 1000})
    tab = context.new_page()
    tab.errors = []
    tab.on("console", lambda m: tab.errors.append(m.text) if m.type == "error" else None)
    tab.on("pageerror", lambda e: tab.errors.append(str(e)))
    yield tab
    context.close()


@pytest.fixture
def screenshot(tmp_path):
    """``screenshot(page, name)`` saves the whole page as ``name``.png (in ``CCLTWIN_SCREENSHOTS``
    when set) and checks the file is a PNG."""
    folder = Path(SCREENSHOTS) if SCREENSHOTS else tmp_path
    folder.mkdir(parents=True, exist_ok=True)

    def take(page, name: str) -> Path:
        path = folder / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        return path

    return take
