"""Telling NCCL about the plugin (install_env), one instance per process (Plugin.load), and what the
NCCL version of this process lets live tuning change (live.nccl)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from plugin_support import built_plugin

import live.nccl
import live.notice
import live.plugin.binding
import live.plugin.build
import live.plugin.emulate
from live.nccl import NcclInfo, detect, parse_version, version_from_log
from live.plugin.binding import Plugin
from tuner.knobs import Tier

ROOT = Path(__file__).parents[2]
GPU_LOG = ROOT / "benchmarks" / "data" / "plugin-load-h200-nccl2.28.9.txt"


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    """A fresh process (NCCL's env and dlopen state are per process), with this checkout importable."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env})


def test_install_env_names_one_instance_for_nccl_and_python(tmp_path):
    built_plugin()
    done = run_python(
        "import os, ctypes\n"
        "from live.plugin import Plugin, install_env\n"
        "got = install_env()\n"
        "p = Plugin.load()\n"
        "assert p is Plugin.load() and got.tuner and got.profiler\n"
        "assert os.environ['NCCL_TUNER_PLUGIN'] == os.environ['NCCL_PROFILER_PLUGIN'] == str(p.path)\n"
        "nccl = ctypes.CDLL(os.environ['NCCL_TUNER_PLUGIN'], mode=os.RTLD_LOCAL)\n"  # as NCCL's dlopen
        "assert nccl._handle == p.lib._handle\n"
        "print(p.path)\n", XDG_CACHE_HOME=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith(str(tmp_path / "ccltwin" / "plugin")) and done.stderr == ""


def test_user_settings_win_and_are_reported_once(tmp_path):
    code = ("from live.plugin import install_env\n"
            "a = install_env(); b = install_env()\n"
            "print(a.tuner, a.profiler, b.tuner)\n"
            "import os; print(os.environ['NCCL_TUNER_PLUGIN'])\n")
    done = run_python(code, XDG_CACHE_HOME=str(tmp_path), NCCL_TUNER_PLUGIN="none")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["False True False", "none"]
    assert done.stderr.splitlines() == ["ccltwin live: NCCL_TUNER_PLUGIN=none is set; leaving it "
                                        "(live tuning through it is off)"]


def test_load_takes_the_library_the_environment_names(tmp_path):
    named = tmp_path / "elsewhere" / "libccltwin-live.so"
    named.parent.mkdir()
    named.write_bytes(built_plugin().read_bytes())
    env = {"NCCL_TUNER_PLUGIN": str(named), "XDG_CACHE_HOME": str(tmp_path / "unused")}
    assert Plugin.load(env).path == named and not (tmp_path / "unused").exists()


def test_install_after_a_process_group_says_so(tmp_path):
    """On CPU torch the group is gloo: nothing to say.  (A NCCL group cannot exist without a GPU.)"""
    code = ("import torch.distributed as dist\n"
            "dist.init_process_group('gloo', init_method='tcp://127.0.0.1:0', rank=0, world_size=1)\n"
            "from live.plugin import install_env\n"
            "install_env()\n"
            "import live.notice\n"
            "print('late-install' in live.notice._SAID)\n")
    done = run_python(code, XDG_CACHE_HOME=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


@pytest.mark.parametrize(("version", "tuner", "profiler", "per_call"), [
    ((2, 21, 5), None, None, []),
    ((2, 22, 3), 3, None, ["algo", "proto", "nchannels"]),
    ((2, 24, 3), 4, None, ["algo", "proto", "nchannels"]),
    ((2, 27, 5), 4, 4, ["algo", "proto", "nchannels"]),
    ((2, 28, 9), 5, 5, ["algo", "proto", "nchannels"]),
    ((2, 29, 7), 5, 6, ["algo", "proto", "nchannels"]),
    ((2, 30, 3), 6, 6, ["algo", "proto", "nchannels", "chunk_bytes"]),
    ((2, 32, 3), 6, 6, ["algo", "proto", "nchannels", "chunk_bytes"]),
])
def test_what_each_nccl_lets_the_plugin_change(version, tuner, profiler, per_call):
    info = NcclInfo(version, "test")
    assert (info.tuner_abi, info.profiler_abi, info.changeable(Tier.PER_CALL)) == (tuner, profiler, per_call)
    if tuner is None:  # no plugin loads: NCCL_ALGO/NCCL_PROTO at each init, channels per process
        assert info.changeable(Tier.PER_COMMUNICATOR) == ["algo", "proto"]
        assert "nchannels" in info.changeable(Tier.PER_PROCESS)


def test_detect_reads_the_override_then_torch():
    assert detect({"CCLTWIN_NCCL_VERSION": "2.30.3"}) == NcclInfo((2, 30, 3), "CCLTWIN_NCCL_VERSION")
    with pytest.raises(ValueError, match="not an NCCL version: 'two'"):
        detect({"CCLTWIN_NCCL_VERSION": "two"})
    info = detect({})  # this venv's torch is a CPU build
    assert info.version is None and info.tuner_abi is None
    assert info.summary() == ("no NCCL here (torch without NCCL, e.g. a CPU build): live tuning can only emulate "
                              "the plugin (gloo)")


def test_report_once_says_it_once(capsys):
    live.notice._SAID.discard("nccl")
    info = NcclInfo((2, 27, 5), "test")
    assert live.nccl.report_once(info) is info and live.nccl.report_once(info) is info
    assert capsys.readouterr().err == ("ccltwin live: NCCL 2.27.5 (test): tuner plugin v4, profiler plugin v4; per "
                                       "call: algo, proto, nchannels; per process: transport, nthreads, chunk_bytes\n")


def test_versions_from_text_and_a_real_nccl_log():
    assert parse_version(" 2.28.9+cuda13.0") == (2, 28, 9)
    assert version_from_log("no version here") is None
    assert version_from_log(GPU_LOG.read_text()) == (2, 28, 9)
