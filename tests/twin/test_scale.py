"""The replay's scaling algorithms give what the plain ones give.

The fluid network settles progress lazily and retires ends from a heap: checked against a plain
simulation that recomputes every rate from scratch at every start and end.  ``covered`` against
a sum over every interval; the NCCL search's per-host walk against a scan of every node; channel
loads asked in any order against ones built channel by channel, and their link classes against a
walk over every link.
"""

from __future__ import annotations

import math

import pytest
import simpy
from hypothesis import example, given, settings
from hypothesis import strategies as st

from traces.examples import path
from traces.generate import generate
from traces.generate.gpt import gpt_workload
from traces.trace_file import load_trace
from tuner.config import Proto
from twin.des import FluidNetwork
from twin.model.geometry import CommGeometry, LinkUse, _Load
from twin.model.netpath import proxy_post_us
from twin.model.protocols import store_efficiency
from twin.nccl_model.search import _host_nodes
from twin.placement import cluster_for
from twin.replay import replay
from twin.replay.result import covered, union
from twin.topology import load_cluster

LINKS = [("a", "b"), ("b", "c"), ("c", "d")]


def _fair_rates(jobs: list[tuple[dict[tuple[str, str], float], float]], capacity: dict) -> list[float]:
    """Max-min fair rates by progressive filling, from scratch (the textbook algorithm)."""
    rates = [0.0] * len(jobs)
    frozen = [False] * len(jobs)
    used = dict.fromkeys(capacity, 0.0)
    while not all(frozen):
        levels = {}
        for link in capacity:
            weight = sum(w.get(link, 0.0) for (w, _), f in zip(jobs, frozen, strict=True) if not f)
            if weight > 0:
                levels[link] = (capacity[link] - used[link]) / weight
        level = min([*levels.values(), *(cap for (_, cap), f in zip(jobs, frozen, strict=True) if not f)])
        saturated = {k for k, v in levels.items() if v <= level * (1 + 1e-12)}
        for i, (weights, cap) in enumerate(jobs):
            if not frozen[i] and (cap <= level * (1 + 1e-12) or saturated & weights.keys()):
                rates[i], frozen[i] = level, True
                for link, w in weights.items():
                    used[link] += level * w
    return rates


def _plain_ends(specs: list[tuple[float, float, dict, float]], capacity: dict) -> list[float]:
    """End times of transfers (start µs, bytes, link weights, cap) by stepping from event to event
    and recomputing every rate each time."""
    left = [b for _, b, _, _ in specs]
    ends = [math.nan] * len(specs)
    now = 0.0
    while any(math.isnan(e) for e in ends):
        running = [i for i, s in enumerate(specs) if s[0] <= now + 1e-12 and math.isnan(ends[i])]
        rates = _fair_rates([(specs[i][2], specs[i][3]) for i in running], capacity) if running else []
        upcoming = [s[0] for s in specs if s[0] > now + 1e-12]
        step = min([left[i] / (r * 1e3) for i, r in zip(running, rates, strict=True)] + upcoming, default=0.0)
        step = min(step, min(upcoming, default=math.inf) - now)
        for i, r in zip(running, rates, strict=True):
            left[i] -= r * 1e3 * step
        now += step
        for i in running:
            if left[i] <= 1e-6 * max(1.0, specs[i][3]):
                ends[i] = now
    return ends


transfers = st.lists(st.tuples(
    st.floats(0, 50), st.floats(1e3, 1e6),
    st.dictionaries(st.sampled_from(LINKS), st.floats(0.5, 3.0), max_size=3),
    st.floats(1.0, 40.0)), min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(transfers, st.lists(st.floats(5.0, 50.0), min_size=3, max_size=3))
def test_the_incremental_network_ends_every_transfer_when_recomputing_everything_does(specs, caps):
    capacity = dict(zip(LINKS, caps, strict=True))
    env = simpy.Environment()
    net = FluidNetwork(env)
    ends = [math.nan] * len(specs)

    def run(i, start, nbytes, weights, cap):
        yield env.timeout(start)
        t = net.start(nbytes, tuple(LinkUse(k, w, capacity[k]) for k, w in weights.items()), cap)
        yield t.done
        ends[i] = env.now

    for i, spec in enumerate(specs):
        env.process(run(i, *spec))
    env.run()
    for got, want in zip(ends, _plain_ends(specs, capacity), strict=True):
        assert math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-5)


def test_a_cap_change_speeds_a_transfer_up_from_that_instant():
    env = simpy.Environment()
    net = FluidNetwork(env)
    slow = net.start(1e6, (LinkUse(("a", "b"), 1.0, 100.0),), 1.0)  # 1 GB/s: 1,000 µs alone
    env.run(until=400.0)
    net.set_caps([(slow, 10.0)])  # 600 kB left at 10 GB/s: 60 µs more
    env.run(until=slow.done)
    assert env.now == 460.0


@given(st.lists(st.tuples(st.floats(0, 100), st.floats(0, 20)), max_size=30), st.floats(0, 100), st.floats(0, 50))
def test_covered_is_the_overlap_with_every_interval(raw, start, span):
    intervals = union([(lo, lo + d) for lo, d in raw])
    end = start + span
    brute = sum(max(0.0, min(hi, end) - max(lo, start)) for lo, hi in intervals)
    assert math.isclose(covered(intervals, start, end), brute, abs_tol=1e-9)


def test_the_search_walks_each_host_as_a_scan_of_every_node_finds_it():
    cluster = load_cluster("dgx-h100", nodes=3)
    graph = cluster.graph
    for host in (0, 2):
        gpus = [g for g in cluster.gpus() if graph.nodes[g]["host"] == host][:3]
        scanned = {n for n, d in graph.nodes(data=True) if d.get("host") == host}
        assert _host_nodes(graph, host, gpus) == scanned


def test_channel_loads_asked_in_any_order_equal_those_built_channel_by_channel():
    cluster = load_cluster("dgx-h100", nodes=2)
    asked = CommGeometry(cluster)
    loads = {n: asked._load("ring", n) for n in (12, 3, 8, 1)}
    plain = CommGeometry(cluster)
    built = _Load()
    for channel in range(12):
        built = built.plus(plain.channel_flows("ring", channel))
        if channel + 1 in loads:
            assert loads[channel + 1].uses == built.uses
            assert loads[channel + 1].links(Proto.SIMPLE, asked.params) == built.links(Proto.SIMPLE, plain.params)


def _per_link(load: _Load, proto: Proto, params, flush: bool) -> tuple[dict, float, float]:
    """A load's links, busiest rate and busiest proxy's actions from its ``uses``, link by link:
    the raw bytes per payload byte the definition sums in the uses' order, with no classes."""
    raw: dict[tuple[str, str], float] = {}
    capacity: dict[tuple[str, str], float] = {}
    for (hop, dma, via_cpu), count in load.uses.items():
        efficiency = store_efficiency(proto, hop.kind, dma=dma, params=params) * (
            params.link.root_complex_p2p_efficiency if via_cpu else 1.0)
        raw[hop.src, hop.dst] = raw.get((hop.src, hop.dst), 0.0) + count / efficiency
        # A socket link carries memory traffic at its own rate, forwarded peer to peer at NCCL's figure;
        # a link carrying both is held to the lower.
        rate = hop.bw if via_cpu or hop.memory_bw is None else hop.memory_bw
        capacity[hop.src, hop.dst] = min(capacity.get((hop.src, hop.dst), math.inf), rate)
    actions: dict[str, int] = {}
    for flow, copies in load.flows():
        if flow.kind == "net":
            # An isend per step sent, an irecv per step received, a flush per received Simple step.
            actions[flow.src] = actions.get(flow.src, 0) + copies
            actions[flow.dst] = actions.get(flow.dst, 0) + copies * (1 + (flush and proto is Proto.SIMPLE))
    return raw, min((capacity[k] / r for k, r in raw.items()), default=math.inf), max(actions.values(), default=0)


@settings(max_examples=15, deadline=None)
@given(st.sampled_from([("dgx-h100", 3, None), ("dgx-a100", 2, 2), ("a40-nvlink-pairs", 2, None), ("abci-a", 2, None)]),
       st.sampled_from(["ring", "tree", "chain", "nvls", "pairs", "sendrecv"]), st.sampled_from(list(Proto)),
       st.lists(st.integers(1, 24), min_size=1, max_size=4), st.sampled_from(["all", "one per node", "half"]))
def test_link_classes_give_each_links_load_as_a_walk_over_its_uses(preset, pattern, proto, counts, ranks):
    """The rates of a channel load come from classes of alike links shared by every channel count
    (``_LinkClasses``): they equal a walk over every link of the load, whatever counts are asked in
    whatever order, on rings of one GPU per node (one flow list for every channel), across NICs
    (a list per NIC) and on one node."""
    name, nodes, nics = preset
    cluster = load_cluster(name, nodes=nodes, nics_per_node=nics) if nics else load_cluster(name, nodes=nodes)
    gpus = cluster.gpus()
    ppn = len(gpus) // nodes
    half = [g for g in gpus if int(g.rsplit("gpu", 1)[1]) < ppn // 2]
    chosen = {"all": gpus, "one per node": gpus[::ppn], "half": half}
    geom = CommGeometry(cluster, chosen[ranks])
    if pattern == "nvls" and not cluster.has_nvswitch():
        return
    for n in counts:
        load = geom._load(pattern, n)
        links, gbps = load.links(proto, geom.params)
        for flush in (False, True):
            raw, busiest, actions = _per_link(load, proto, geom.params, flush)
            assert {u.link: u.raw_per_payload for u in links} == pytest.approx(raw, rel=1e-12)
            assert [u.link for u in links] == list(raw)
            assert gbps == pytest.approx(busiest, rel=1e-12)
            per_post = proxy_post_us(geom.cpu_vendor, geom.params)
            work = load.busiest_proxy_work_us(proto, flush, geom.cpu_vendor, geom.params)
            assert work == pytest.approx(actions * per_post)


plans = st.tuples(st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2]),
                  st.sampled_from([1, 2]), st.booleans()).filter(lambda p: 4 <= p[0] * p[1] * p[2] <= 32)


@settings(max_examples=12, deadline=None)
@given(plans, st.sampled_from([("dgx-h100", None), ("dgx-a100", 2), ("dgx-a100", None)]))
@example((8, 4, 1, 1, False), ("dgx-a100", 2))  # shadows on GPUs off the NIC: NCCL picks Simple there, LL128 at GPU 0
def test_one_representative_rank_per_role_replays_as_every_rank_does(plan, topology):
    """Symmetry: ranks that differ only in their TP or DP coordinate do the same work, so a trace of
    one per pipeline stage (their calls on shifted groups loading shared NICs as shadows) predicts
    what the trace of every rank predicts, exactly: where the shifted copies reach the network
    otherwise (two NICs per DGX A100 node) the ranks of each placement class join the replay."""
    tp, dp, pp, micro_batches, sequence_parallel = plan
    work = gpt_workload(hidden=256, heads=8, layers=2 * pp, seq=128, tp=tp, dp=dp, pp=pp, micro_batch=1,
                        global_batch=micro_batches * dp, sequence_parallel=sequence_parallel and tp > 1,
                        dtype="bfloat16")
    every, kept = generate(work, ranks="all"), generate(work)
    assert len(kept.ranks) == pp < len(every.ranks)
    name, nics = topology
    cluster = cluster_for(every, name, nics_per_node=nics)
    whole, some = replay(every, cluster), replay(kept, cluster)
    assert not any("unlike" in note for note in whole.notes + some.notes), some.notes
    assert some.mean_iteration_us == pytest.approx(whole.mean_iteration_us, rel=1e-9)
    assert some.exposed_comm_us == pytest.approx(whole.exposed_comm_us, rel=1e-9, abs=1e-6)
    assert some.compute_us == pytest.approx(whole.compute_us, rel=1e-9)
    assert _mean_call_times(some) == pytest.approx(_mean_call_times(whole), rel=1e-9)


def _mean_call_times(result) -> dict:
    """Mean time of a call by (op, bytes, ranks), over the groups of the job that make such calls
    (a replayed call counts for the absent groups it stands for)."""
    sums: dict[tuple, list[float]] = {}
    for t in result.tasks:
        total = sums.setdefault((t.task.op, t.task.nbytes, t.task.nranks), [0.0, 0.0])
        total[0] += t.time_us * t.calls_per_iteration * t.groups
        total[1] += t.calls_per_iteration * t.groups
    return {key: time / calls for key, (time, calls) in sums.items()}


def test_ranks_placed_unlike_their_representative_replay_as_their_own_class():
    """Two NICs on a DGX A100 node: GPU 0 of the first stage reaches its NIC through its own PCIe
    switch, four of the seven shifted copies of its pipeline sends take longer paths (the other
    NIC's).  The replay of one rank per stage runs those ranks as ranks of the trace (their
    placement classes) and predicts what the trace of every rank predicts, and says so."""
    work = gpt_workload(hidden=256, heads=8, layers=4, seq=128, dp=8, pp=2, global_batch=8, dtype="bfloat16")
    every, kept = generate(work, ranks="all"), generate(work)
    cluster = cluster_for(every, "dgx-a100", nics_per_node=2)
    whole, some = replay(every, cluster), replay(kept, cluster)
    assert some.mean_iteration_us == pytest.approx(whole.mean_iteration_us, rel=1e-9)
    assert some.exposed_comm_us == pytest.approx(whole.exposed_comm_us, rel=1e-9)
    assert any("absent rank(s) reach the network otherwise" in note for note in some.notes)
    assert not any("unlike" in note for note in some.notes + whole.notes)
    one_rank_per_role = replay(kept, cluster_for(every, "dgx-a100"))  # a NIC per GPU pair, each beside its own
    assert not any("otherwise" in note for note in one_rank_per_role.notes)


def test_the_readme_default_job_replays_its_absent_ranks_alike():
    """The bundled Phi-2 TP8 x DP4 trace keeps rank 0 alone: the seven other data-parallel groups of
    its node are shadows of its 632 MiB all-reduce and end when it ends, on DGX H100 (a NIC per GPU)
    and on DGX A100 (a NIC per pair of GPUs, each GPU beside its own) alike (the trace of every rank
    replays the same iteration on DGX H100: 2,515,232.714 µs)."""
    trace = load_trace(path("phi2-tp8dp4"))
    for topology in ("dgx-h100", "dgx-a100"):
        result = replay(trace, cluster_for(trace, topology))
        assert any("7 group(s) of absent ranks sharing nodes" in note for note in result.notes)
        assert not any("unlike" in note for note in result.notes), topology
