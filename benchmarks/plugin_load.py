"""Does the NCCL of this machine's torch load ccltwin's plugin as its tuner and its profiler?

Builds the plugin with the system C compiler, points ``NCCL_TUNER_PLUGIN``/``NCCL_PROFILER_PLUGIN``
at it (``live.plugin.install_env``), opens a 1-rank NCCL process group on GPU 0 (eagerly, with
``device_id``), runs a few all-reduces and destroys the group, with ``NCCL_DEBUG=INFO`` written to a
file.  Prints the NCCL version detected and what it lets the plugin change, the NCCL log lines about
the plugins (which ``ncclTunerPlugin_vN``/``ncclProfiler_vN`` NCCL took) and the plugin's own init
lines, and what ``ccltwin_comms()`` returns before and after the group is destroyed.  A 1-rank
communicator never asks the tuner (``getCollInfo``) nor launches a kernel (NCCL copies locally), so
no decision and no event are expected.  Needs a GPU; keep ``NCCL_NVLS_ENABLE=0`` where the host asks.

    NCCL_NVLS_ENABLE=0 python benchmarks/plugin_load.py --log-dir /tmp/ncclog
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

PLUGIN_LINES = re.compile(r"ccltwin|TUNER/Plugin|PROFILER/Plugin|tuner plugin|profiler plugin|NCCL version|"
                          r"Init (START|COMPLETE)|NCCL_TUNER_PLUGIN|NCCL_PROFILER_PLUGIN|NCCL_NVLS_ENABLE")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log-dir", type=Path, required=True, help="where NCCL writes its debug log")
    parser.add_argument("--calls", type=int, default=5, help="all-reduces to run")
    args = parser.parse_args()
    args.log_dir.mkdir(parents=True, exist_ok=True)
    os.environ.update(NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT,TUNING,ENV",
                      NCCL_DEBUG_FILE=str(args.log_dir / "nccl.%p.log"))

    from live.plugin import Plugin, install_env

    installed = install_env()  # before torch creates any communicator
    import torch
    import torch.distributed as dist

    from live.nccl import report_once

    info = report_once()
    print(f"plugin: {installed.path} (tuner {installed.tuner}, profiler {installed.profiler})")
    print(f"NCCL: {info.summary()}")
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1, device_id=torch.device("cuda", 0))
    x = torch.ones(1 << 20, device="cuda")
    for _ in range(args.calls):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    assert x[0].item() == 1.0
    plugin = Plugin.load()
    print("ccltwin_comms() with the group open:")
    for c in plugin.comms():
        print(f"  {c}")
    print(f"decisions: {len(plugin.drain_decisions())}, events: {len(plugin.drain_events())}, {plugin.dropped()}")
    dist.destroy_process_group()
    print("ccltwin_comms() after destroy_process_group:")
    for c in plugin.comms():
        print(f"  {c}")
    print("NCCL log lines about the plugins:")
    for log in sorted(args.log_dir.glob("nccl.*.log")):
        for line in log.read_text().splitlines():
            if PLUGIN_LINES.search(line):
                print(f"  {line}")


if __name__ == "__main__":
    main()
