"""Import speed and memory of a large Kineto trace: the target is 500 MB in under a minute and 1 GB.

Builds a Kineto file of about ``--target-mb`` by repeating a real profiler trace (by default
the V100 DDP trace from HolisticTraceAnalysis in tests/data/traces/hta) end to end: each
copy's timestamps are shifted past the previous copy, its correlation ids past the previous
ones (so kernels still pair with their launches) and its ``ProfilerStep#N`` numbers past the
previous steps. Then imports it with ``traces.kineto.read_kineto`` in a fresh process and
reports wall time and peak resident memory (``ru_maxrss``) of that process.

    python benchmarks/trace_import.py [--target-mb 500] [--source FILE] [--keep DIR]
"""

from __future__ import annotations

import argparse
import gzip
import json
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from data_dir import default_path, missing

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SOURCE = default_path("traces", "hta", "v100-2rank-ddp-small-allreduce.json.gz")
STEP = re.compile(r"^ProfilerStep#(\d+)$")

IMPORT = """
import json, resource, sys, time
start = time.perf_counter()
from traces.kineto import read_kineto
trace = read_kineto([sys.argv[1]])
seconds = time.perf_counter() - start
print(json.dumps({
    "seconds": seconds,
    "cpu_seconds": sum(resource.getrusage(resource.RUSAGE_SELF)[:2]),
    "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "ranks": len(trace.ranks),
    "trace_events": sum(len(r.events) for r in trace.ranks),
    "collectives": sum(1 for _ in trace.collectives()),
    "iterations": trace.iterations,
}))
"""


def _load(source: Path) -> dict:
    opener = gzip.open if source.suffix == ".gz" else open
    with opener(source, "rt", encoding="utf-8") as file:
        return json.load(file)


def _template(event: dict, strides: dict[str, float]) -> tuple[list[str], list[tuple[float, float]]]:
    """The event's JSON cut where each copy shifts a value, and (value, shift per copy) for each cut."""
    marked, shifts = dict(event), {}
    if isinstance(event.get("ts"), int | float):
        marked["ts"], shifts["ts"] = "@@ts@@", (float(event["ts"]), strides["ts"])
    if isinstance(event.get("id"), int):
        marked["id"], shifts["id"] = "@@id@@", (event["id"], strides["id"])
    args = event.get("args")
    if isinstance(args, dict) and isinstance(args.get("correlation"), int):
        marked["args"] = {**args, "correlation": "@@corr@@"}
        shifts["corr"] = (args["correlation"], strides["corr"])
    if isinstance(event.get("name"), str) and (step := STEP.match(event["name"])):
        marked["name"], shifts["step"] = "ProfilerStep#@@step@@", (int(step[1]), strides["step"])
    text = json.dumps(marked, separators=(",", ":"))
    parts = re.split(r'"@@(ts|id|corr)@@"|@@(step)@@', text)
    # re.split with two groups yields: text, ts|id|corr|None, step|None, text, ...
    pieces = parts[::3]
    cuts = [shifts[a or b] for a, b in zip(parts[1::3], parts[2::3], strict=True)]
    return pieces, cuts


def build(source: Path, target_bytes: int, out: Path) -> tuple[int, int]:
    """Write ``out``, about ``target_bytes`` long; return (copies, events written)."""
    doc = _load(source)
    events = doc.pop("traceEvents")
    times = [e["ts"] + e.get("dur", 0) for e in events if isinstance(e.get("ts"), int | float)]
    correlations = [e["args"].get("correlation") for e in events if isinstance(e.get("args"), dict)]
    steps = [int(m[1]) for e in events if isinstance(e.get("name"), str) and (m := STEP.match(e["name"]))]
    strides = {
        "ts": float(max(times) - min(times) + 1000),
        "id": max((e["id"] for e in events if isinstance(e.get("id"), int)), default=0) + 1,
        "corr": max((c for c in correlations if isinstance(c, int)), default=0) + 1,
        "step": max(steps) - min(steps) + 1 if steps else 0,
    }
    templates = [_template(event, strides) for event in events]
    one_copy = sum(len("".join(pieces)) + 12 * len(cuts) + 2 for pieces, cuts in templates)
    copies = max(1, round(target_bytes / one_copy))
    head = json.dumps(doc, separators=(",", ":"))[:-1]
    with open(out, "w", encoding="utf-8") as file:
        file.write(head + ("," if doc else "") + '"traceEvents":[\n')
        for copy in range(copies):
            lines = []
            for pieces, cuts in templates:
                parts = [pieces[0]]
                for (value, stride), piece in zip(cuts, pieces[1:], strict=True):
                    parts += [repr(value + copy * stride), piece]
                lines.append("".join(parts))
            file.write(("" if copy == 0 else ",\n") + ",\n".join(lines))
        file.write("\n]}\n")
    return copies, copies * len(events)


def measure(path: Path) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", IMPORT, str(path)], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if result.returncode:
        raise SystemExit(f"import failed:\n{result.stderr}")
    return json.loads(result.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, metavar="FILE",
                        help=f"the Kineto trace to repeat (default: {DEFAULT_SOURCE})")
    parser.add_argument("--target-mb", type=float, default=500)
    parser.add_argument("--keep", type=Path, help="Write the big trace here and keep it (default: a temp dir).")
    parser.add_argument("--build-only", type=Path, metavar="FILE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.source.is_file():
        missing(f"{args.source}: no such Kineto trace (give one with --source FILE)")
    if args.build_only:
        print(json.dumps(build(args.source, int(args.target_mb * 1e6), args.build_only)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        directory = args.keep or Path(tmp)
        directory.mkdir(parents=True, exist_ok=True)
        big = directory / "kineto-big.json"
        start = time.perf_counter()
        # Built in a process of its own: Linux carries a parent's peak RSS into a child's
        # ru_maxrss across fork and exec, so the importing process must come from a small parent.
        built_by = subprocess.run(
            [sys.executable, __file__, "--source", str(args.source), "--target-mb", str(args.target_mb),
             "--build-only", str(big)],
            capture_output=True, text=True, check=True,
        )
        copies, events = json.loads(built_by.stdout)
        built = time.perf_counter() - start
        size_mb = big.stat().st_size / 1e6
        row = measure(big)
    print(f"source: {args.source.name} x {copies} copies, built in {built:.0f} s")
    print(f"machine: {platform.machine()}, {platform.python_implementation()} {platform.python_version()}, "
          f"{_cpus()} CPU(s)")
    header = ("file MB", "events in file", "imported events", "collectives", "iterations", "wall s", "CPU s",
              "peak MB")
    cells = (f"{size_mb:.0f}", f"{events:,}", f"{row['trace_events']:,}", f"{row['collectives']:,}",
             str(row["iterations"]), f"{row['seconds']:.1f}", f"{row['cpu_seconds']:.1f}", f"{row['peak_mb']:.0f}")
    widths = [max(len(h), len(c)) for h, c in zip(header, cells, strict=True)]
    print(" | ".join(h.rjust(w) for h, w in zip(header, widths, strict=True)))
    print(" | ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True)))


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 0


if __name__ == "__main__":
    main()
