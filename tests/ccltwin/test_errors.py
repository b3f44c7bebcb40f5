"""One error root, one CLI: every domain error derives from ``CcltwinError``, which the command maps
to one line and exit status 2; only ``ccltwin/`` imports typer, and nothing imports ``ccltwin``."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

import traces
import tuner
import twin
from ccltwin.cli import App
from traces.errors import CcltwinError

ROOT = Path(__file__).resolve().parents[2]


def defined_errors() -> list[type[Exception]]:
    """Every exception class defined in traces/, tuner/ and twin/ (each module imported), warnings
    (``CcltwinWarning``, not raised) aside."""
    found = []
    for package in (traces, tuner, twin):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name.endswith("__main__"):
                continue
            module = importlib.import_module(info.name)
            found += [obj for obj in vars(module).values() if isinstance(obj, type) and issubclass(obj, Exception)
                      and not issubclass(obj, Warning) and obj.__module__ == module.__name__]
    return sorted(set(found), key=lambda cls: f"{cls.__module__}.{cls.__qualname__}")


def test_every_domain_error_derives_from_the_one_root():
    errors = defined_errors()
    names = {cls.__name__ for cls in errors}
    assert {"TraceError", "WorkloadError", "FieldError", "SearchStateError", "PlanError", "ConfigError",
            "StoreError", "Unsupported", "ReplayError", "TopologyError"} <= names
    assert [cls for cls in errors if not issubclass(cls, CcltwinError)] == []
    assert issubclass(CcltwinError, ValueError)  # callers that expect a ValueError for a wrong value still get one


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", ["traces", "tuner", "twin", "live", "dashboards", "benchmarks"])
def test_only_the_cli_imports_typer_and_nothing_imports_the_cli(package):
    offenders = {str(path.relative_to(ROOT)): sorted(imports_of(path) & {"typer", "ccltwin"})
                 for path in (ROOT / package).rglob("*.py")}
    assert {path: names for path, names in offenders.items() if names} == {}


def test_bad_input_is_one_line_and_exit_2_a_bug_keeps_its_traceback(tmp_path):
    app = App()

    @app.command()
    def fail(kind: str) -> None:
        if kind == "input":
            raise CcltwinError("--kind input: a value the user can fix")
        if kind == "file":
            (tmp_path / "missing.txt").read_text()
        raise ValueError("a bug")

    runner = CliRunner()
    bad = runner.invoke(app, ["input"])
    assert (bad.exit_code, bad.stderr) == (2, "error: --kind input: a value the user can fix\n")
    missing = runner.invoke(app, ["file"])
    assert missing.exit_code == 2 and missing.stderr.startswith("error: [Errno 2] No such file or directory")
    bug = runner.invoke(app, ["bug"])
    assert bug.exit_code == 1 and type(bug.exception) is ValueError and str(bug.exception) == "a bug"
    assert fail.__name__ == "fail"  # the decorator hands back the command itself
