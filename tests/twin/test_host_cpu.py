"""The host CPU's single-thread speed (``twin.host_cpu``): named in a cluster description, it
paces the framework's modelled host time per kernel in the compute timer and the replay."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from traces.generate import generate
from traces.generate.gpt import gpt_workload
from traces.schema import ComputeEvent, ProcessGroup, RankTrace, Trace
from twin.compute import ComputeTimer
from twin.hardware import TopologyError
from twin.host_cpu import HOST_CPUS, REFERENCE_HOST_CPU, host_cpu
from twin.replay import replay
from twin.topology import load_cluster

SMALL = (64, 64, 64)
DGX_A100 = Path("twin/topology/presets/dgx-a100.yaml")


def test_presets_name_their_hosts_and_the_h200_host_is_the_reference():
    assert load_cluster("dgx-a100").host_cpu.model == "EPYC-7742"
    assert load_cluster("dgx-h100").host_cpu.model == "Xeon-8480C"
    assert load_cluster("hgx-h200").host_cpu is REFERENCE_HOST_CPU
    assert load_cluster("l40s-pcie").host_cpu is REFERENCE_HOST_CPU  # names no model


def test_a_zen2_host_is_slower_per_thread_than_the_newer_cores():
    rome, milan, genoa = host_cpu("rome"), host_cpu("milan"), host_cpu("genoa")
    assert rome.single_thread < milan.single_thread < genoa.single_thread
    assert 0.6 < rome.single_thread < 0.9  # 3.4 GHz Zen 2 against a 4.0 GHz Raptor Cove
    assert REFERENCE_HOST_CPU.single_thread == pytest.approx(1.0)


@given(st.sampled_from(sorted(HOST_CPUS)), st.sampled_from(["", "AMD ", "Intel ", "intel "]))
def test_every_model_is_found_by_its_printed_name(model, vendor):
    assert host_cpu(vendor + model.replace("-", " ")).model == model


def test_an_unknown_cpu_model_is_a_clear_error(tmp_path: Path):
    with pytest.raises(TopologyError, match="unknown host CPU model 'pentium-4'"):
        host_cpu("pentium-4")
    text = DGX_A100.read_text().replace("model: EPYC-7742", "model: pentium-4")
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(TopologyError, match=r"bad\.yaml.*unknown host CPU model 'pentium-4'"):
        load_cluster(str(bad))


def test_the_timer_divides_the_modelled_host_time_by_the_host_speed():
    gpu = load_cluster("dgx-a100").gpu
    modelled = ComputeEvent(0, "mm", category="gemm", shape=SMALL, kernels=4)
    told = ComputeEvent(1, "mm", category="gemm", shape=SMALL, kernels=4, host_us=100.0)
    fast, slow = ComputeTimer(gpu, None), ComputeTimer(gpu, None, host_speed=0.5)
    assert slow.cost(modelled).host_us == pytest.approx(2 * fast.cost(modelled).host_us)
    assert slow.cost(told).host_us == fast.cost(told).host_us == 100.0  # what the trace measured stays


@pytest.fixture
def reference_host_a100(tmp_path: Path):
    """The dgx-a100 preset naming no host CPU model (so the reference host's speed)."""
    out = tmp_path / "dgx-a100-reference-host.yaml"
    out.write_text(DGX_A100.read_text().replace(", model: EPYC-7742", ""))
    return load_cluster(str(out))


def test_a_host_bound_replay_is_slower_on_the_dgx_a100_host_by_its_speed(reference_host_a100):
    a100 = load_cluster("dgx-a100")
    events = tuple(ComputeEvent(i, "mm", category="gemm", shape=SMALL, kernels=1) for i in range(200))
    trace = Trace(1, (ProcessGroup("g", (0,)),), (RankTrace(0, events),), "test", {})
    ratio = replay(trace, a100).mean_iteration_us / replay(trace, reference_host_a100).mean_iteration_us
    assert ratio == pytest.approx(1 / a100.host_cpu.single_thread, rel=0.01)


def test_a_small_gpt_on_the_dgx_a100_waits_longer_for_its_host(reference_host_a100):
    trace = generate(gpt_workload(hidden=256, heads=4, layers=2, seq=128, tp=2, micro_batch=1, global_batch=2))
    assert replay(trace, load_cluster("dgx-a100")).host_wait_us > 1.2 * replay(trace, reference_host_a100).host_wait_us


def test_topology_show_names_the_host_cpu_and_its_speed():
    from twin.topology.summary import format_summary, summarize

    facts = summarize(load_cluster("dgx-a100"))
    assert (facts["host_cpu"], facts["host_cpu_single_thread"]) == ("EPYC-7742", 0.771)
    assert "host CPU   EPYC-7742 (single thread 0.771" in format_summary(facts)
    assert summarize(load_cluster("l40s-pcie"))["host_cpu"] == "unknown"
