"""A faster link never slows a fixed configuration: the physical invariant behind every rate the
twin charges.  One link kind of a preset is made faster (its topology rate, or its payload share in
``TwinParams``) and the same algorithm, protocol, channels, threads and chunk on the same paths
must take no longer, in the closed form and in the simulator (docs/physics.md, "Pipeline fill at
each hop's rate")."""

from functools import cache

from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from traces.task import Op
from tuner.config import Algo, Proto
from twin.des import CollectiveRun, simulate
from twin.model.schedule import Unsupported, check_supported, schedule_for
from twin.params import DEFAULT_PARAMS
from twin.placement import Communicator
from twin.topology import Cluster, load_cluster

PRESETS = ("h100-nvl", "h100-pcie", "l40s-pcie", "a40-pcie", "a40-nvlink-pairs", "dgx-a100", "dgx-h100")
"""The PCIe servers (bridged pairs, GPUs under two sockets, SHM between them), where a chain's hops
differ most in rate, and two NVSwitch nodes."""
KINDS = ("nvlink", "pcie", "cpu", "cpu-memory", "net")
"""Link kinds; ``cpu-memory`` is the socket link's rate for DMA to the far socket's memory only
(``Hop.memory_bw``), which NCCL's search does not see."""
OPS = (Op.ALLREDUCE, Op.BROADCAST, Op.REDUCE, Op.ALLGATHER, Op.REDUCESCATTER)
REL = 1e-9


@cache
def _base(preset: str, nodes: int) -> Cluster:
    return load_cluster(preset, nodes=nodes)


def _scaled(preset: str, nodes: int, kind: str, factor: float) -> Cluster:
    """The preset with every ``kind`` link's rates (NCCL's figure and the memory DMA rate) × ``factor``;
    ``cpu-memory``: the socket links' memory DMA rate only."""
    base = _base(preset, nodes)
    graph = base.graph.copy()
    fields = ("memory_bw",) if kind == "cpu-memory" else ("bw", "memory_bw")
    for _, _, edge in graph.edges(data=True):
        if edge["kind"] == kind.removesuffix("-memory"):
            for name in fields:
                if edge.get(name):
                    edge[name] *= factor
    return Cluster(base.name, graph)


def _paths(geom, pattern: str, nch: int):
    return [[(h.src, h.dst) for f in geom.channel_flows(pattern, c) for h in f.hops] for c in range(nch)]


def _pattern(op: Op, algo: Algo) -> str:
    return "tree" if algo is Algo.TREE else "chain" if op in (Op.BROADCAST, Op.REDUCE) else "ring"


configs = st.tuples(st.sampled_from(OPS), st.sampled_from((Algo.RING, Algo.TREE)), st.sampled_from(list(Proto)),
                    st.sampled_from((1, 2, 4, 8)), st.sampled_from((256, 512, 640)),
                    st.sampled_from((131072, 524288)), st.integers(10, 28).map(lambda e: 1 << e)
                    ).filter(lambda c: c[1] is Algo.RING or c[0] is Op.ALLREDUCE)


def _schedules(preset, nodes, kind, slow, fast, config):
    """The configuration's schedule on the preset with ``kind`` links at ``slow`` and at ``fast``
    (× their rates); ``None`` where NCCL cannot run it, or where its search routes the channels
    otherwise on the other rates (not the same configuration)."""
    op, algo, proto, nch, nthreads, chunk, nbytes = config
    geoms = [Communicator.first(_scaled(preset, nodes, kind, f)).geometry() for f in (slow, fast)]
    try:
        check_supported(geoms[0], op, algo, proto)
    except Unsupported:
        return None
    pattern = _pattern(op, algo)
    if _paths(geoms[0], pattern, nch) != _paths(geoms[1], pattern, nch):
        return None
    return [schedule_for(g, op, nbytes, algo, proto, nch, nthreads, chunk) for g in geoms]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(st.sampled_from(PRESETS), st.sampled_from((1, 2)), st.sampled_from(KINDS),
       st.floats(0.05, 1.0), st.floats(1.0, 8.0), configs)
@example("h100-nvl", 1, "cpu-memory", 22 / 128, 128 / 22,
         (Op.ALLREDUCE, Algo.TREE, Proto.SIMPLE, 4, 640, 524288, 2 << 20))
def test_a_faster_link_never_slows_a_fixed_configuration(preset, nodes, kind, slow, gain, config):
    """Closed form: ``kind`` links at ``slow × gain`` of their rate against ``slow``."""
    schedules = _schedules(preset, nodes, kind, slow, slow * gain, config)
    assume(schedules is not None)
    before, after = (float(s.time_us()) for s in schedules)
    assert after <= before * (1 + REL), f"{preset}×{nodes} {kind} ×{gain:.2f}: {before:.2f} → {after:.2f} µs"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(st.sampled_from(PRESETS), st.sampled_from(("nvlink", "pcie", "cpu")), st.floats(0.05, 1.0), configs)
def test_a_link_kinds_larger_payload_share_never_slows_a_fixed_configuration(preset, kind, share, config):
    """Closed form, on one node: the ``TwinParams`` payload share of one link kind raised to 1."""
    op, algo, proto, nch, nthreads, chunk, nbytes = config
    comm = Communicator.first(_base(preset, 1))
    efficiency = f"link.{kind}.efficiency"
    low = comm.with_params(DEFAULT_PARAMS.replace(**{efficiency: share}))
    geoms = [low.geometry(), comm.with_params(DEFAULT_PARAMS.replace(**{efficiency: 1.0})).geometry()]
    try:
        check_supported(geoms[0], op, algo, proto)
    except Unsupported:
        assume(False)
    before, after = (float(schedule_for(g, op, nbytes, algo, proto, nch, nthreads, chunk).time_us()) for g in geoms)
    assert after <= before * (1 + REL), f"{preset} {efficiency} {share:.2f} → 1: {before:.2f} → {after:.2f} µs"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(st.sampled_from(PRESETS[:5]), st.sampled_from(KINDS[:4]), st.floats(0.05, 1.0), st.floats(1.0, 8.0),
       configs.filter(lambda c: c[-1] <= 8 << 20))
def test_the_simulator_agrees_a_faster_link_never_slows(preset, kind, slow, gain, config):
    """The simulator, on one node, steps both schedules as the closed form times them."""
    schedules = _schedules(preset, 1, kind, slow, slow * gain, config)
    assume(schedules is not None)
    before, after = (simulate([CollectiveRun(s)])[0] for s in schedules)
    for schedule, des in zip(schedules, (before, after), strict=True):
        assert des == float(schedule.time_us()) or abs(des / float(schedule.time_us()) - 1) < 1e-6
    assert after <= before * (1 + REL)


def test_the_shm_tree_of_8_h100_nvl_fills_no_slower_at_upis_rate():
    """The case that showed it: NCCL's Tree Simple at 2 MiB on 8 H100 NVL, whose chain crosses the
    sockets through host memory.  With the socket link at SRP_QPI's 22 GB/s (NCCL's figure) the link
    binds the pipeline; at UPI's 128 the receives through host memory bind it, and its PCIe and
    NVLink hops, not through host memory, still fill at their own rates."""
    config = (Op.ALLREDUCE, Algo.TREE, Proto.SIMPLE, 4, 640, 524288, 2 << 20)
    slow, fast = _schedules("h100-nvl", 1, "cpu-memory", 22 / 128, 1.0, config)
    assert float(slow.gbps) < float(fast.gbps)
    assert float(fast.time_us()) < float(slow.time_us())


def test_an_ll_chains_grain_takes_a_cta_pass_over_every_hop():
    """The case the payload-share property found: LL Broadcast of 2 KiB on one channel of 8 H100 NVL.
    With PCIe at 1/8 of its payload share the links bind the chain; its grain is one CTA pass in
    time however fast the NVLink bridges are, so the fill no faster than with PCIe at full share
    (where the CTA binds), and no slower."""
    comm = Communicator.first(_base("h100-nvl", 1))
    times = [float(schedule_for(comm.with_params(DEFAULT_PARAMS.replace(**{"link.pcie.efficiency": share})).geometry(),
                                Op.BROADCAST, 2048, Algo.RING, Proto.LL, 1, 256, 131072).time_us())
             for share in (0.125, 1.0)]
    assert times[1] <= times[0] * (1 + REL)
