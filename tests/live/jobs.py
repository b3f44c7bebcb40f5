"""The multi-process jobs of tests/live, run as ``python tests/live/jobs.py SCENARIO DIR JSON``.

Torch is imported once here and the ranks are forked from this process (``launch.run_job``
starts it); every rank writes what it saw to ``DIR/rank<r>.json``.
"""

from __future__ import annotations

import json
import os
import random
import socket
import sys
import time
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _init(rank: int, world: int, port: int) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    dist.init_process_group("gloo", rank=rank, world_size=world)


def _write(folder: str, rank: int, result: dict) -> None:
    path = Path(folder) / f"rank{rank}.json"
    path.with_suffix(".tmp").write_text(json.dumps(result))
    path.with_suffix(".tmp").replace(path)


# ---- the coordinator alone: rounds over the c10d store, rules applied by call index ------------


def _select(rules, key, occurrence: int) -> list[int]:
    """What the plugin applies at ``occurrence``: the rule with the largest from-occurrence ≤ it
    (the largest version among equal ones); ``[-1, -1, 0, 0]`` (NCCL's) when none."""
    live = [r for r in rules if r.key == key and r.from_occurrence <= occurrence]
    if not live:
        return [-1, -1, 0, 0]
    r = max(live, key=lambda r: (r.from_occurrence, r.version))
    return [r.algo, r.proto, r.nchannels, r.chunk_bytes]


def coordinator(rank: int, world: int, port: int, folder: str, p: dict) -> None:
    """Each round a rank issues ``calls`` calls of one key, then runs a round in which the leader
    wants a new random config; some ranks sleep before chosen rounds, the leader may stop."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    from live.coordinator import Coordinator
    from live.schedule import TaskKey, comm_id

    _init(rank, world, port)
    messages = []
    coord = Coordinator(distributed_c10d._get_default_store(), comm=comm_id("0", tuple(range(world))), rank=rank,
                        nranks=world, launch="test", deadline_s=p["deadline_s"], max_misses=p.get("max_misses", 3),
                        log=messages.append, store_errors=(dist.DistError,))
    key = TaskKey(coord.comm, 4, 4096)
    rng = random.Random(7)
    rules, applied, outcomes = [], [], []
    count = 0
    slow = {int(r): set(rounds) for r, rounds in p.get("slow", {}).items()}
    for i in range(p["rounds"]):
        for _ in range(p["calls"]):
            applied.append(_select(rules, key, count))
            count += 1
        dist.barrier()  # the iteration's collectives: no rank runs an iteration ahead
        if i in slow.get(rank, ()):
            time.sleep(p["slow_s"])
        if coord.leader:
            coord.want(key, (rng.choice([0, 1]), rng.choice([0, 1, 2]), rng.randint(1, 8), 0))
            if p.get("leader_stops_at") is not None and i >= p["leader_stops_at"]:
                continue
        result = coord.exchange(i, {key: count}, final=p.get("final_at") == i)
        rules += result.installed
        outcomes.append([i, result.outcome, [r.fields() for r in result.installed]])
    _write(folder, rank, {"applied": applied, "outcomes": outcomes, "stopped": coord.stopped, "final": coord.final,
                          "messages": messages})
    dist.barrier()
    dist.destroy_process_group()


SCENARIOS = {"coordinator": coordinator}


def _rank_main(rank: int, scenario: str, port: int, folder: str, params: dict) -> None:
    SCENARIOS[scenario](rank, params["world"], port, folder, params)


if __name__ == "__main__":
    import torch.multiprocessing

    name, out, raw = sys.argv[1:4]
    params = json.loads(raw)
    torch.multiprocessing.start_processes(_rank_main, args=(name, _free_port(), out, params),
                                          nprocs=params["world"], start_method="fork")
