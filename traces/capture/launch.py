"""The torchrun command line that runs a script under capture (what ``ccltwin trace capture`` starts)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from os import PathLike

__all__ = ["torchrun_command"]


def torchrun_command(
    script: str | PathLike[str],
    script_args: Sequence[str],
    output: str | PathLike[str],
    *,
    nproc_per_node: int = 1,
    iterations: int | None = None,
    warmup: int = 0,
) -> list[str]:
    """torchrun on this host (``--standalone``: it picks a free port) running ``traces.capture``.

    >>> torchrun_command("train.py", ["--lr", "0.1"], "job.json", nproc_per_node=2, iterations=3)[3:]
    ['--standalone', '--nproc-per-node=2', '-m', 'traces.capture', '-o', 'job.json', '--warmup', '0', \
'--iterations', '3', 'train.py', '--lr', '0.1']
    """
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc_per_node}"]
    command += ["-m", "traces.capture", "-o", str(output), "--warmup", str(warmup)]
    if iterations is not None:
        command += ["--iterations", str(iterations)]
    return [*command, str(script), *script_args]
