"""Fuzzing every command that writes a file, with damaged copies of the repository's real files.

Each case runs one ``ccltwin`` command (in process, as a user's shell would run it) on a damaged
input (the mutations of ``tests/test_fuzz_inputs.py``) with its output path either absent or
holding an earlier output. It must end in exit 0 with an output its reader accepts, or exit 2
with one line naming the damaged file and the earlier output (or no output) left exactly as it
was; never a traceback, never a hang (``CASE_SECONDS``). ``python -m tests.ccltwin.test_fuzz_commands``
prints the table of benchmarks/RESULTS.md (section Hardening).
"""

from __future__ import annotations

import csv
import json
import random
import shutil
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from ccltwin import app
from tests.test_fuzz_inputs import FR, MUTATIONS, OUTCOMES, Hang, _mutate, bounded, outcome_table
from tests.testdata import DATA
from traces.trace_file import load_trace
from tuner.config import Algo, Config, Proto, Transport
from tuner.measurement import read_nccl_tests_measurements
from tuner.plan import load_plan
from tuner.store import Store
from twin.profile import load_profile
from twin.topology.loader import PRESET_DIR, load_cluster

CASE_SECONDS = 20
"""A command running longer than this on a damaged input is a hang."""
EARLIER = b"an earlier output that a failed command must leave as it was\n"
L40S_LOG = DATA / "nccl-tests" / "stanford-farmshare-l40s-pcie-2gpu-allreduce-ring.txt"
L40S_TREE_LOG = DATA / "nccl-tests" / "stanford-farmshare-l40s-pcie-2gpu-allreduce-tree.txt"
"""Calibrate's seed: a log the uncalibrated twin leaves room to fit (on the Ring log it is already
within 5 % and calibration rightly refuses a fit that worsens its mid sizes)."""
ROOT = Path(__file__).parents[2]
L40S = ROOT / "benchmarks" / "clusters" / "farmshare-l40s.yaml"
runner = CliRunner()


def _trace_ok(path: Path) -> None:
    load_trace(path).validate()


def _plan_ok(path: Path) -> None:
    load_plan(path)


def _strict_json(path: Path) -> None:
    def refuse(constant):
        raise AssertionError(f"{path.name} holds {constant}, which strict JSON parsers refuse")

    json.loads(path.read_text(), parse_constant=refuse)
    _trace_ok(path)


def _cluster_ok(path: Path) -> None:
    assert load_cluster(path).gpus()


def _csv_ok(path: Path) -> None:
    rows = [row for row in csv.reader(path.read_text().splitlines()) if row and not row[0].startswith("#")]
    assert rows and all(len(row) == len(rows[0]) for row in rows), rows[:3]


def _html_ok(path: Path) -> None:
    text = path.read_text()
    assert text.lstrip().lower().startswith("<!doctype html") and "</html>" in text[-200:]


def _profile_ok(path: Path) -> None:
    load_profile(path)


def _store_ok(path: Path) -> None:
    with Store(path, create=False, full_check=True) as store:
        assert store.count() > 0


@dataclass(frozen=True)
class Command:
    """One writing command: the seed its damaged input is made from and how it is invoked."""

    seed: Path
    name: str
    """The damaged input's file name."""
    output: str | None
    """The output's file name; None: the damaged file is the output too (a store imported into)."""
    check: Callable[[Path], None]
    """Raises AssertionError (or a reader's error) when the written output is not sane."""
    template: tuple[str, ...]
    """The command line, ``IN`` and ``OUT`` standing for the damaged input and the output."""
    earlier: bool = True
    """Cases may start with an earlier output at that path (not for a store to be created)."""

    def argv(self, damaged: Path, output: Path) -> list[str]:
        return [{"IN": str(damaged), "OUT": str(output)}.get(part, part) for part in self.template]


def job_trace(folder: Path) -> Path:
    """The repository's real flight-recorder dumps imported as one trace, ``folder/job.json``."""
    trace = folder / "job.json"
    imported = runner.invoke(app, ["trace", "import", *map(str, sorted(FR.glob("*.json"))), "-o", str(trace)])
    assert imported.exit_code == 0, imported.output
    return trace


PLAN = ("world_size: 16\ntp: 8\ndp: 2\nsequence_parallel: true\nzero: 1\nmicro_batches: 2\nmicro_batch_size: 1\n"
        "grad_dtype: float32\n")
"""A small plan for llama-3.1-8b that generates in about a second."""


def _commands(tmp: Path) -> dict[str, Command]:
    trace = job_trace(tmp)
    plan = tmp / "plan.yaml"
    plan.write_text(PLAN)
    store = tmp / "seed.db"
    with Store(store) as db:
        defaults = db.add_unseen(read_nccl_tests_measurements(L40S_LOG, hardware="l40s"))
        db.add_many([replace(m, config=Config(Algo.RING, Proto.SIMPLE, Transport.P2P, 4, 256, 1 << 17),
                             time_us=m.time_us * 0.9, source="live") for m in defaults[::3]])
    smi = DATA / "topology" / "nvidia-smi" / "sglang-30401-h100.txt"
    xml = DATA / "topology" / "nccl-xml" / "azure-ndv5-topo.xml"
    machine = ("--gpu-model", "h100", "--nic-gbps", "400", "-o", "OUT")
    return {
        "trace import, Kineto": Command(DATA / "traces" / "capture-h200" / "ddp-iteration-rank0.kineto.json.gz",
                                        "rank0.json.gz", "out.json", _trace_ok, ("trace", "import", "IN", "-o", "OUT")),
        "trace import, flight recorder": Command(FR / "nccl_trace_rank_0.json", "nccl_trace_rank_0.json", "out.json",
                                                 _trace_ok, ("trace", "import", "IN", "-o", "OUT")),
        "trace import, execution trace": Command(DATA / "traces" / "param" / "resnet_2gpu_et.json.gz", "et.json.gz",
                                                 "out.json", _trace_ok,
                                                 ("trace", "import", "IN", "--format", "chakra", "-o", "OUT")),
        "trace import, nccl-tests": Command(L40S_LOG, "log.txt", "out.json", _strict_json,
                                            ("trace", "import", "IN", "--format", "nccl-tests", "-o", "OUT")),
        "trace generate, plan": Command(plan, "plan.yaml", "out.json", _trace_ok,
                                        ("trace", "generate", "--model", "llama-3.1-8b", "--plan", "IN", "-o", "OUT")),
        "trace generate, model": Command(ROOT / "traces" / "generate" / "models" / "llama-3.1-8b.yaml", "model.yaml",
                                         "out.json", _trace_ok,
                                         ("trace", "generate", "--model", "IN", "--plan", str(plan), "-o", "OUT")),
        "topology import, nvidia-smi": Command(smi, "smi.txt", "out.yaml", _cluster_ok,
                                               ("topology", "import", "IN", *machine)),
        "topology import, NCCL XML": Command(xml, "topo.xml", "out.yaml", _cluster_ok,
                                             ("topology", "import", "IN", *machine)),
        "rank, trace": Command(trace, "job.json", "plan.json", _plan_ok,
                               ("rank", "--trace", "IN", "--topology", "l40s-pcie", "-o", "OUT")),
        "rank, topology": Command(PRESET_DIR / "l40s-pcie.yaml", "c.yaml", "plan.json", _plan_ok,
                                  ("rank", "--trace", str(trace), "--topology", "IN", "-o", "OUT")),
        "whatif --html": Command(trace, "job.json", "report.html", _html_ok,
                                 ("whatif", "--trace", "IN", "--topology", "l40s-pcie", "--no-tuned", "--html", "OUT")),
        "calibrate -o": Command(L40S_TREE_LOG, "log.txt", "profile.json", _profile_ok,
                                ("calibrate", "-m", "IN", "--topology", str(L40S), "--no-residual", "-o", "OUT")),
        "store import, log": Command(L40S_LOG, "log.txt", "out.db", _store_ok,
                                     ("store", "import", "OUT", "IN", "--hardware", "l40s"), earlier=False),
        "store import, store": Command(store, "t.db", None, _store_ok,
                                       ("store", "import", "IN", str(L40S_LOG), "--hardware", "other")),
        "store export --csv": Command(store, "t.db", "out.csv", _csv_ok, ("store", "export", "IN", "--csv", "OUT")),
    }


def run_case(command: Command, how: str, rnd: random.Random, folder: Path) -> tuple[str, str]:
    """(outcome, detail): ``ok``, ``clear`` error, ``traceback``, ``hang``, ``silent`` (exit 0
    with an output its reader refuses), ``lost`` (an earlier output changed or removed, or a
    half-written one left, by a failed command) or ``vague`` (an error not naming the file)."""
    gz = how == "corrupt gzip" and not command.name.endswith((".gz", ".db"))
    damaged = folder / (command.name + ".gz" if gz else command.name)
    damaged.write_bytes(_mutate(command.seed.read_bytes(), how, rnd))
    output = folder / command.output if command.output else damaged
    if command.output and command.earlier and rnd.random() < 0.5:
        output.write_bytes(EARLIER)
    before = output.read_bytes() if output.exists() else None
    try:
        with bounded(CASE_SECONDS):
            return _outcome(command, how, damaged, output, before)
    finally:
        shutil.rmtree(folder)
        folder.mkdir()


def _outcome(command: Command, how: str, damaged: Path, output: Path, before: bytes | None) -> tuple[str, str]:
    result = runner.invoke(app, command.argv(damaged, output), catch_exceptions=True)
    if isinstance(result.exception, Hang):
        return "hang", how
    if result.exit_code not in (0, 2) or (result.exception and not isinstance(result.exception, SystemExit)):
        detail = "".join(traceback.format_exception(result.exception, limit=-3)) if result.exception else ""
        return "traceback", f"{how}: exit {result.exit_code}: {detail or result.output[-300:]}"
    if result.exit_code == 0:
        try:
            command.check(output)
        except Exception as err:  # any refusal of the output is the finding
            return "silent", f"{how}: {err!r}"[:300]
        return "ok", ""
    lines = [line for line in result.output.strip().splitlines() if not line.startswith("warning:")]
    if len(lines) != 1 or not lines[0].startswith("error: "):
        return "traceback", f"{how}: not one error line: {result.output[-300:]!r}"
    if damaged.name not in lines[0]:
        return "vague", f"{how}: {lines[0][:200]}"
    if command.output is None:
        return "clear", lines[0]
    after = output.read_bytes() if output.exists() else None
    if after != before:
        return "lost", f"{how}: the output was {'changed' if after else 'removed'}: {lines[0][:200]}"
    return "clear", lines[0]


@pytest.fixture(scope="module")
def commands(tmp_path_factory):
    return _commands(tmp_path_factory.mktemp("seeds"))


def test_every_seed_runs_clean(commands, tmp_path):
    """Undamaged inputs: every command writes an output its reader accepts."""
    for label, command in commands.items():
        folder = tmp_path / "case"
        folder.mkdir()
        copy = folder / command.name
        copy.write_bytes(command.seed.read_bytes())
        output = folder / command.output if command.output else copy
        result = runner.invoke(app, command.argv(copy, output))
        assert result.exit_code == 0, (label, result.output)
        command.check(output)
        shutil.rmtree(folder)


LABELS = ["trace import, Kineto", "trace import, flight recorder", "trace import, execution trace",
          "trace import, nccl-tests", "trace generate, plan", "trace generate, model", "topology import, nvidia-smi",
          "topology import, NCCL XML", "rank, trace", "rank, topology", "whatif --html", "calibrate -o",
          "store import, log", "store import, store", "store export --csv"]
SLOW = {"calibrate -o": 4, "whatif --html": 6}
"""Fewer cases for commands that take seconds each."""


@pytest.mark.parametrize("label", LABELS)
def test_a_damaged_input_never_breaks_a_writing_command(commands, tmp_path, label):
    @settings(max_examples=SLOW.get(label, 12), deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(how=st.sampled_from(MUTATIONS), seed=st.integers(0, 2 ** 32))
    def case(how, seed):
        folder = tmp_path / "case"
        folder.mkdir(exist_ok=True)
        outcome, detail = run_case(commands[label], how, random.Random(seed), folder)
        assert outcome in ("ok", "clear"), detail

    case()


def table(cases_per_cell: int = 3, seed: int = 0) -> str:
    """The markdown table of outcomes per command (every mutation ``cases_per_cell`` times)."""
    with tempfile.TemporaryDirectory() as tmp:
        commands = _commands(Path(tmp))
        return outcome_table(LABELS, lambda label, how, rnd, folder: run_case(commands[label], how, rnd, folder),
                             [("command", ""), ("clear errors", "clear"), ("sane outputs", "ok"),
                              *OUTCOMES[2:], ("outputs lost or half-written", "lost"),
                              ("errors not naming the file", "vague")], cases_per_cell, seed)


if __name__ == "__main__":
    import sys

    print(table(int(sys.argv[1]) if len(sys.argv) > 1 else 3))
