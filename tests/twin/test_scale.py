"""The replay's scaling algorithms give what the plain ones give.

The fluid network settles progress lazily and retires ends from a heap: checked against a plain
simulation that recomputes every rate from scratch at every start and end.  ``covered`` against
a sum over every interval; the NCCL search's per-host walk against a scan of every node; channel
loads asked in any order against ones built channel by channel.
"""

from __future__ import annotations

import math

import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from tuner.config import Proto
from twin.des import FluidNetwork
from twin.model.geometry import CommGeometry, LinkUse, _Load
from twin.nccl_model.search import _host_nodes
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
