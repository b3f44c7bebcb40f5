"""Every numeric or size-like option of every command, given what a careless user types.

The numeric options are found in each command's ``--help`` (so an option added later is covered
without editing this file) and given NaN, ±inf, negatives, zero, huge and non-numbers; sizes,
chunks, dtypes and NCCL versions get their own bad spellings. Each case must end in exit 0, or
exit 2 with one clear line (ccltwin's ``error: …`` or click's "Invalid value" for a value of the
wrong type), in bounded time; never a traceback, never ``nan`` or ``inf`` printed as a result.
"""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from ccltwin import app
from tests.ccltwin.test_fuzz_commands import PLAN, job_trace
from tests.test_fuzz_inputs import FR, Hang, bounded

CASE_SECONDS = 30
runner = CliRunner()
NUMBERS = {"int": ["-1", "0", "10000000000", "99999999999999999999", "1.5", "x"],
           "float": ["nan", "inf", "-inf", "-1", "0", "1e308", "1e-320", "x"]}
WORDS = {"--sizes": ["3B", "0", "-1MiB", "1e999", "nan", "1ZiB", "8B:1B", "1MiB:2MiB:1", "1MiB,,2MiB"],
         "--nbytes": ["3B", "0", "-1", "1e999", "nanMiB"],
         "--chunk": ["0", "-1", "nanKiB", "1e999", "3B"],
         "--min-size": ["-1", "nan", "1e999"],
         "--dtype": ["bf17", "", "float128"],
         "--nccl-version": ["0.0.0", "99.99.99", "2.x", "-1.2.3", "2.28.9.1", ""],
         "--tuner": ["ofi", "", "NONE"],
         "--tuner-config": ["", "/no/such.txtpb", "."]}


def _bases(tmp):
    """A command line per command that runs fine as it stands (fast)."""
    trace = job_trace(tmp)
    plan = tmp / "plan.yaml"
    plan.write_text(PLAN)
    out = str(tmp / "out")
    return {
        "simulate": ["simulate", "--topology", "dgx-h100", "--op", "allreduce", "--sizes", "1MiB"],
        "rank": ["rank", "--trace", str(trace), "--topology", "l40s-pcie", "-o", out + ".plan.json"],
        "whatif": ["whatif", "--trace", str(trace), "--topology", "l40s-pcie", "--no-tuned"],
        "tune": ["tune", "--topology", "l40s-pcie", "--op", "allreduce", "--nbytes", "1MiB", "--max-trials", "5"],
        "topology show": ["topology", "show", "dgx-h100"],
        "trace import": ["trace", "import", *map(str, sorted(FR.glob("*.json"))), "-o", out + ".trace.json"],
        "trace generate": ["trace", "generate", "--model", "llama-3.1-8b", "--plan", str(plan), "-o",
                           out + ".gen.json"],
    }


COMMANDS = {"simulate": ("simulate",), "rank": ("rank",), "whatif": ("whatif",), "tune": ("tune",),
            "topology show": ("topology", "show"), "trace import": ("trace", "import"),
            "trace generate": ("trace", "generate")}


def _cases():
    """(command, option, value) for every numeric option in each command's --help, and the
    size-like options it has."""
    for label, words in COMMANDS.items():
        text = runner.invoke(app, [*words, "--help"], terminal_width=250, env={"COLUMNS": "250"}).output
        for option, kind in sorted(set(re.findall(r"(--[a-z0-9-]+)(?:\s+-\w)?\s+<(?:list\[)?(int|float)(?: range)?\]?>",
                                                  text))):
            for value in NUMBERS[kind]:
                yield label, option, value
        for option, values in WORDS.items():
            if re.search(rf"{option}\s", text):
                for value in values:
                    yield label, option, value


def _with(argv: list[str], option: str, value: str) -> list[str]:
    """``argv`` with ``option`` set to ``value`` (replacing a value the base gives it)."""
    if option in argv:
        i = argv.index(option)
        return [*argv[:i + 1], value, *argv[i + 2:]]
    return [*argv, option, value]


def run_case(argv: list[str]) -> tuple[str, str]:
    with bounded(CASE_SECONDS):
        result = runner.invoke(app, argv, terminal_width=250)
    if isinstance(result.exception, Hang):
        return "hang", ""
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        return "traceback", repr(result.exception)
    lines = [line for line in result.output.strip().splitlines() if line.strip()]
    if result.exit_code == 0:
        shown = " ".join(lines)
        if re.search(r"(?<![\w-])(nan|inf|-inf)(?![\w-])", shown, re.IGNORECASE):
            return "silent", "NaN or inf in the output: " + shown[:200]
        return "ok", ""
    if result.exit_code != 2:
        return "traceback", f"exit {result.exit_code}: {result.output[-300:]}"
    errors = [line for line in lines if not line.startswith("warning:")]
    if len(errors) == 1 and errors[0].startswith("error: "):
        return "clear", errors[0]
    if "Invalid value" in result.output or "No such option" in result.output:
        return "clear", "click usage error"
    return "vague", result.output[-300:]


CASES = list(_cases())


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    return _bases(tmp_path_factory.mktemp("options"))


@pytest.mark.parametrize(("label", "option", "value"), CASES)
def test_a_bad_option_value_is_refused_in_one_line_or_runs_sanely(bases, label, option, value):
    argv = _with(bases[label], option, value)
    outcome, detail = run_case(argv)
    assert outcome in ("ok", "clear"), (argv, detail)
