"""Whole-trace replay: ordering, overlap, link sharing, agreement with the fast path, bad inputs."""

from __future__ import annotations

import pytest

from traces.schema import CollectiveEvent, ComputeEvent, ProcessGroup, RankTrace, Trace
from traces.task import Op, Task
from tuner.config import Algo, Config, Proto, Transport
from tuner.plan import Plan, PlanEntry, RankedSubspace
from tuner.process_knobs import ProcessSettings
from twin.compute import roofline_us
from twin.hardware import gpu_spec
from twin.params import DEFAULT_PARAMS
from twin.placement import Communicator, Placement, PlacementError, cluster_for
from twin.predict import predict
from twin.replay import ReplayError, plan_configs, replay
from twin.topology import Cluster, load_cluster


class TraceBuilder:
    """Hand-built traces: ``b.compute(rank, us)`` / ``b.call(rank, op, nbytes, group)`` return event ids."""

    def __init__(self, world_size: int, groups: dict[str, tuple[int, ...]], metadata: dict | None = None,
                 gpus_per_node: int | None = None):
        self.world_size = world_size
        self.groups = groups
        self.metadata = metadata or {}
        self.gpus_per_node = gpus_per_node
        self.events: dict[int, list] = {}

    def _add(self, rank: int, make) -> int:
        events = self.events.setdefault(rank, [])
        events.append(make(len(events)))
        return len(events) - 1

    def compute(self, rank: int, us: float | None = None, *, stream: str = "compute", after=(), iteration=0,
                flops: float | None = None, mem_bytes: int | None = None) -> int:
        return self._add(rank, lambda i: ComputeEvent(i, f"c{i}", stream, iteration, us, flops, mem_bytes,
                                                      after=tuple(after)))

    def call(self, rank: int, op: Op, nbytes: int | None, group: str, *, stream: str = "nccl", after=(),
             iteration=0, peer: int | None = None, duration_us: float | None = None) -> int:
        return self._add(rank, lambda i: CollectiveEvent(i, op, nbytes, group, "float32", stream, iteration,
                                                         after=tuple(after), peer=peer, duration_us=duration_us))

    def _node(self, rank: int) -> str | None:
        return None if self.gpus_per_node is None else f"node{rank // self.gpus_per_node}"

    def trace(self) -> Trace:
        trace = Trace(self.world_size, tuple(ProcessGroup(g, r) for g, r in self.groups.items()),
                      tuple(RankTrace(r, tuple(e), self._node(r)) for r, e in sorted(self.events.items())), "test",
                      self.metadata)
        trace.validate("test trace")
        return trace


def dp_tp_trace(nodes: int = 2, layers: int = 4, tp_bytes: int = 8 << 20, grad_bytes: int = 64 << 20,
                layer_us: float = 400.0) -> Trace:
    """Tensor parallel inside each 8-GPU node, data parallel across nodes: per layer a TP
    all-reduce after the forward, and in the backward a TP all-reduce and a gradient all-reduce
    that overlaps the next layer's backward."""
    world = 8 * nodes
    groups = {f"tp{n}": tuple(range(8 * n, 8 * n + 8)) for n in range(nodes)}
    groups |= {f"dp{i}": tuple(range(i, world, 8)) for i in range(8)}
    b = TraceBuilder(world, groups, {"tokens_per_iteration": 65536})
    for rank in range(world):
        tp, dp = f"tp{rank // 8}", f"dp{rank % 8}"
        last = None
        for _ in range(layers):
            c = b.compute(rank, layer_us, after=[last] if last is not None else [])
            last = b.call(rank, Op.ALLREDUCE, tp_bytes, tp, stream="tp", after=[c])
        for _ in range(layers):
            c = b.compute(rank, 2 * layer_us, after=[last])
            last = b.call(rank, Op.ALLREDUCE, tp_bytes, tp, stream="tp", after=[c])
            b.call(rank, Op.ALLREDUCE, grad_bytes, dp, stream="dp", after=[last])
        b.compute(rank, 100.0, after=[last])
    return b.trace()


@pytest.fixture(scope="module")
def h100():
    return load_cluster("dgx-h100")


@pytest.fixture(scope="module")
def a100x2():
    return load_cluster("dgx-a100", nodes=2)


def alone_us(cluster: Cluster, nranks: int, op: Op, nbytes: int) -> float:
    return predict(Communicator.first(cluster, nranks), op, nbytes).time_us


def test_streams_run_in_order_and_calls_wait_for_the_last_member(h100):
    b = TraceBuilder(2, {"g": (0, 1)})
    c0 = b.compute(0, 100.0)
    b.compute(0, 50.0)                                # same stream: after c0
    b.compute(0, 70.0, stream="side")                 # another stream: from 0
    b.call(0, Op.ALLREDUCE, 1 << 20, "g", after=[c0])  # arrives at 100
    c1 = b.compute(1, 300.0)
    b.call(1, Op.ALLREDUCE, 1 << 20, "g", after=[c1])  # arrives at 300: the call begins then
    b.compute(1, 10.0, after=[1])                     # after the call
    result = replay(b.trace(), h100)
    t = alone_us(h100, 2, Op.ALLREDUCE, 1 << 20)
    assert result.mean_iteration_us == pytest.approx(300.0 + t + 10.0, rel=1e-9)
    rank0, rank1 = result.ranks
    [task] = result.tasks
    # From 100 rank 0's NCCL kernel holds one SM per channel, so its second phase (50 µs of work) runs slower.
    speed = 1 - task.config.nchannels / h100.gpu.sm_count
    assert rank0.compute_us == pytest.approx(100.0 + 50.0 / speed)   # 0-70 on the side stream overlaps
    assert rank0.comm_us == pytest.approx(200.0 + t, rel=1e-9)       # resident from its arrival at 100
    assert rank0.exposed_comm_us == pytest.approx(rank0.comm_us - 50.0 / speed, rel=1e-9)
    assert rank1.comm_us == pytest.approx(t, rel=1e-9)
    assert rank1.compute_us == pytest.approx(310.0)
    [task] = result.tasks
    assert task.time_us == pytest.approx(t, rel=1e-9) and task.calls_per_iteration == 1


def overlapped(nbytes: int, backward_us: float) -> Trace:
    """Two ranks: 100 µs of compute, then an AllReduce of ``nbytes`` beside ``backward_us`` of
    compute, then 100 µs that waits for both."""
    b = TraceBuilder(2, {"g": (0, 1)})
    for rank in (0, 1):
        a = b.compute(rank, 100.0)
        x = b.call(rank, Op.ALLREDUCE, nbytes, "g", after=[a])
        bwd = b.compute(rank, backward_us, after=[a])
        b.compute(rank, 100.0, after=[x, bwd])
    return b.trace()


def test_a_collective_overlapped_with_compute_hides_its_time(h100):
    result = replay(overlapped(64 << 20, 3000.0), h100)
    t = alone_us(h100, 2, Op.ALLREDUCE, 64 << 20)
    assert t < 3000.0
    for rank in result.ranks:
        assert rank.exposed_comm_us == pytest.approx(0.0, abs=1e-6)
        # compute takes copy rate from it
        assert t <= rank.comm_us <= t / DEFAULT_PARAMS.compute.copy_rate_under_compute
    # Overlap: far less than one after the other.  While the kernel is resident (comm_us) it holds one SM
    # per channel, so the phase does that share less work then; while it copies, L2 and memory contention
    # take compute.interference.gemm_beside_copy more: the phase finishes that much later.
    held = result.tasks[0].config.nchannels / h100.gpu.sm_count
    beside = DEFAULT_PARAMS.compute.interference.gemm_beside_copy
    resident = result.ranks[0].comm_us
    assert 3200.0 + resident * held < result.mean_iteration_us <= 3200.0 + resident * (1 - (1 - held) * beside) + 1e-6
    assert result.mean_iteration_us < 3200.0 + 0.5 * t


def test_exposed_communication_is_what_compute_does_not_cover(h100):
    result = replay(overlapped(512 << 20, 200.0), h100)
    for rank in result.ranks:
        assert rank.comm_us > 1000.0
        # Always busy, so what is not compute is exposed communication.
        assert rank.exposed_comm_us == pytest.approx(result.mean_iteration_us - rank.compute_us, rel=1e-9)
        assert rank.comm_us - rank.exposed_comm_us == pytest.approx(rank.compute_us - 200.0, rel=1e-9)
    assert result.exposed_share == pytest.approx(result.exposed_comm_us / result.mean_iteration_us)


WIDE_RING = Config(Algo.RING, Proto.SIMPLE, Transport.P2P, 24, 512, 1 << 19)
"""Enough channels that links, not copy engines, bound a large collective."""


def test_two_collectives_on_the_same_links_are_slower_than_one(a100x2):
    ranks = tuple(range(16))
    alone_b = TraceBuilder(16, {"a": ranks})
    both = TraceBuilder(16, {"a": ranks, "b": ranks})
    for r in ranks:
        alone_b.call(r, Op.ALLREDUCE, 256 << 20, "a")
        both.call(r, Op.ALLREDUCE, 256 << 20, "a", stream="s1")
        both.call(r, Op.ALLREDUCE, 256 << 20, "b", stream="s2")
    configs = {task: WIDE_RING for task in both.trace().tasks()}
    alone = replay(alone_b.trace(), a100x2, configs)
    together = replay(both.trace(), a100x2, configs)
    assert alone.tasks[0].time_us == pytest.approx(alone.tasks[0].alone_us, rel=1e-9)
    assert sorted(t.task.group for t in together.tasks) == ["a", "b"]
    for shared in together.tasks:
        assert 1.3 * alone.tasks[0].time_us < shared.time_us <= 2.0 * alone.tasks[0].time_us
    assert together.mean_iteration_us > 1.3 * alone.mean_iteration_us


def test_collectives_on_different_nodes_do_not_slow_each_other(a100x2):
    b = TraceBuilder(16, {"n0": tuple(range(8)), "n1": tuple(range(8, 16))})
    for r in range(16):
        b.call(r, Op.ALLREDUCE, 256 << 20, "n0" if r < 8 else "n1")
    tasks = replay(b.trace(), a100x2).tasks
    assert len(tasks) == 2
    for task in tasks:
        assert task.time_us == pytest.approx(task.alone_us, rel=1e-9)


@pytest.mark.parametrize(("op", "nbytes", "nranks"), [
    (Op.ALLREDUCE, 1 << 10, 16), (Op.ALLREDUCE, 64 << 20, 16), (Op.ALLREDUCE, 1 << 30, 8),
    (Op.ALLGATHER, 32 << 20, 16), (Op.REDUCESCATTER, 32 << 20, 16), (Op.BROADCAST, 8 << 20, 16),
    (Op.REDUCE, 8 << 20, 16), (Op.ALLTOALL, 16 << 20, 16), (Op.SENDRECV, 4 << 20, 2),
])
def test_a_single_collective_replays_at_the_fast_path_time(a100x2, op, nbytes, nranks):
    b = TraceBuilder(nranks, {"g": tuple(range(nranks))})
    for r in range(nranks):
        if op is Op.SENDRECV:
            b.call(r, op, nbytes, "g", peer=1 - r)
        else:
            b.call(r, op, nbytes, "g")
    result = replay(b.trace(), a100x2)
    [task] = result.tasks
    fast = alone_us(a100x2, nranks, op, nbytes)
    assert task.time_us == pytest.approx(fast, rel=0.02)
    assert result.mean_iteration_us == pytest.approx(fast, rel=0.02)
    assert task.busbw_gbps == pytest.approx(Task(op, nbytes, nranks).busbw_gbps(fast), rel=0.02)


def test_ranks_missing_from_the_trace_are_assumed_to_keep_pace():
    """Only rank 0 and rank 8 (one per node) are in the trace, as a generator's representative ranks;
    two NICs per node, so each carries four data-parallel groups.  GPUs on the other NIC's PCIe
    paths run unlike ranks 0 and 8: they join the replay as their own placement classes."""
    a100x2 = load_cluster("dgx-a100", nodes=2, nics_per_node=2)
    full = dp_tp_trace(nodes=2, layers=2)
    kept = tuple(r for r in full.ranks if r.rank in (0, 8))
    partial = Trace(full.world_size, full.groups, kept, "test", full.metadata)
    partial.validate("partial")
    configs = {task: WIDE_RING for task in full.tasks() if task.nranks == 2}
    whole, some = replay(full, a100x2, configs), replay(partial, a100x2, configs)
    assert {0, 8} < {r.rank for r in some.ranks} < set(range(16))
    assert any("of 16 ranks in the trace" in note and "group(s) of absent ranks" in note for note in some.notes)
    assert any("absent rank(s) reach the network otherwise" in note for note in some.notes)
    # TP calls wait only for the member present; they take what they take alone (NVLink, nothing shared).
    tp = next(t for t in some.tasks if t.task.group == "tp0")
    assert tp.time_us == pytest.approx(alone_us(a100x2, 8, Op.ALLREDUCE, 8 << 20), rel=1e-9)
    # The gradient all-reduce of dp0 shares its NIC with three other data-parallel groups, absent from
    # the trace, exactly as it does when every rank is replayed.
    dp0 = {t.task.group: t for t in some.tasks}["dp0"]
    assert dp0.time_us > 1.5 * dp0.alone_us
    assert dp0.time_us == pytest.approx({t.task.group: t for t in whole.tasks}["dp0"].time_us, rel=1e-3)
    assert some.mean_iteration_us == pytest.approx(whole.mean_iteration_us, rel=1e-9)


def test_a_cluster_too_small_for_the_trace_is_refused(h100):
    with pytest.raises(PlacementError, match=r"needs 16 GPUs; dgx-h100 has 8 .* at least 2 nodes"):
        replay(dp_tp_trace(nodes=2, layers=1), h100)


def test_each_task_runs_on_the_communicator_of_its_ranks_sized_to_the_trace():
    """Rank r on GPU r: TP groups stay in a node, DP groups cross both; a SendRecv runs between its
    pair's GPUs on its group's communicator; a preset grows to the nodes the trace needs."""
    b = TraceBuilder(16, {"tp0": tuple(range(8)), "dp0": (0, 8), "pp": (0, 8)})
    b.call(0, Op.ALLREDUCE, 1 << 20, "tp0")
    for rank in (0, 8):
        b.call(rank, Op.ALLREDUCE, 1 << 20, "dp0")
    b.call(0, Op.SENDRECV, 1 << 20, "pp", peer=8)
    b.call(8, Op.SENDRECV, 1 << 20, "pp", peer=0)
    trace = b.trace()
    cluster = cluster_for(trace, "dgx-a100")
    assert (cluster.nodes, cluster.gpus_per_node) == (2, 8)
    assert cluster_for(trace, "dgx-a100", nodes=3).nodes == 3
    placement = Placement(trace, cluster)
    placed = placement.task_communicators()
    assert set(placed) == set(trace.tasks())
    shape = {t.op if t.group != "dp0" else "dp": (c.geometry().nranks, c.geometry().nnodes) for t, c in placed.items()}
    assert shape == {Op.ALLREDUCE: (8, 1), "dp": (2, 2), Op.SENDRECV: (2, 2)}
    sendrecv = next(c for t, c in placed.items() if t.op is Op.SENDRECV)
    assert sendrecv.gpus == placement.member_gpus((0, 8)) and sendrecv.nccl is placement.communicator("pp").nccl


def test_a_sendrecv_without_its_partner_call_is_reported(h100):
    b = TraceBuilder(2, {"g": (0, 1)})
    b.call(0, Op.SENDRECV, 1 << 20, "g", peer=1)
    b.call(0, Op.SENDRECV, 1 << 20, "g", peer=1)
    b.call(1, Op.SENDRECV, 1 << 20, "g", peer=0)
    with pytest.raises(ReplayError, match=r"rank 0 waits forever in sendrecv .* rank\(s\) \[1\] never issue"):
        replay(b.trace(), h100)


def test_given_configs_are_used_and_impossible_ones_fall_back_to_nccl(h100):
    b = TraceBuilder(8, {"g": tuple(range(8))})
    for r in range(8):
        b.call(r, Op.ALLREDUCE, 64 << 20, "g")
        b.call(r, Op.ALLGATHER, 64 << 20, "g")
    trace = b.trace()
    ring = Config(Algo.RING, Proto.SIMPLE, Transport.P2P, 4, 256, 1 << 19)
    nvls_tree = Config(Algo.NVLS_TREE, Proto.SIMPLE, Transport.P2P, 16, 512, 1 << 17)   # needs 2+ nodes
    ar, ag = (next(t for t in trace.tasks() if t.op is op) for op in (Op.ALLREDUCE, Op.ALLGATHER))
    result = replay(trace, h100, {ar: ring, ag: nvls_tree})
    by_op = {t.task.op: t for t in result.tasks}
    assert by_op[Op.ALLREDUCE].config == ring and by_op[Op.ALLREDUCE].chosen_by == "given"
    assert by_op[Op.ALLGATHER].chosen_by == "nccl-fallback"
    assert any("cannot run" in note for note in result.notes)
    default = replay(trace, h100)
    assert by_op[Op.ALLREDUCE].time_us > {t.task.op: t for t in default.tasks}[Op.ALLREDUCE].time_us


def test_a_warm_start_plan_gives_the_configs(h100):
    b = TraceBuilder(8, {"g": tuple(range(8))})
    for r in range(8):
        b.call(r, Op.ALLREDUCE, 64 << 20, "g")
    trace = b.trace()
    [task] = trace.tasks()
    ring = Config(Algo.RING, Proto.SIMPLE, Transport.P2P, 4, 256, 1 << 19)
    default = replay(trace, h100).tasks[0]
    plan = Plan(cluster="dgx-h100 1x8", nccl_version="2.28.9", created_by="test", process=ProcessSettings(),
                entries=(PlanEntry(task=task, ranked=(RankedSubspace(config=ring, time_us=1.0),),
                                   default=RankedSubspace(config=default.config, time_us=default.time_us)),))
    [planned] = replay(trace, h100, plan_configs(plan)).tasks
    assert planned.config == ring and planned.chosen_by == "given"


def test_compute_is_timed_by_roofline_on_the_cluster_gpu():
    flops, mem = 4e12, 2e9
    b = TraceBuilder(1, {"w": (0,)}, {"gpu": "A100-SXM4-40GB"})
    b.compute(0, flops=flops, mem_bytes=mem)          # no duration: roofline on the cluster's GPU
    b.compute(0, 20_000.0, flops=flops, mem_bytes=mem)  # measured on an A100: scaled by roofline ratio
    b.compute(0, 500.0)                               # measured only: kept
    trace = b.trace()
    a100, h100 = gpu_spec("a100"), gpu_spec("h100")
    on_h100 = replay(trace, load_cluster("dgx-h100"))
    here, there = roofline_us(h100, flops, mem), roofline_us(a100, flops, mem)
    assert on_h100.ranks[0].compute_us == pytest.approx(here + 20_000.0 * here / there + 500.0)
    on_a100 = replay(trace, load_cluster("dgx-a100"))
    assert on_a100.ranks[0].compute_us == pytest.approx(there + 20_000.0 + 500.0)
    assert not on_a100.notes
    assert any("1 compute phase(s) have only a measured duration (on A100-SXM4-40GB)" in n for n in on_h100.notes)


def test_a_copy_bound_call_slows_while_compute_shares_its_gpu(h100):
    one_channel = Config(Algo.RING, Proto.SIMPLE, Transport.P2P, 1, 512, 1 << 19)
    quiet, busy = TraceBuilder(2, {"g": (0, 1)}), TraceBuilder(2, {"g": (0, 1)})
    for r in (0, 1):
        quiet.call(r, Op.ALLREDUCE, 64 << 20, "g")
        busy.call(r, Op.ALLREDUCE, 64 << 20, "g")
        busy.compute(r, 1e6)
    task = Task(Op.ALLREDUCE, 64 << 20, 2, "float32", "g")
    alone = replay(quiet.trace(), h100, {task: one_channel}).tasks[0]
    shared = replay(busy.trace(), h100, {task: one_channel}).tasks[0]
    schedule = Placement(quiet.trace(), h100).schedule((0, 1), task, one_channel)
    fixed = schedule.launch_us + schedule.n_steps * schedule.sync_us  # launch and slice hand-overs copy nothing
    copy_rate = DEFAULT_PARAMS.compute.copy_rate_under_compute
    assert (shared.time_us - fixed) == pytest.approx((alone.time_us - fixed) / copy_rate, rel=0.02)


def test_calls_of_unknown_size_take_their_measured_time(h100):
    b = TraceBuilder(2, {"g": (0, 1)})
    b.call(0, Op.ALLREDUCE, None, "g", duration_us=250.0)
    b.call(1, Op.ALLREDUCE, None, "g", duration_us=300.0)
    result = replay(b.trace(), h100)
    assert result.mean_iteration_us == pytest.approx(300.0)
    assert result.tasks == () and any("unknown size" in n for n in result.notes)


def test_iterations_are_timed_one_after_another(h100):
    b = TraceBuilder(2, {"g": (0, 1)})
    for r in (0, 1):
        last = None
        for it in range(3):
            c = b.compute(r, 1000.0 * (it + 1), after=[last] if last is not None else [], iteration=it)
            last = b.call(r, Op.ALLREDUCE, 1 << 20, "g", after=[c], iteration=it)
    result = replay(b.trace(), h100)
    t = alone_us(h100, 2, Op.ALLREDUCE, 1 << 20)
    assert result.iteration_us == pytest.approx((1000.0 + t, 2000.0 + t, 3000.0 + t), rel=1e-9)
    assert result.tasks[0].calls_per_iteration == 1
