"""The twin's physical constants as one parameter object: defaults, profiles, and their effect.

``tests/data/twin-golden.json`` holds a fixed set of the twin's predictions, first recorded at
480b96c when the constants moved into ``TwinParams`` and regenerated deliberately since where the
physics changed (session 5: chunks in flight, NVLS and proxy physics, fabric kinds, the compute
shape model; ``json.dumps(golden(), indent=0, sort_keys=True)``): every op, size and supported ⟨algo, proto⟩ on
seven clusters through the fast path and the DES, what-if on a bundled trace, a warm-start
ranking, the twin executor, and compute timing.  The default parameters reproduce them exactly.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.testdata import DATA
from traces.errors import CcltwinError
from traces.examples import path
from traces.schema import CollectiveEvent, ComputeEvent, ProcessGroup, RankTrace, Trace
from traces.task import Op, Task
from traces.trace_file import load_trace
from tuner.config import Algo, Config, Proto, Transport
from tuner.space import ConfigSpace
from twin.compute import ComputeTimer, compute_speed, copy_ratio, phase_speed, roofline_us
from twin.compute.timer import MEGATRON
from twin.des import CollectiveRun, simulate
from twin.executor import TwinExecutor
from twin.hardware import FABRIC_KINDS, gpu_spec
from twin.model.schedule import Unsupported
from twin.params import DEFAULT_PARAMS, Cta, ParamsError, TwinParams
from twin.placement import Communicator, Placement
from twin.predict import predict
from twin.profile import ProfileMeta, load_profile, save_profile
from twin.rank import rank_tasks
from twin.replay import replay
from twin.topology import build_cluster, load_cluster, read_spec
from twin.whatif import Candidate, evaluate

DRANET = Path(__file__).resolve().parents[2] / "benchmarks" / "clusters" / "gcp-a3-ultra-dranet-1gpu-1nic.yaml"

GOLDEN = DATA / "twin-golden.json"
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


def predictions(params: TwinParams = DEFAULT_PARAMS) -> dict[str, float]:
    """Fast-path and DES times of every op, size and supported ⟨algo, proto⟩ on every cluster."""
    out = {}
    for name, cluster in clusters().items():
        twins = {"": Communicator.first(cluster, params=params)}
        if name == "dgx-h100x1":
            twins["gpp8 "] = Communicator.first(cluster, gpus_per_process=8, params=params)
        for label, model in twins.items():
            for op in Op:
                for nbytes in SIZES:
                    p = predict(model, op, nbytes)
                    out[f"{label}{name} {op} {nbytes} nccl fast"] = p.time_us
                    if nbytes == 1 << 20:
                        out[f"{label}{name} {op} {nbytes} nccl des"] = predict(model, op, nbytes, engine="des").time_us
                    for algo in Algo:
                        for proto in Proto:
                            config = Config(algo, proto, Transport.P2P, 4, *RESOURCES[proto])
                            try:
                                schedule = model.schedule(model.task(op, nbytes), config)
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


def whatif(params: TwinParams = DEFAULT_PARAMS) -> dict[str, float]:
    """A bundled trace on two clusters, NCCL's default and tuned, per task."""
    out = {}
    trace = load_trace(path("vgg19-dp32"))
    for topology in ("dgx-h100", "l40s-pcie"):
        report = evaluate(trace, Candidate(topology), params=params)
        for run, result in (("default", report.default), ("tuned", report.tuned)):
            out[f"{topology} {run} iteration"] = result.mean_iteration_us
            for t in result.tasks:
                key = f"{topology} {run} {t.task.op} {t.task.nbytes} {t.task.group}"
                out[f"{key} time"] = t.time_us
                out[f"{key} alone"] = t.alone_us
                out[f"{key} exposed"] = t.exposed_us
    return out


def ranking(params: TwinParams = DEFAULT_PARAMS) -> dict[str, float]:
    """Warm-start plan times and per-process tuning of a few tasks on two nodes of DGX A100."""
    tasks = {Task(Op.ALLREDUCE, 1 << 26, 16, group="8x2"): 3.0, Task(Op.ALLGATHER, 1 << 22, 8, group="8x1"): 10.0,
             Task(Op.REDUCESCATTER, 1 << 16, 2, group="1x2"): 1.0}
    result = rank_tasks(tasks, load_cluster("dgx-a100", nodes=2), params=params)
    out = {"process tuned": result.process.tuned_us, "process per-call": result.process.per_call_us}
    for entry in result.plan.entries:
        for r in entry.ranked:
            out[f"{entry.task.op} {entry.task.nbytes} {r.subspace}"] = r.time_us
    return out


def executor(params: TwinParams = DEFAULT_PARAMS) -> dict[str, float]:
    """The twin executor's exhaustive optimum and noisy measurements."""
    ex = TwinExecutor(load_cluster("dgx-h100"), seed=3, params=params)
    task = Task(Op.ALLREDUCE, 1 << 24, 8, group="8x1")
    space = ConfigSpace(task, ex.facts(task))
    _, best = ex.load_sweep(task, space)
    out = {"sweep best": best}
    probe = Config(Algo.RING, Proto.LL128, Transport.P2P, 8, 640, 1920 * 16)
    out["measure"] = ex.measure(task, probe)
    return out


def compute(params: TwinParams = DEFAULT_PARAMS) -> dict[str, float]:
    """Roofline times, the speed of compute under communication, and a timer on a trace."""
    out = {}
    for model in ("H100-SXM5-80GB", "A100-SXM4-40GB", "L40S"):
        gpu = gpu_spec(model)
        out[f"{model} roofline gemm"] = roofline_us(gpu, 2e12, 3e9, params=params)
        out[f"{model} roofline copy"] = roofline_us(gpu, 1e9, 4e9, "float32", params=params)
        out[f"{model} speed 24"] = compute_speed(24, gpu, params)
        out[f"{model} speed all"] = compute_speed(10_000, gpu, params)
    trace = load_trace(path("phi2-tp8dp4"))
    timer = ComputeTimer.for_trace(trace, gpu_spec("A100-SXM4-40GB"), params)
    out["timer flops"] = timer.time_us(ComputeEvent(0, "layer", duration_us=900.0, flops=3e12, mem_bytes=2 << 30))
    out.update(shaped(params))
    return out


def golden(params: TwinParams = DEFAULT_PARAMS) -> dict[str, dict[str, float]]:
    return {"predictions": predictions(params), "whatif": whatif(params), "ranking": ranking(params),
            "executor": executor(params), "compute": compute(params)}


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


def test_a_saved_and_loaded_default_profile_predicts_the_same(tmp_path):
    """A fresh object read back from a profile of the defaults (equal, not the same object) reproduces
    the recorded predictions through every entry point."""
    save_profile(DEFAULT_PARAMS, tmp_path / "default.json", meta=ProfileMeta(notes="the defaults"))
    loaded = load_profile(tmp_path / "default.json").params
    assert loaded == DEFAULT_PARAMS and loaded is not DEFAULT_PARAMS
    want = json.loads(GOLDEN.read_text())
    _assert_same({"predictions": predictions(loaded), "whatif": whatif(loaded)},
                 {"predictions": want["predictions"], "whatif": want["whatif"]})


# ---- every parameter reaches the predictions, in the physically expected direction ----------


def overlap_trace() -> Trace:
    """Two ranks, each computing (FLOPs, so it times on any GPU) while their all-reduce runs."""
    ranks = tuple(RankTrace(r, (ComputeEvent(0, "layer", flops=4e12, mem_bytes=1 << 30),
                                CollectiveEvent(1, Op.ALLREDUCE, 256 << 20, "g", "float32", "nccl")))
                  for r in (0, 1))
    return Trace(2, (ProcessGroup("g", (0, 1)),), ranks, "test", {})


def _time(twin: Communicator, op: Op, nbytes: int, algo: Algo, proto: Proto, nchannels: int = 8) -> float:
    config = Config(algo, proto, Transport.P2P, nchannels, *RESOURCES[proto])
    return float(twin.schedule(twin.task(op, nbytes), config).time_us())


def probe(params: TwinParams) -> dict[str, float]:
    """A few predictions that between them depend on every parameter."""
    ar, ag, ring, tree, nvls = Op.ALLREDUCE, Op.ALLGATHER, Algo.RING, Algo.TREE, Algo.NVLS
    ll, ll128, simple = Proto.LL, Proto.LL128, Proto.SIMPLE
    out = {}
    h100 = Communicator.first(load_cluster("dgx-h100"), params=params)
    for proto in Proto:
        out[f"nvlink small {proto}"] = _time(h100, ar, 64 << 10, ring, proto)
        out[f"nvlink tree {proto}"] = _time(h100, ar, 64 << 10, tree, proto)
    out["nvlink large"] = _time(h100, ar, 256 << 20, ring, simple, 32)
    out["nvlink large ll"] = _time(h100, ar, 256 << 20, ring, ll, 32)
    out["cta simple"] = _time(h100, ar, 256 << 20, ring, simple, 1)
    out["cta ll"] = _time(h100, ar, 64 << 20, ring, ll, 1)
    out["cta ll128"] = _time(h100, ar, 256 << 20, ring, ll128, 1)
    out["nvls"] = _time(h100, ar, 256 << 20, nvls, simple, 32)
    out["slices"] = _time(h100, ar, 4 << 20, ring, simple)
    one_process = Communicator.first(load_cluster("dgx-h100"), gpus_per_process=8, params=params)
    out["one process"] = _time(one_process, ar, 64 << 10, ring, simple)
    ll_config = Config(ring, ll, Transport.P2P, 1, *RESOURCES[ll])
    out["one process timed"] = float(one_process.schedule(one_process.task(ar, 1024), ll_config).back_to_back_us())
    two = Communicator.first(load_cluster("dgx-h100", nodes=2), params=params)
    for proto in Proto:
        out[f"net small {proto}"] = _time(two, ar, 64 << 10, ring, proto)
        out[f"net tree {proto}"] = _time(two, ar, 64 << 10, tree, proto)
    out["net large"] = _time(two, ag, 1 << 30, ring, simple, 32)
    for kind in FABRIC_KINDS:  # one GPU per node on each fabric kind (TwinParams.fabric)
        spec = read_spec("dgx-h100")
        spec = replace(spec, nodes=2, fabric=replace(spec.fabric, kind=kind)).with_overrides(nic_gbps=100)
        pair = Communicator.first(build_cluster(spec).subset(gpus_per_node=1), params=params)
        out[f"{kind} small"] = _time(pair, ar, 64 << 10, ring, simple, 1)
        out[f"{kind} large"] = _time(pair, ar, 256 << 20, ring, simple, 2)
    # One GPU per VM, its NIC on the other socket (no GPUDirect RDMA): LL lines polled in host memory.
    staged = Communicator.first(load_cluster(str(DRANET), nodes=2), params=params)
    out["host-staged ll"] = _time(staged, ag, 256 << 10, ring, ll, 4)
    amd = Communicator.first(load_cluster("dgx-a100", nodes=2), params=params)
    out["amd proxy"] = _time(amd, ar, 64 << 10, ring, simple)
    out["amd ll scan"] = _time(amd, ar, 1 << 20, ring, ll)
    pcie = Communicator.first(load_cluster("l40s-pcie"), params=params)
    pcie_pair = Communicator.first(load_cluster("l40s-pcie", gpus_per_node=2), params=params)
    # Two AMD GPUs on different sockets: NCCL goes peer to peer through the root complex (with more
    # GPUs it goes through host memory, twin.model.shm).
    across = Communicator(load_cluster("l40s-pcie"), ["n0/gpu0", "n0/gpu4"], params=params)
    out["root complex p2p"] = _time(across, ag, 256 << 20, ring, simple, 16)
    for proto in Proto:
        out[f"pcie small {proto}"] = _time(pcie_pair, ar, 64 << 10, ring, proto)
        out[f"pcie large {proto}"] = _time(pcie_pair, ag, 256 << 20, ring, proto, 16)
        out[f"cpu small {proto}"] = _time(pcie, ar, 64 << 10, ring, proto)
        out[f"pcie tree {proto}"] = _time(pcie_pair, ar, 64 << 10, tree, proto)
        out[f"cpu tree {proto}"] = _time(pcie, ar, 64 << 10, tree, proto)
        out[f"cpu large {proto}"] = _time(pcie, ag, 256 << 20, ring, proto, 16)
    h100_gpu = gpu_spec("H100-SXM5-80GB")
    out["roofline math"] = roofline_us(h100_gpu, 4e12, 1e6, params=params)
    out["roofline memory"] = roofline_us(h100_gpu, 1e6, 4e9, params=params)
    out["compute floor"] = compute_speed(10_000, h100_gpu, params)
    out.update(shaped(params))
    one_channel = Config(ring, simple, Transport.P2P, 1, 512, 1 << 19)
    overlapped = replay(overlap_trace(), load_cluster("dgx-h100"), {Task(ar, 256 << 20, 2, group="g"): one_channel},
                        params=params)
    out["overlapped call"] = overlapped.tasks[0].time_us
    return out


def shaped(params: TwinParams) -> dict[str, float]:
    """Phases timed from their category and shape on an H200, and how they and a copy interfere."""
    h200 = gpu_spec("H200-SXM-141GB")
    timer = ComputeTimer(h200, None, params=params)

    def timed(name: str = "phase", **fields) -> float:
        return timer.time_us(ComputeEvent(0, name, **fields))

    out = {"gemm bf16": timed(category="gemm", shape=(8192, 8192, 8192)),
           "gemm fp8": timed(category="gemm", shape=(8192, 8192, 8192), dtype="fp8_e4m3"),
           "gemm tf32": timed(category="gemm", shape=(4, 2048, 2048, 2048), dtype="tf32")}
    for category in ("attention", "attention-unfused", "attention-fused-softmax"):
        for name in ("attn", "attn_bwd"):
            out[f"{category} {name}"] = timed(name, category=category, shape=(4, 32, 4096, 4096, 64))
    out["kernel floor"] = timed(category="memory", mem_bytes=1024, kernels=3, host_us=0.0)
    out["host per kernel"] = timed(category="gemm", shape=(16, 16, 16), kernels=4)
    megatron = ComputeTimer(h200, None, params=params, framework=MEGATRON)
    out["megatron host per kernel"] = megatron.time_us(ComputeEvent(0, "qkv", category="gemm", shape=(16, 16, 16),
                                                                    kernels=4))
    out["megatron step"] = megatron.time_us(ComputeEvent(0, "schedule.forward-step", category="host", kernels=0))
    out["megatron checkpoint"] = megatron.time_us(ComputeEvent(0, "L0.checkpoint", category="host", kernels=0))
    out["megatron collective"] = megatron.collective_host_us()
    out["optimizer"] = timed(category="optimizer", mem_bytes=28 << 28, host_us=0.0)
    out["grad clip"] = timed("clip_grad_norm", category="optimizer", mem_bytes=12 << 28, host_us=0.0)
    out["loss scale"] = timed("unscale", category="optimizer", mem_bytes=8 << 28, host_us=0.0)
    one_wave = timer.cost(ComputeEvent(0, "qkv", category="gemm", shape=(1408, 3072, 8192), host_us=0.0))
    add = timer.cost(ComputeEvent(0, "add", category="memory", mem_bytes=1 << 30, host_us=0.0))
    out["gemm beside copy"] = phase_speed(one_wave, 1, True, h200, params)
    out["copy beside add"] = copy_ratio([add], h200, params)
    out["copy beside gemm"] = copy_ratio([one_wave], h200, params)
    return out


def moved(name: str) -> float:
    """A value of parameter ``name`` inside its range, 20% away from its default (1% of the range
    above a default of zero)."""
    low, high = TwinParams.bounds()[name]
    default = DEFAULT_PARAMS.to_dict()[name]
    if default == 0:
        return low + 0.01 * (high - low)
    return default * 0.8 if default * 0.8 >= low else min(default * 1.2, high)


@pytest.fixture(scope="module")
def baseline() -> dict[str, float]:
    return probe(DEFAULT_PARAMS)


@pytest.mark.parametrize("name", sorted(DEFAULT_PARAMS.to_dict()))
def test_every_parameter_reaches_the_predictions(name, baseline):
    """Moving any one parameter changes some prediction: each is threaded through to the model."""
    got = probe(DEFAULT_PARAMS.replace(**{name: moved(name)}))
    assert any(got[k] != v for k, v in baseline.items()), name


@pytest.mark.parametrize("name, value, key, slower", [
    ("link.nvlink.efficiency", 0.6, "nvlink large", True),
    ("link.nvlink.header_bytes", 64.0, "nvlink large ll", True),
    ("link.nvlink.step_us.ll", 1.2, "nvlink small ll", True),
    ("protocol.launch_us.simple", 5.0, "nvlink small simple", False),
    ("protocol.simple_slice_sync_us", 6.0, "slices", True),
    ("protocol.host_launch_us", 6.0, "one process timed", True),
    ("protocol.stream_query_us", 2.0, "one process timed", True),
    ("protocol.ll_op_us", 0.1, "cta ll", False),
    ("protocol.ll128_copy_factor", 0.5, "cta ll128", True),
    ("cta.hbm_share", 0.03, "cta simple", False),
    ("cta.threads_at_half_rate", 320.0, "cta simple", True),
    ("link.nvls_efficiency", 0.6, "nvls", True),
    ("link.nvls_pass_us", 50.0, "nvls", True),
    ("net.nic_rdma_write_us", 3.0, "net small ll", True),
    ("net.efficiency", 0.5, "net large", True),
    ("net.proxy_action_amd_us", 4.0, "amd proxy", True),
    ("net.ll_scan_intel_ns", 20.0, "net small ll", True),
    ("net.ll_scan_amd_ns", 40.0, "amd ll scan", True),
    ("net.ll_host_pass_us", 3.0, "host-staged ll", True),
    ("link.cpu.efficiency", 0.3, "cpu large simple", True),
    ("link.pcie.step_us.ll128", 5.0, "pcie small ll128", True),
    ("link.pcie.tree_step_us.simple", 8.0, "pcie tree simple", True),
    ("compute.flops_fraction", 0.35, "roofline math", True),
    ("compute.hbm_fraction", 0.4, "roofline memory", True),
    ("compute.copy_rate_under_compute", 0.4, "overlapped call", True),
    ("compute.gemm.efficiency", 0.6, "gemm bf16", True),
    ("compute.gemm.k_overhead", 1000.0, "gemm bf16", True),
    ("compute.gemm.fp8_efficiency", 0.9, "gemm fp8", False),
    ("compute.attention.backward_factor", 4.0, "attention attn_bwd", True),
    ("compute.attention.unfused_score_passes", 30.0, "attention-unfused attn", True),
    ("compute.attention.score_hbm_fraction", 0.3, "attention-fused-softmax attn_bwd", True),
    ("compute.kernels.floor_us", 5.0, "kernel floor", True),
    ("compute.kernels.host_us_per_kernel", 100.0, "host per kernel", True),
    ("compute.kernels.megatron_host_us_per_kernel", 100.0, "megatron host per kernel", True),
    ("compute.kernels.megatron_step_host_us", 2000.0, "megatron step", True),
    ("compute.kernels.megatron_checkpoint_host_us", 2000.0, "megatron checkpoint", True),
    ("compute.kernels.megatron_collective_host_us", 100.0, "megatron collective", True),
    ("compute.kernels.optimizer_hbm_fraction", 0.5, "optimizer", True),
    ("compute.interference.gemm_beside_copy", 0.5, "gemm beside copy", False),
    ("compute.interference.copy_floor", 0.3, "copy beside add", True),
    ("compute.interference.gemm_dram_traffic", 6.0, "copy beside gemm", False),
])
def test_a_parameter_moves_its_predictions_the_way_physics_says(name, value, key, slower, baseline):
    """Lower link efficiency: slower large collectives; higher latency: slower small ones; a faster
    copy loop: faster copy-bound channels; less of the peak FLOP rate: longer compute."""
    got = probe(DEFAULT_PARAMS.replace(**{name: value}))[key]
    assert (got > baseline[key]) if slower else (got < baseline[key]), (name, got, baseline[key])


def test_both_engines_take_the_same_params():
    """The DES steps through the schedule the fast path prices, so it follows non-default params too."""
    params = DEFAULT_PARAMS.replace(**{"link.nvlink.efficiency": 0.5, "protocol.launch_us.ll": 20.0})
    for p in (DEFAULT_PARAMS, params):
        twin = Communicator.first(load_cluster("dgx-h100"), params=p)
        for proto in Proto:
            config = Config(Algo.RING, proto, Transport.P2P, 8, *RESOURCES[proto])
            schedule = twin.schedule(twin.task(Op.ALLREDUCE, 4 << 20), config)
            assert simulate([CollectiveRun(schedule)])[0] == pytest.approx(float(schedule.time_us()), rel=0.02)
    fast = [predict(Communicator.first(load_cluster("dgx-h100"), params=p), Op.ALLREDUCE, 64 << 20,
                    engine="des").time_us for p in (DEFAULT_PARAMS, params)]
    assert fast[1] > fast[0]


def test_caches_never_mix_two_params_objects():
    """A geometry, a replay's communicators and the twin executor keep results per params object."""
    cluster = load_cluster("dgx-h100")
    slow = DEFAULT_PARAMS.replace(**{"link.nvlink.efficiency": 0.42})
    task, config = Task(Op.ALLREDUCE, 256 << 20, 8, group="8x1"), Config(Algo.RING, Proto.SIMPLE, Transport.P2P, 32,
                                                                          512, 1 << 19)
    times = [TwinExecutor(cluster, params=p).true_time(task, config) for p in (DEFAULT_PARAMS, slow, DEFAULT_PARAMS)]
    assert times[0] == times[2] < times[1]
    trace = overlap_trace()
    placement = Placement(trace, cluster)
    replay(trace, cluster, placement=placement)
    with pytest.raises(ValueError, match="other parameters"):
        replay(trace, cluster, placement=placement, params=slow)


# ---- the object and its profiles ------------------------------------------------------------


def test_names_bounds_and_units_cover_every_parameter():
    """Each parameter has a dotted name, a unit and a range that holds its default."""
    values = DEFAULT_PARAMS.to_dict()
    assert values.keys() == TwinParams.bounds().keys() == TwinParams.units().keys()
    # 40 (with the host launch and stream query) + fabric kinds (19) + compute shapes (20) + fused softmax (1)
    # + the NVLS pass (1) + Megatron's host profile (4: per kernel, step, checkpoint, collective call)
    # + a proxy post's CPU time (2: Intel, AMD) + the LL send proxy's scan of a cache line (2: Intel, AMD)
    # + an LL pass over lines in host memory (1) + a tree hop inside a node (9: 3 protocols on NVLink,
    # PCIe and CPU links)
    assert len(values) == 99
    for name, value in values.items():
        low, high = TwinParams.bounds()[name]
        assert low <= value <= high, name
    assert TwinParams.from_dict(values) == DEFAULT_PARAMS
    assert dataclasses.replace(DEFAULT_PARAMS, cta=Cta(hbm_share=0.03)).to_dict()["cta.hbm_share"] == 0.03
    assert DEFAULT_PARAMS.replace(**{"link.pcie.step_us.ll": 2.0}).link.nvlink == DEFAULT_PARAMS.link.nvlink


@pytest.mark.parametrize("changes, problem", [
    ({"link.nvlink.speed": 1.0}, "unknown parameter 'link.nvlink.speed'"),
    ({"link.nvlink": 1.0}, "unknown parameter 'link.nvlink'"),
    ({"cta.hbm_share": math.nan}, r"cta.hbm_share = nan is outside its range \[0.0001, 1\] \(fraction\)"),
    ({"net.pcie_write_us": -0.5}, r"net.pcie_write_us = -0.5 is outside its range \[0, 50\] \(µs\)"),
    ({"link.cpu.efficiency": 1.5}, r"link.cpu.efficiency = 1.5 is outside"),
    ({"protocol.ll_op_us": "0.2"}, r"protocol.ll_op_us must be a number \(µs\), got '0.2'"),
    ({"protocol.ll_op_us": True}, r"protocol.ll_op_us must be a number"),
])
def test_invalid_params_name_the_parameter(changes, problem):
    with pytest.raises(ParamsError, match=f"^params: {problem}"):
        DEFAULT_PARAMS.replace(**changes)


def test_constructing_out_of_range_groups_is_refused():
    with pytest.raises(ParamsError, match=r"^params: cta.hbm_share = 2.0 is outside"):
        dataclasses.replace(DEFAULT_PARAMS, cta=Cta(hbm_share=2.0))


META = ProfileMeta(hardware="twin:dgx-h100", nccl_version="2.28.9", sources=("runs/a.jsonl",), created="2025-12-01",
                   points=412, moved=("link.nvlink.efficiency",), notes="fitted on a twin")


@st.composite
def valid_params(draw) -> dict[str, float]:
    """Any subset of the parameters, each anywhere in its range."""
    names = draw(st.lists(st.sampled_from(sorted(TwinParams.bounds())), unique=True))
    return {n: draw(st.floats(*TwinParams.bounds()[n], allow_nan=False)) for n in names}


@settings(max_examples=60)
@given(values=valid_params())
def test_profiles_round_trip(tmp_path_factory, values):
    """What ``save_profile`` writes, ``load_profile`` reads back unchanged, every parameter set."""
    path = tmp_path_factory.mktemp("profile") / "p.json"
    params = TwinParams.from_dict(values)
    save_profile(params, path, meta=META)
    profile = load_profile(path)
    assert profile.params == params and profile.meta == META and profile.defaulted == ()
    assert {k: params.to_dict()[k] for k in values} == values


def test_a_profile_may_set_a_subset_and_says_which_were_defaulted(tmp_path):
    path = tmp_path / "some.json"
    path.write_text(json.dumps({"format": "ccltwin-profile", "version": 1,
                                "params": {"link.nvlink.efficiency": 0.8, "cta.threads_at_half_rate": 200}}))
    profile = load_profile(path)
    assert profile.params == DEFAULT_PARAMS.replace(**{"link.nvlink.efficiency": 0.8,
                                                       "cta.threads_at_half_rate": 200.0})
    assert set(profile.defaulted) == set(TwinParams.bounds()) - {"link.nvlink.efficiency", "cta.threads_at_half_rate"}
    assert profile.meta == ProfileMeta()


def test_save_writes_every_parameter_atomically(tmp_path):
    path = tmp_path / "p.json"
    path.write_text("old")
    save_profile(DEFAULT_PARAMS, path, meta=META)
    doc = json.loads(path.read_text())
    assert doc["format"] == "ccltwin-profile" and doc["version"] == 2
    assert doc["params"] == DEFAULT_PARAMS.to_dict() and doc["meta"]["points"] == 412
    assert [p.name for p in tmp_path.iterdir()] == ["p.json"]  # no temporary file left


def _doc(**changes) -> dict:
    doc = {"format": "ccltwin-profile", "version": 1, "meta": META.to_dict(), "params": {"cta.hbm_share": 0.02}}
    doc.update(changes)
    return doc


@pytest.mark.parametrize("text, problem", [
    ("{", r"not a readable JSON profile \(Expecting property name"),
    ("[]", 'not a ccltwin profile \\(expected "format": "ccltwin-profile"\\)'),
    (json.dumps(_doc(format="ccltwin-plan")), "not a ccltwin profile"),
    (json.dumps(_doc(version=3)), "profile version 3 is not supported; this ccltwin reads versions 1, 2"),
    (json.dumps(_doc(version="1")), "profile.version: expected an integer, got '1'"),
    (json.dumps(_doc(extra=1)), "unknown field\\(s\\) 'extra'"),
    (json.dumps({"format": "ccltwin-profile", "version": 1}), "profile: missing 'params'"),
    (json.dumps(_doc(params=[0.5])), "profile.params: expected an object"),
    (json.dumps(_doc(params={"link.nvlink.speed": 1})), "unknown parameter 'link.nvlink.speed'"),
    (json.dumps(_doc(params={"cta.hbm_share": -0.1})), r"cta.hbm_share = -0.1 is outside its range"),
    ('{"format": "ccltwin-profile", "version": 1, "params": {"cta.hbm_share": NaN}}',
     "cta.hbm_share = nan is outside its range"),
    (json.dumps(_doc(params={"cta.hbm_share": "0.02"})), r"cta.hbm_share must be a number \(fraction\)"),
    (json.dumps(_doc(params={"cta.hbm_share": None})), r"cta.hbm_share must be a number"),
    (json.dumps(_doc(meta=[])), "profile.meta: expected an object"),
    (json.dumps(_doc(meta={"fitted_on": "x"})), "meta: unknown field\\(s\\) 'fitted_on'"),
    (json.dumps(_doc(meta={"points": 1.5})), "meta.points: expected an integer, got 1.5"),
    (json.dumps(_doc(meta={"points": -1})), "meta.points must be ≥ 0, got -1"),
    (json.dumps(_doc(meta={"sources": ["a", 3]})), "meta.sources: expected a list of strings"),
    (json.dumps(_doc(meta={"moved": ["cta.speed"]})), "meta.moved names unknown parameter\\(s\\) 'cta.speed'"),
])
def test_bad_profiles_get_one_line_naming_the_file(tmp_path, text, problem):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ParamsError, match=f"^{re.escape(str(path))}: {problem}") as err:
        load_profile(path)
    assert "\n" not in str(err.value) and isinstance(err.value, CcltwinError)


def test_a_missing_profile_is_named(tmp_path):
    with pytest.raises(ParamsError, match=r"nope.json: cannot read the profile \(No such file or directory\)"):
        load_profile(tmp_path / "nope.json")
