"""Killing a writing command (SIGKILL, at a random moment) loses nothing and half-writes nothing.

Each round starts one ``ccltwin`` command in its own process over an earlier output, kills it
after a random delay (0 to the command's full run time), and looks: the earlier output is there
as it was, or the new one is complete (its reader accepts it); a store has whole transactions
only. The temporary file a killed writer leaves is removed by the next write of the same path.
``python -m tests.ccltwin.test_killed_writers`` prints the table of benchmarks/RESULTS.md
(section Hardening).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.ccltwin.test_fuzz_commands import EARLIER, L40S, L40S_LOG, ROOT, job_trace
from tests.test_fuzz_inputs import FR
from tests.testdata import DATA
from traces.trace_file import load_trace
from tuner.measurement import read_nccl_tests_measurements
from tuner.plan import load_plan
from tuner.store import Store
from twin.profile import load_profile
from twin.topology.loader import load_cluster

ROWS = len(read_nccl_tests_measurements(L40S_LOG, hardware="l40s"))


@dataclass(frozen=True)
class Writer:
    """A command that writes ``output`` (in the round's folder) and how to read what it wrote."""

    argv: tuple[str, ...]
    """After ``python -m ccltwin``; ``OUT`` stands for the output, ``TRACE`` for a real trace."""
    output: str
    read: object


WRITERS = {
    "trace generate": Writer(("trace", "generate", "--preset", "autoccl-llama8b", "-o", "OUT"), "out.json",
                             load_trace),
    "trace import": Writer(("trace", "import", *map(str, sorted(FR.glob("*.json"))), "-o", "OUT"), "out.json.gz",
                           load_trace),
    "rank -o": Writer(("rank", "--trace", "TRACE", "--topology", "l40s-pcie", "-o", "OUT"), "plan.json", load_plan),
    "topology import": Writer(("topology", "import", str(DATA / "topology" / "nvidia-smi" / "sglang-30401-h100.txt"),
                               "--gpu-model", "h100", "--nic-gbps", "400", "-o", "OUT"), "out.yaml", load_cluster),
    "calibrate -o": Writer(("calibrate", "-m", str(L40S_LOG), "--topology", str(L40S), "-o", "OUT"), "profile.json",
                           load_profile),
    "store import": Writer(("store", "import", "OUT", str(L40S_LOG), "--hardware", "killed"), "t.db", None),
}


def _prepare(folder: Path, writer: Writer, trace: Path) -> Path:
    output = folder / writer.output
    if writer.read is None:  # a store with one earlier import
        with Store(output) as store:
            store.add_unseen(read_nccl_tests_measurements(L40S_LOG, hardware="earlier"))
    else:
        output.write_bytes(EARLIER)
    return output


def _argv(writer: Writer, output: Path, trace: Path) -> list[str]:
    return [sys.executable, "-m", "ccltwin", *[{"OUT": str(output), "TRACE": str(trace)}.get(a, a)
                                               for a in writer.argv]]


def kill_round(writer: Writer, folder: Path, trace: Path, delay: float) -> tuple[str, int]:
    """Run ``writer`` over an earlier output, SIGKILL it after ``delay`` s: (what was found:
    ``earlier``, ``complete``, ``half``; temporaries the kill left beside the output)."""
    output = _prepare(folder, writer, trace)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(_argv(writer, output, trace), env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        process.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGKILL)
        process.wait()
    leftovers = len([p for p in folder.iterdir() if p.name.startswith(f".{output.name}.ccltwin-")])
    if writer.read is None:
        with Store(output, create=False, full_check=True) as store:
            count = store.count()
            assert store.integrity_check() == "ok"
        return ("earlier" if count == ROWS else "complete" if count == 2 * ROWS else "half"), leftovers
    if output.read_bytes() == EARLIER:
        return "earlier", leftovers
    try:
        writer.read(output)
    except Exception:  # any refusal: the output is not whole
        return "half", leftovers
    return "complete", leftovers


def _full_seconds(writer: Writer, folder: Path, trace: Path) -> float:
    output = _prepare(folder, writer, trace)
    began = time.monotonic()
    subprocess.run(_argv(writer, output, trace), env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - began


def _clean(folder: Path) -> None:
    for path in folder.iterdir():
        path.unlink()


@pytest.mark.parametrize("label", ["trace generate", "store import"])
def test_a_killed_writer_leaves_the_earlier_output_or_a_complete_one(tmp_path, label):
    writer, rnd = WRITERS[label], random.Random(label)
    trace = job_trace(tmp_path)
    folder = tmp_path / "round"
    folder.mkdir()
    full = _full_seconds(writer, folder, trace)
    _clean(folder)
    seen = Counter()
    for _ in range(4):
        outcome, leftovers = kill_round(writer, folder, trace, rnd.uniform(0.3, 1.0) * full)
        seen[outcome] += 1
        assert outcome != "half"
        if leftovers:  # the next write of the same path removes what the killed one left
            output = folder / writer.output
            output.unlink()
            subprocess.run(_argv(writer, output, trace), env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True,
                           stdout=subprocess.DEVNULL)
            assert not [p for p in folder.iterdir() if p.name.startswith(f".{output.name}.ccltwin-")]
        _clean(folder)
    assert sum(seen.values()) == 4


def table(rounds: int = 10, seed: int = 0) -> str:
    """The markdown table: per writer, ``rounds`` kills at uniform random moments of its run."""
    rnd = random.Random(seed)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        trace = job_trace(Path(tmp))
        folder = Path(tmp) / "round"
        folder.mkdir()
        for label, writer in WRITERS.items():
            full = _full_seconds(writer, folder, trace)
            _clean(folder)
            seen, left = Counter(), 0
            for _ in range(rounds):
                outcome, leftovers = kill_round(writer, folder, trace, rnd.uniform(0.0, 1.0) * full)
                seen[outcome] += 1
                left += leftovers
                _clean(folder)
            rows.append(f"| {label} | {full:.1f} | {rounds} | {seen['earlier']} | {seen['complete']} | "
                        f"{seen['half']} | {left} |")
    head = ["| writer | full run (s) | kills | earlier output intact | new output complete | half-written | "
            "temporaries left (removed by the next write) |", "|---|---|---|---|---|---|---|"]
    return "\n".join([*head, *rows])


if __name__ == "__main__":
    print(table(int(sys.argv[1]) if len(sys.argv) > 1 else 10))
