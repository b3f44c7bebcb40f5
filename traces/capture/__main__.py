"""``python -m traces.capture -o job.json [--iterations N] [--warmup W] train.py [args...]``.

Runs a training script under capture, one process per rank, as torchrun starts it::

    torchrun --nproc-per-node 2 -m traces.capture -o job.json --warmup 1 --iterations 3 train.py --lr 0.1

An iteration ends at every ``optimizer.step()`` (with several optimizers, at each of their
steps). The script runs as ``__main__`` with its own arguments, as ``python train.py`` would.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys

from traces.capture.session import Capture
from traces.errors import TraceError


def _count(minimum: int):
    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m traces.capture", description="Run a training script and capture its collectives."
    )
    parser.add_argument("-o", "--output", required=True, help="trace file to write (rank 0 writes it)")
    parser.add_argument("--iterations", type=_count(1), default=None, help="iterations to record (default: all)")
    parser.add_argument("--warmup", type=_count(0), default=0, help="iterations to run unrecorded first")
    parser.add_argument("script", help="the training script")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="the script's own arguments")
    return parser


def _run_script(path: str, cap: Capture) -> None:
    from torch.optim.optimizer import register_optimizer_step_post_hook

    handle = register_optimizer_step_post_hook(lambda optimizer, args, kwargs: cap.step())
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as stop:
        if stop.code not in (None, 0):
            raise
    finally:
        handle.remove()


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    sys.argv = [args.script, *args.script_args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(args.script)))
    rank = os.environ.get("RANK", "0")
    try:
        with Capture(args.output, iterations=args.iterations, warmup=args.warmup) as cap:
            _run_script(args.script, cap)
    except TraceError as err:
        print(f"ccltwin capture (rank {rank}): error: {err}", file=sys.stderr)
        return 1
    if cap.trace is not None:
        calls = sum(1 for _ in cap.trace.collectives())
        print(
            f"ccltwin capture: wrote {args.output}: {len(cap.trace.ranks)} ranks, {cap.trace.iterations} "
            f"iteration(s), {calls} collective calls, {len(cap.trace.tasks())} distinct tasks",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
