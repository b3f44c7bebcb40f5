"""Run a training script under torchrun with the twin's executor as live tuning's time source.

    torchrun --nproc-per-node 2 tests/live/twin_run.py SCRIPT ARGS...

The script itself is unchanged (its one line ``live.enable()``); this launcher only sets what
that ``enable()`` uses where CI has no GPU: ``live.defaults(clock=TwinExecutor(...))``, the
cluster from ``CCLTWIN_TEST_PRESET`` (default ``dgx-h100``, one node), and a decision log per
rank in ``CCLTWIN_TEST_DECISIONS`` when set. The store comes from ``CCLTWIN_LIVE_STORE``.
"""

from __future__ import annotations

import os
import runpy
import sys

import live
from twin.executor import TwinExecutor
from twin.topology import load_cluster

if __name__ == "__main__":
    live.defaults(clock=TwinExecutor(load_cluster(os.environ.get("CCLTWIN_TEST_PRESET", "dgx-h100"), nodes=1)),
                  decision_log=os.environ.get("CCLTWIN_TEST_DECISIONS"))
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
