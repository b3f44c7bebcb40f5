"""The multi-process jobs of tests/live, run as ``python tests/live/jobs.py SCENARIO DIR JSON``.

Torch is imported once here and the ranks are forked from this process (``launch.run_job``
starts it); every rank writes what it saw to ``DIR/rank<r>.json``.
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
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


def _select(rules, key, occurrence: int) -> list:
    """What the plugin applies at ``occurrence``: the rule with the largest from-occurrence ≤ it
    (the largest version among equal ones); NCCL's own choice (nulls) when none."""
    live = [r for r in rules if r.key == key and r.from_occurrence <= occurrence]
    if not live:
        return [None, None, 0, 0]
    r = max(live, key=lambda r: (r.from_occurrence, r.version))
    return [r.fields[0] and r.fields[0].value, r.fields[1] and r.fields[1].value, *r.fields[2:]]


def coordinator(rank: int, world: int, port: int, folder: str, p: dict) -> None:
    """Each round a rank issues ``calls`` calls of one key, then runs a round in which the leader
    wants a new random config; some ranks sleep before chosen rounds, the leader may stop."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    from live.coordinator import Coordinator
    from live.schedule import TaskKey, comm_id
    from traces.task import Op
    from tuner.config import Algo, Proto

    _init(rank, world, port)
    messages = []
    coord = Coordinator(distributed_c10d._get_default_store(), comm=comm_id("0", tuple(range(world))), rank=rank,
                        nranks=world, launch="test", deadline_s=p["deadline_s"], max_misses=p.get("max_misses", 3),
                        log=messages.append, timeout_error=dist.DistStoreError, store_errors=(dist.DistError,))
    key = TaskKey(coord.comm, Op.ALLREDUCE, 4096)
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
            coord.want(key, (rng.choice([Algo.TREE, Algo.RING]), rng.choice(list(Proto)), rng.randint(1, 8), 0))
            if p.get("leader_stops_at") is not None and i >= p["leader_stops_at"]:
                continue
        result = coord.exchange(i, {key: count}, final=p.get("final_at") == i)
        rules += result.installed
        outcomes.append([i, result.outcome, [r.to_dict() for r in result.installed]])
    _write(folder, rank, {"applied": applied, "outcomes": outcomes, "stopped": coord.stopped, "final": coord.final,
                          "messages": messages})
    dist.barrier()
    dist.destroy_process_group()


# ---- the whole live path: DDP on gloo, the twin's executor as the time source ----------------------

DATA = Path(__file__).with_name("data")


def twin_clock(p: dict):
    """The twin's executor of the job's cluster, the time source of every live test."""
    from twin.executor import TwinExecutor
    from twin.topology import load_cluster

    return TwinExecutor(load_cluster(p.get("preset", "dgx-h100"), nodes=1), seed=p.get("seed", 0),
                        noise=p.get("noise", 0.02), spike_prob=p.get("spike_prob", 0.0))


class FaultyClock:
    """The twin's times, with faults: every ``late``-th call's time comes one boundary late, every
    ``lost``-th call's never comes, and configs on ``fail_channels`` channels fail (``inf``)."""

    def __init__(self, executor, *, late: int = 0, lost: int = 0, fail_channels: tuple[int, ...] = ()):
        self.executor = executor
        self.hardware, self.nccl_version = executor.hardware, executor.nccl_version
        self.late, self.lost, self.fail_channels = late, lost, set(fail_channels)
        self.asked: set = set()
        self.withheld = 0

    def facts(self, task):
        return self.executor.facts(task)

    def default_config(self, task):
        return self.executor.default_config(task)

    def ready(self, task):
        return True

    def time_us(self, task, config, call):
        key = (call.comm, call.op, call.nbytes, call.occurrence)
        first = key not in self.asked
        self.asked.add(key)
        if (self.lost and call.occurrence % self.lost == 0) or (self.late and call.occurrence % self.late == 0
                                                                  and first):
            self.withheld += 1
            return None
        if config.nchannels in self.fail_channels:
            return math.inf
        return self.executor.measure(task, config)


def _inject(rank: int, p: dict) -> None:
    """The rank-local faults ``p`` asks for: sleeping before chosen rounds, a leader that stops
    publishing rounds after some boundary (its tuning is gone; its process and its plugin go on),
    a rank killed with SIGKILL at a boundary."""
    from live.coordinator import Coordinator, RoundResult
    from live.session import Live

    exchange = Coordinator.exchange
    slow = set(p.get("slow", {}).get(str(rank), ()))
    dead_at = p.get("leader_dead_at") if rank == 0 else None

    def faulty_exchange(self, i, counts, **kw):
        if dead_at is not None and i >= dead_at:
            return RoundResult(i, "none")
        if i in slow:
            time.sleep(p["slow_s"])
        return exchange(self, i, counts, **kw)

    Coordinator.exchange = faulty_exchange
    kill = p.get("kill", {}).get(str(rank))
    if kill is not None:
        boundary = Live._boundary

        def killed_boundary(self):
            if self.boundaries == kill:
                os.kill(os.getpid(), signal.SIGKILL)
            boundary(self)

        Live._boundary = killed_boundary


def _tuning_report(tuning) -> dict:
    r = tuning.result
    return {"task": [tuning.task.op.value, tuning.task.nbytes, tuning.task.nranks, tuning.task.dtype,
                     tuning.task.group],
            "winner": None if r is None else str(r.winner), "time_us": None if r is None else r.time_us,
            "default_us": None if r is None else r.default_us, "trials": tuning.session.search.trials,
            "resumed": tuning.session.resumed, "failed": [[str(c), why] for c, why in tuning.failed],
            "first_round": tuning.first_round, "converged_round": tuning.converged_round,
            "history": [[str(c), t] for c, t in tuning.session.search.history]}


def ddp(rank: int, world: int, port: int, folder: str, p: dict) -> None:
    """``ddp_train.train`` with live tuning on, the twin's executor timing every call."""
    import torch.distributed as dist

    import live

    sys.path.insert(0, str(DATA))
    from ddp_train import train

    _init(rank, world, port)
    _inject(rank, p)
    faults = p.get("clock_faults")
    clock = FaultyClock(twin_clock(p), **faults) if faults else twin_clock(p)
    losses = train(str(Path(folder) / "out"), p["iterations"], clock=clock, store=p["store"],
                   decision_log=str(Path(folder) / "decisions{rank}.jsonl"), deadline_s=p.get("deadline_s", 10.0),
                   max_misses=p.get("max_misses", 3), max_wait=p.get("max_wait", 5), budget=p.get("budget"),
                   plan=p.get("plan"), mode=p.get("mode"))
    session = live.current()
    session.close()
    _write(folder, rank, {
        "losses": losses, "stopped": session.stopped, "converged_at": session.converged_at,
        "hardware": session.hardware, "boundaries": session.boundaries,
        "tunings": [_tuning_report(t) for t in session.tasks()],
        "seconds": [s.seconds for s in session.stats], "withheld": getattr(clock, "withheld", 0),
        "lost": sum(t.lost for t in session.tasks()),
        "aborted": sum(c.aborted for c in session._coordinators.values()),
        "comm_stopped": [c.stopped for c in session._coordinators.values() if c.stopped]})
    dist.barrier()
    dist.destroy_process_group()


def collectives(rank: int, world: int, port: int, folder: str, p: dict) -> None:
    """Every way a job issues collectives, under live tuning enabled (as a context manager) before
    the process group exists: DDP's reducer, FSDP2, functional collectives and plain ``dist.*``
    on the world and on a subgroup, plus point-to-point and AllToAll (which no tuner sees);
    ``live.step()`` ends each iteration."""
    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    import live

    with live.enable(clock=twin_clock(p), store=p["store"], budget=4, quiet=True,
                     decision_log=str(Path(folder) / "decisions{rank}.jsonl")):  # before init_process_group
        _init(rank, world, port)
        pair = dist.new_group([0, 1])
        torch.manual_seed(0)
        ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(32, 16))
        sharded = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 8))
        mesh = init_device_mesh("cpu", (world,))
        for layer in sharded:
            fully_shard(layer, mesh=mesh)
        for _ in range(p["iterations"]):
            ddp(torch.randn(4, 32)).sum().backward()
            sharded(torch.randn(4, 16)).sum().backward()
            funcol.wait_tensor(funcol.all_reduce(torch.ones(24), "sum", dist.group.WORLD))
            if rank in (0, 1):
                dist.all_gather_into_tensor(torch.zeros(2 * 40), torch.ones(40), group=pair)
            dist.broadcast(torch.ones(12), src=0)
            dist.all_to_all_single(torch.zeros(4 * world), torch.ones(4 * world))
            if rank in (0, 1):
                peer = 1 - rank
                (dist.send if rank == 0 else dist.recv)(torch.ones(6), peer)
            live.step()
    _write(folder, rank, {"groups": {name: dist.get_process_group_ranks(g) for g, name in
                                     torch.distributed.distributed_c10d._world.pg_names.items()}})
    dist.barrier()
    dist.destroy_process_group()


def bench(rank: int, world: int, port: int, folder: str, p: dict) -> None:
    """``live.bench.run`` over a few collectives and sizes, the twin's executor as time source."""
    import torch.distributed as dist

    from live import bench as live_bench
    from traces.task import Op

    _init(rank, world, port)
    rows = live_bench.run([Op(op) for op in p["ops"]], p["sizes"], iterations=p["iterations"], clock=twin_clock(p),
                          store=p["store"], interference=p.get("interference", False))
    _write(folder, rank, {"table": live_bench.table(rows), "rows": [
        {"op": r.task.op.value, "nbytes": r.task.nbytes, "default_us": r.default_us, "tuned_us": r.tuned_us,
         "winner": None if r.winner is None else str(r.winner), "interference": r.interference} for r in rows],
        "measurements": [m.to_dict() for m in live_bench.measurements(rows)]})
    dist.barrier()
    dist.destroy_process_group()


SCENARIOS = {"coordinator": coordinator, "ddp": ddp, "collectives": collectives, "bench": bench}


def _rank_main(rank: int, scenario: str, port: int, folder: str, params: dict) -> None:
    SCENARIOS[scenario](rank, params["world"], port, folder, params)


if __name__ == "__main__":
    import torch.multiprocessing
    import torch.nn.parallel

    import twin.executor  # noqa: F401

    name, out, raw = sys.argv[1:4]
    params = json.loads(raw)
    torch.multiprocessing.start_processes(_rank_main, args=(name, _free_port(), out, params),
                                          nprocs=params["world"], start_method="fork")
