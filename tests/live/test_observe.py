"""What live tuning sees of a job: every collective, whoever issues it, on every communicator.

A 3-rank gloo job (``tests/live/jobs.py collectives``) runs DDP, FSDP2, a functional all-reduce,
plain ``dist.broadcast``, an all-gather on a 2-rank subgroup, AllToAll and send/recv for 4
iterations under ``live.enable``; the plugin's decision log of each rank must hold exactly the
collectives NCCL would ask its tuner about, once per iteration, decided alike on all members.
"""

from __future__ import annotations

import math
import subprocess
import sys
from collections import Counter

from launch import assert_same_configs, decision_logs, job_env, rank_results, run_job

WORLD, ITERATIONS = 3, 4


def _fsdp_gather_bytes(out_features: int, in_features: int) -> int:
    """FSDP2's all-gather of one Linear: weight and bias sharded by rows, padded to whole rows per rank."""
    rows = math.ceil(out_features / WORLD)
    return WORLD * (rows * in_features + rows) * 4


def test_every_collective_is_observed_once_per_iteration_whoever_issued_it(tmp_path):
    run_job("collectives", tmp_path, world=WORLD, iterations=ITERATIONS, store=str(tmp_path / "t.db"))
    logs = decision_logs(tmp_path, WORLD)
    assert_same_configs(logs, same_calls=False)
    world_comm = {k[0] for k in logs[2]}
    assert len(world_comm) == 1  # rank 2 is in the world only
    for rank, log in enumerate(logs):
        calls = Counter((op, nbytes) for comm, op, nbytes, _ in log if comm in world_comm)
        assert calls[("allreduce", (32 + 1) * 16 * 4)] == ITERATIONS  # DDP's bucket, from the C++ reducer
        assert calls[("allgather", _fsdp_gather_bytes(16, 16))] == ITERATIONS  # FSDP2
        assert calls[("allgather", _fsdp_gather_bytes(8, 16))] == ITERATIONS
        assert calls[("allreduce", 24 * 4)] == ITERATIONS  # functional collective
        assert calls[("broadcast", 12 * 4)] >= ITERATIONS  # dist.broadcast (DDP's own broadcasts add more)
        pair = Counter((op, nbytes) for comm, op, nbytes, _ in log if comm not in world_comm)
        assert pair == (Counter({("allgather", 2 * 40 * 4): ITERATIONS}) if rank < 2 else Counter())
        assert not {op for _, op, _, _ in log} - {"allreduce", "allgather", "broadcast", "reducescatter"}
    groups = rank_results(tmp_path, WORLD)[0]["groups"]
    assert sorted(map(tuple, groups.values())) == [(0, 1), (0, 1, 2)]


def test_importing_live_pulls_in_neither_the_twin_nor_simpy_nor_torch():
    code = ("import importlib, pkgutil, sys, live\n"
            "light = sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'twin', 'simpy'})\n"
            "for info in pkgutil.walk_packages(live.__path__, 'live.'):\n"
            "    importlib.import_module(info.name)\n"
            "print(light, sorted({m.split('.')[0] for m in sys.modules} & {'twin', 'simpy'}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=job_env(), check=True)
    assert done.stdout.split() == ["[]", "[]"]
