"""Building the plugin on first use: with the real compiler, into a cache keyed by the source, once when
several ranks start together, with a one-line error when no compiler exists or it fails."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import shutil
import stat
from pathlib import Path

import pytest
from plugin_support import compiler

import live.plugin.build as build_module
from live.plugin.build import LIBRARY, PluginBuildError, build

TUNER_SYMBOLS = ["ncclTunerPlugin_v3", "ncclTunerPlugin_v4", "ncclTunerPlugin_v5", "ncclTunerPlugin_v6"]
PROFILER_SYMBOLS = ["ncclProfiler_v4", "ncclProfiler_v5", "ncclProfiler_v6"]


def counting_compiler(tmp_path: Path) -> tuple[str, Path]:
    """A CC that logs each call and runs the real compiler."""
    log, script = tmp_path / "cc.log", tmp_path / "cc-counting"
    script.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec {compiler()} "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script), log


def test_builds_once_into_a_cache_keyed_by_source(tmp_path):
    cc, log = counting_compiler(tmp_path)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg"), "CC": cc}
    path = build(env)
    assert path.name == LIBRARY and path.parent.parent == tmp_path / "xdg" / "ccltwin" / "plugin"
    assert build(env) == path and len(log.read_text().splitlines()) == 1
    assert "-Werror" in log.read_text() and "-fPIC" in log.read_text()
    lib = ctypes.CDLL(str(path))
    for name in TUNER_SYMBOLS + PROFILER_SYMBOLS + ["ccltwin_set_rule", "ccltwin_drain_events"]:
        assert hasattr(lib, name), name
    for absent in ("ncclTunerPlugin_v2", "ncclProfiler_v3", "coll_info", "g_comms"):  # nothing else is exported
        assert not hasattr(lib, absent), absent
    assert sorted(p.name for p in path.parent.iterdir()) == [".lock", LIBRARY]


def test_an_edited_source_builds_anew(tmp_path, monkeypatch):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    first = build(env)
    edited = tmp_path / "src"
    shutil.copytree(build_module.SOURCE_DIR, edited, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    (edited / "ccltwin_live.c").write_text((edited / "ccltwin_live.c").read_text() + "\n/* edited */\n")
    monkeypatch.setattr(build_module, "SOURCE_DIR", edited)
    second = build(env)
    assert second != first and second.parent.parent == first.parent.parent and second.exists()


def _build_in(env: dict) -> str:
    return str(build(env))


def test_ranks_starting_together_compile_once(tmp_path):
    cc, log = counting_compiler(tmp_path)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg"), "CC": cc}
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        paths = pool.map(_build_in, [env] * 4)
    assert len(set(paths)) == 1 and len(log.read_text().splitlines()) == 1
    assert not [p for p in Path(paths[0]).parent.iterdir() if p.name.startswith(".build-")]


def test_no_compiler_is_one_clear_line(tmp_path):
    env = {"PATH": str(tmp_path), "HOME": str(tmp_path), "CC": "no-such-cc"}
    with pytest.raises(PluginBuildError) as err:
        build(env)
    assert str(err.value) == ("cannot build the ccltwin live plugin: no C compiler found (tried no-such-cc, cc, gcc, "
                              "clang); install gcc or set CC")


def test_a_failing_compiler_leaves_nothing_behind(tmp_path):
    bad = tmp_path / "bad-cc"
    bad.write_text("#!/bin/sh\necho 'ccltwin_live.c:1: error: boom' >&2\nexit 1\n")
    bad.chmod(0o755)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg"), "CC": str(bad)}
    with pytest.raises(PluginBuildError, match=r"ccltwin_live.c: bad-cc failed \(exit 1\): .*: error: boom"):
        build(env)
    (key_dir,) = (tmp_path / "xdg" / "ccltwin" / "plugin").iterdir()
    assert [p.name for p in key_dir.iterdir()] == [".lock"]


def test_the_sources_ship_as_package_data():
    from setuptools.config.pyprojecttoml import read_configuration

    config = read_configuration(Path(__file__).parents[2] / "pyproject.toml")
    patterns = config["tool"]["setuptools"]["package-data"]["live.plugin"]
    shipped = {p.name for p in build_module.SOURCE_DIR.iterdir() if any(p.match(pat) for pat in patterns)}
    assert set(build_module.SOURCES) <= shipped
