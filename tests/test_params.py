"""The twin's physical constants as one parameter object: defaults, profiles, and their effect.

``tests/data/twin-golden.json`` holds a fixed set of the twin's predictions recorded at 480b96c,
before the constants moved into ``TwinParams``: every op, size and supported ⟨algo, proto⟩ on
seven clusters through the fast path and the DES, what-if on a bundled trace, a warm-start
ranking, the twin executor, and compute timing.  The default parameters reproduce them exactly.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

from traces.examples import path
from traces.schema import ComputeEvent
from traces.task import Op, Task
from traces.trace_file import load_trace
from tuner.config import Algo, Config, Proto, Transport
from tuner.space import ConfigSpace
from twin.des import CollectiveRun, simulate
from twin.executor import TwinExecutor
from twin.hardware import gpu_spec
from twin.model.schedule import Unsupported
from twin.predict import Twin
from twin.rank import rank_tasks
from twin.replay.compute import ComputeTimer, compute_speed, roofline_us
from twin.topology import build_cluster, load_cluster, read_spec
from twin.whatif import Candidate, evaluate

GOLDEN = Path(__file__).parent / "data" / "twin-golden.json"
SIZES = (4096, 1 << 20, 64 << 20)
RESOURCES = {Proto.LL: (256, 16384), Proto.LL128: (640, 1920 * 32), Proto.SIMPLE: (512, 1 << 19)}
"""Threads and chunk bytes of the forced configurations, by protocol."""


def clusters() -> dict:
    sharp = read_spec("dgx-a100")
    return {
        "dgx-h100x1": load_cluster("dgx-h100"),
        "dgx-h100x2": load_cluster("dgx-h100", nodes=2),
        "dgx-a100x2": load_cluster("dgx-a100", nodes=2),
        "l40s-pcie": load_cluster("l40s-pcie"),
        "a40-nvlink-pairs": load_cluster("a40-nvlink-pairs"),
        "a40-pcie-1x4": load_cluster("a40-pcie", gpus_per_node=1),
        "dgx-a100x2-sharp": build_cluster(replace(sharp, nodes=2, fabric=replace(sharp.fabric, sharp=True))),
    }


def predictions(**twin_options) -> dict[str, float]:
    """Fast-path and DES times of every op, size and supported ⟨algo, proto⟩ on every cluster."""
    out = {}
    for name, cluster in clusters().items():
        twins = {"": Twin(cluster, **twin_options)}
        if name == "dgx-h100x1":
            twins["gpp8 "] = Twin(cluster, gpus_per_process=8, **twin_options)
        for label, twin in twins.items():
            for op in Op:
                for nbytes in SIZES:
                    p = twin.predict(op, nbytes)
                    out[f"{label}{name} {op} {nbytes} nccl fast"] = p.time_us
                    if nbytes == 1 << 20:
                        out[f"{label}{name} {op} {nbytes} nccl des"] = twin.predict(op, nbytes, engine="des").time_us
                    for algo in Algo:
                        for proto in Proto:
                            config = Config(algo, proto, Transport.P2P, 4, *RESOURCES[proto])
                            try:
                                schedule = twin.schedule(twin.task(op, nbytes), config)
                            except Unsupported:
                                continue
                            out[f"{label}{name} {op} {nbytes} {config} fast"] = float(schedule.time_us())
                            if nbytes == 1 << 20:
                                out[f"{label}{name} {op} {nbytes} {config} des"] = simulate(
                                    [CollectiveRun(schedule)])[0]
        if name == "l40s-pcie":
            for op in (Op.ALLREDUCE, Op.ALLGATHER):
                config = Config(Algo.RING, Proto.SIMPLE, Transport.SHM, 4, *RESOURCES[Proto.SIMPLE])
                schedule = twins[""].schedule(twins[""].task(op, 1 << 20), config)
                out[f"{name} {op} {config} fast"] = float(schedule.time_us())
    return out


def whatif(**params) -> dict[str, float]:
    """A bundled trace on two clusters, NCCL's default and tuned, per task."""
    out = {}
    trace = load_trace(path("vgg19-dp32"))
    for topology in ("dgx-h100", "l40s-pcie"):
        report = evaluate(trace, Candidate(topology), **params)
        for run, result in (("default", report.default), ("tuned", report.tuned)):
            out[f"{topology} {run} iteration"] = result.mean_iteration_us
            for t in result.tasks:
                key = f"{topology} {run} {t.task.op} {t.task.nbytes} {t.task.group}"
                out[f"{key} time"] = t.time_us
                out[f"{key} alone"] = t.alone_us
                out[f"{key} exposed"] = t.exposed_us
    return out


def ranking(**params) -> dict[str, float]:
    """Warm-start plan times and per-process tuning of a few tasks on two nodes of DGX A100."""
    tasks = {Task(Op.ALLREDUCE, 1 << 26, 16, group="8x2"): 3.0, Task(Op.ALLGATHER, 1 << 22, 8, group="8x1"): 10.0,
             Task(Op.REDUCESCATTER, 1 << 16, 2, group="1x2"): 1.0}
    result = rank_tasks(tasks, load_cluster("dgx-a100", nodes=2), **params)
    out = {"process tuned": result.process.tuned_us, "process per-call": result.process.per_call_us}
    for entry in result.plan.entries:
        for r in entry.ranked:
            out[f"{entry.task.op} {entry.task.nbytes} {r.subspace}"] = r.time_us
    return out


def executor(**params) -> dict[str, float]:
    """The twin executor's exhaustive optimum and noisy measurements."""
    ex = TwinExecutor(load_cluster("dgx-h100"), seed=3, **params)
    task = Task(Op.ALLREDUCE, 1 << 24, 8, group="8x1")
    space = ConfigSpace(task, ex.facts(task))
    _, best = ex.load_sweep(task, space)
    out = {"sweep best": best}
    probe = Config(Algo.RING, Proto.LL128, Transport.P2P, 8, 640, 1920 * 16)
    out["measure"] = ex.measure(task, probe)
    return out


def compute(**params) -> dict[str, float]:
    """Roofline times, the speed of compute under communication, and a timer on a trace."""
    out = {}
    for model in ("H100-SXM5-80GB", "A100-SXM4-40GB", "L40S"):
        gpu = gpu_spec(model)
        out[f"{model} roofline gemm"] = roofline_us(gpu, 2e12, 3e9)
        out[f"{model} roofline copy"] = roofline_us(gpu, 1e9, 4e9, "float32")
        out[f"{model} speed 24"] = compute_speed(24, gpu, **params)
        out[f"{model} speed all"] = compute_speed(10_000, gpu, **params)
    trace = load_trace(path("phi2-tp8dp4"))
    timer = ComputeTimer.for_trace(trace, gpu_spec("A100-SXM4-40GB"), **params)
    out["timer flops"] = timer.time_us(ComputeEvent(0, "layer", duration_us=900.0, flops=3e12, mem_bytes=2 << 30))
    return out


def golden(**params) -> dict[str, dict[str, float]]:
    return {"predictions": predictions(**params), "whatif": whatif(**params), "ranking": ranking(**params),
            "executor": executor(**params), "compute": compute(**params)}


def _assert_same(got: dict[str, dict[str, float]], want: dict[str, dict[str, float]]) -> None:
    assert got.keys() == want.keys()
    for group, numbers in want.items():
        assert got[group].keys() == numbers.keys(), group
        off = {k: (got[group][k], v) for k, v in numbers.items()
               if not math.isclose(got[group][k], v, rel_tol=1e-12, abs_tol=0.0)}
        assert not off, f"{group}: {len(off)} of {len(numbers)} differ, e.g. {sorted(off.items())[:3]}"


def test_default_params_reproduce_the_recorded_predictions():
    """The twin with its default parameters predicts what it predicted before they were one object."""
    _assert_same(golden(), json.loads(GOLDEN.read_text()))
