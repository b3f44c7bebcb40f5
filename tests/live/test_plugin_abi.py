"""The compiled plugin called exactly as NCCL calls it: every exported tuner ABI (v3..v6), the cost
table as NCCL lays it out, several ranks in one process and in several, schedules with several
versions and from-occurrences, unavailable entries, odd inputs, full tables and rings."""

from __future__ import annotations

import ctypes
import multiprocessing
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from plugin_support import (
    H200_TABLE,
    Rule,
    built_plugin,
    expected,
    fresh_plugin,
    full_table,
    rank_process,
    run_schedule,
)

from live.plugin.binding import UNKNOWN, Plugin, RuleTableFull
from live.plugin.emulate import IGNORE, LOGGER, TUNER_STRUCTS, EmulatedComm, Selection, cost_table, nccl_select
from traces.task import Op
from tuner.config import Algo, Proto

ABIS = (3, 4, 5, 6)
MB = 1 << 20

# A schedule as a leader publishes it: versions grow; from-occurrences are not monotone in the version.
SCHEDULE = [
    (0, Rule(0, 1, Algo.RING, Proto.SIMPLE, nchannels=2, chunk_bytes=1 << 19)),
    (0, Rule(6, 2, Algo.TREE, Proto.LL128, nchannels=8)),
    (2, Rule(4, 3, Algo.RING, Proto.LL, nchannels=4, chunk_bytes=1 << 16)),
    (3, Rule(6, 4, Algo.TREE, Proto.SIMPLE, chunk_bytes=1 << 18)),  # same from as v2: the larger version wins
    (5, Rule(8, 5, Algo.NVLS, Proto.SIMPLE, nchannels=16)),           # NVLS is -1 here: NCCL's default
    (5, Rule(9, 6, proto=Proto.LL)),                                  # protocol only: NCCL picks the algo
    (5, Rule(10, 7, algo=Algo.TREE, nchannels=3)),                    # algorithm only
]
CALLS = 12


@pytest.mark.parametrize("abi", ABIS)
def test_each_abi_installs_the_rule_of_each_occurrence(abi):
    plugin = fresh_plugin()
    got = run_schedule(plugin, 0xC0FFEE, SCHEDULE, CALLS, tuner_abi=abi)
    rules = [r for _, r in SCHEDULE]
    assert got == [expected(rules, k, H200_TABLE, abi) for k in range(CALLS)]
    # spelled out for the reader: v1 from 0, v3 from 4, v4 beats v2 at 6, NVLS unavailable at 8 ...
    chunk = abi >= 6
    assert got[0] == Selection(Algo.RING, Proto.SIMPLE, 2, (1 << 19) if chunk else 0)
    assert got[4] == Selection(Algo.RING, Proto.LL, 4, (1 << 16) if chunk else 0)
    assert got[6] == Selection(Algo.TREE, Proto.SIMPLE, 0, (1 << 18) if chunk else 0)
    assert got[8] == Selection(Algo.RING, Proto.LL128, 0, 0)  # NCCL's own argmin of H200_TABLE
    assert got[9] == Selection(Algo.RING, Proto.LL, 0, 0)
    assert got[10] == Selection(Algo.TREE, Proto.LL128, 3, 0)
    decisions = plugin.drain_decisions()
    assert [d.occurrence for d in decisions] == list(range(CALLS))
    assert [d.version for d in decisions] == [1, 1, 1, 1, 3, 3, 4, 4, 5, 6, 7, 7]
    assert [(d.algo, d.proto, d.nchannels) for d in decisions] == [(s.algo, s.proto, s.nchannels) for s in got]
    assert decisions[8].has("unavailable") and not decisions[8].has("rule_applied")
    assert all(d.has("rule_applied") for i, d in enumerate(decisions) if i != 8)
    assert all(d.has("chunk") == (abi >= 6 and d.chunk_bytes > 0) for d in decisions)
    # what NCCL offered and would have chosen itself, whatever the rule did: Tree and Ring, Ring LL128
    assert {(d.table_mask, d.nccl_algo, d.nccl_proto) for d in decisions} == {(0b111111, Algo.RING, Proto.LL128)}
    assert decisions[0].available == {(a, p) for a in (Algo.TREE, Algo.RING) for p in Proto}


@pytest.mark.parametrize("abi", ABIS)
def test_the_cost_table_is_read_as_nccl_lays_it_out(abi):
    """NCCL passes ``float collCostTable[7][3]`` cast to ``float**``: one contiguous block.  Reading it as
    row pointers (as NCCL's example plugin did in 2.27.5-2.29.7) would dereference costs as addresses."""
    plugin = fresh_plugin()
    table = full_table()
    with EmulatedComm(plugin, 7, nranks=2, tuner_abi=abi) as comm:
        Rule(0, 1, Algo.COLLNET_CHAIN, Proto.LL128).install(plugin, 7, Op.REDUCESCATTER, 4096)
        after, nchannels = comm.get_coll_info(Op.REDUCESCATTER, 4096, table)
    changed = [(a, p) for a in range(7) for p in range(3) if after[a][p] != table[a][p]]
    assert changed == [(3, 1)] and after[3][1] == 0.0 and nchannels == 0


@pytest.mark.parametrize("abi", ABIS)
def test_ranks_in_one_process_decide_alike(abi):
    """Two local ranks of one communicator (a context each): rank 0 runs ahead and the schedule arrives
    just before rank 0 needs it; rank 1 follows later (the plugin must keep what rank 1 still needs)."""
    plugin = fresh_plugin()
    comm, rules = 0xAB, [r for _, r in SCHEDULE]
    with (EmulatedComm(plugin, comm, nranks=2, rank=0, tuner_abi=abi) as r0,
          EmulatedComm(plugin, comm, nranks=2, rank=1, tuner_abi=abi) as r1):
        first = []
        for k in range(CALLS):
            for rule in rules:
                if rule.from_occurrence == k:
                    rule.install(plugin, comm, Op.ALLREDUCE, MB)
            first.append(r0.select(Op.ALLREDUCE, MB, H200_TABLE))
        second = [r1.select(Op.ALLREDUCE, MB, H200_TABLE) for _ in range(CALLS)]
    assert first == second == [expected(rules, k, H200_TABLE, abi) for k in range(CALLS)]


def test_ranks_in_separate_processes_decide_alike():
    """Three processes, each with its own instance: one got the whole schedule first, one each rule just
    in time, one in reverse order; every rank selects the same config at every occurrence."""
    at_start = [(0, r) for _, r in SCHEDULE]
    just_in_time = [(r.from_occurrence, r) for _, r in SCHEDULE]
    reversed_start = list(reversed(at_start))
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(3) as pool:
        runs = pool.starmap(rank_process, [(str(built_plugin()), 0x5EED, s, CALLS, 6)
                                           for s in (at_start, just_in_time, reversed_start)])
    rules = [r for _, r in SCHEDULE]
    want = [(s.algo.value, s.proto.value, s.nchannels, s.chunk_bytes)
            for s in (expected(rules, k, H200_TABLE, 6) for k in range(CALLS))]
    assert runs == [want, want, want]


@pytest.mark.parametrize("abi", ABIS)
def test_unavailable_entry_keeps_nccls_whole_default(abi):
    plugin = fresh_plugin()
    table = cost_table({(Algo.RING, Proto.SIMPLE): 40.0, (Algo.RING, Proto.LL): 25.0})
    with EmulatedComm(plugin, 9, nranks=8, tuner_abi=abi) as comm:
        Rule(0, 1, Algo.TREE, Proto.SIMPLE, nchannels=12, chunk_bytes=1 << 20).install(plugin, 9, Op.ALLGATHER, MB)
        after, nchannels = comm.get_coll_info(Op.ALLGATHER, MB, table)
        assert after == table and nchannels == 0
        assert comm.select(Op.ALLGATHER, MB, table) == Selection(Algo.RING, Proto.LL, 0, 0)
    decisions = plugin.drain_decisions()
    assert [(d.has("unavailable"), d.version, d.nchannels, d.chunk_bytes) for d in decisions] == [(True, 1, 0, 0)] * 2


@pytest.mark.parametrize("abi", ABIS)
def test_chunk_is_offered_only_through_v6_getchunksize(abi):
    plugin = fresh_plugin()
    with EmulatedComm(plugin, 11, nranks=4, tuner_abi=abi) as comm:
        Rule(0, 1, Algo.RING, Proto.SIMPLE, chunk_bytes=131072).install(plugin, 11, Op.ALLREDUCE, 8 * MB)
        chosen = comm.select(Op.ALLREDUCE, 8 * MB, H200_TABLE)
        assert chosen.chunk_bytes == (131072 if abi == 6 else 0)
        assert ("getChunkSize" in dict(TUNER_STRUCTS[abi]._fields_)) == (abi == 6)
        if abi == 6:  # NCCL asks per channel part (smaller than the call), with the selected algo/proto
            ring, simple = Algo.RING.nccl_index, Proto.SIMPLE.nccl_index
            assert comm.get_chunk_size(Op.ALLREDUCE, MB, ring, simple, chunk_bytes=2 * MB) == 131072
            # a part larger than the call, or another algorithm, is not this call's: NCCL's chunk stays
            assert comm.get_chunk_size(Op.ALLREDUCE, 9 * MB, ring, simple, chunk_bytes=2 * MB) == 2 * MB
            assert comm.get_chunk_size(Op.ALLREDUCE, MB, Algo.TREE.nccl_index, simple, chunk_bytes=7) == 7


def test_getchunksize_matches_the_call_of_its_group():
    """One group with two AllReduces (NCCL asks getCollInfo for both, then getChunkSize per part)."""
    plugin = fresh_plugin()
    with EmulatedComm(plugin, 12, nranks=4) as comm:
        Rule(0, 1, Algo.RING, Proto.SIMPLE, chunk_bytes=65536).install(plugin, 12, Op.ALLREDUCE, 64 * MB)
        Rule(0, 1, Algo.RING, Proto.SIMPLE, chunk_bytes=4096).install(plugin, 12, Op.ALLREDUCE, 256 * 1024)
        comm.get_coll_info(Op.ALLREDUCE, 64 * MB, H200_TABLE)
        comm.get_coll_info(Op.ALLREDUCE, 256 * 1024, H200_TABLE)
        ring, simple = Algo.RING.nccl_index, Proto.SIMPLE.nccl_index
        assert comm.get_chunk_size(Op.ALLREDUCE, 128 * 1024, ring, simple) == 4096  # the newest that fits
        assert comm.get_chunk_size(Op.ALLREDUCE, 2 * MB, ring, simple) == 65536
        # the next group starts afresh: its only call has no chunk rule
        comm.get_coll_info(Op.ALLREDUCE, 8 * MB, H200_TABLE)
        assert comm.get_chunk_size(Op.ALLREDUCE, 2 * MB, ring, simple) == 0


def test_v3_v4_learn_the_comm_id_from_the_profiler_init():
    plugin = fresh_plugin()
    with (EmulatedComm(plugin, 0xFEED, nranks=4, rank=3, tuner_abi=4) as v4,
          EmulatedComm(plugin, 0xBEEF, nranks=2, tuner_abi=3, profiler_abi=4)):
        infos = plugin.comms()
        assert [(c.comm, c.tuner_abi, c.profiler_abi, c.rank, c.nranks) for c in infos] == [
            (0xFEED, 4, 4, 3, 4), (0xBEEF, 3, 4, 0, 2)]
        Rule(0, 1, Algo.TREE, Proto.LL).install(plugin, 0xFEED, Op.ALLREDUCE, 64)
        assert v4.select(Op.ALLREDUCE, 64, H200_TABLE).algo is Algo.TREE
    assert [c.alive for c in plugin.comms()] == [False, False]


def test_v3_without_a_profiler_decides_nothing_until_its_comm_is_named():
    plugin = fresh_plugin()
    tuner = TUNER_STRUCTS[3].in_dll(plugin.lib, "ncclTunerPlugin_v3")
    ctx = ctypes.c_void_p()
    assert tuner.init(4, 1, LOGGER(0), ctypes.byref(ctx)) == 0
    (info,) = plugin.comms()
    assert (info.comm, info.tuner_abi, info.profiler_abi, info.rank) == (0, 3, 0, -1)
    Rule(0, 1, Algo.TREE, Proto.LL, nchannels=5).install(plugin, 0x77, Op.ALLREDUCE, 1024)
    table = (ctypes.c_float * 21)(*[v for row in H200_TABLE for v in row])
    nch = ctypes.c_int(0)
    as_nccl = ctypes.cast(table, ctypes.POINTER(ctypes.POINTER(ctypes.c_float)))
    assert tuner.getCollInfo(ctx, 4, 1024, 1, as_nccl, 7, 3, ctypes.byref(nch)) == 0
    assert nch.value == 0 and nccl_select([list(table[i:i + 3]) for i in range(0, 21, 3)]) == (1, 1)
    plugin.set_comm_id(info.local_ctx_id, 0x77)
    assert tuner.getCollInfo(ctx, 4, 1024, 1, as_nccl, 7, 3, ctypes.byref(nch)) == 0
    assert nch.value == 5 and table[0] == 0.0  # occurrence 1 now decides by the rule from 0
    first, second = plugin.drain_decisions()
    assert first.has("comm_unknown") and (first.comm, first.occurrence) == (0, 0)
    assert second.has("rule_applied") and (second.comm, second.occurrence) == (0x77, 1)
    with pytest.raises(ValueError, match="no context 99"):
        plugin.set_comm_id(99, 1)
    assert tuner.destroy(ctx) == 0


def test_odd_inputs_never_crash_and_stay_in_bounds():
    plugin = fresh_plugin()
    with EmulatedComm(plugin, 21, nranks=2) as comm:
        Rule(0, 1, Algo.PAT, Proto.SIMPLE, nchannels=2).install(plugin, 21, Op.ALLGATHER, 100)
        wide = [[float(10 + 4 * a + p) for p in range(4)] for a in range(8)]  # numAlgo 8, numProto 4
        after, nch = comm.get_coll_info(Op.ALLGATHER, 100, wide)
        assert [(a, p) for a in range(8) for p in range(4) if after[a][p] != wide[a][p]] == [(6, 2)]
        narrow = [[5.0, 6.0], [7.0, 8.0]]  # PAT (6) and SIMPLE (2) are outside a 2x2 table: default
        assert comm.get_coll_info(Op.ALLGATHER, 100, narrow) == (narrow, 0)
        assert comm.get_coll_info(Op.ALLGATHER, 100, []) == ([], 0)
        Rule(0, 2, nchannels=6).install(plugin, 21, Op.BROADCAST, 8)  # channels only: no table needed
        args = (comm.context, 0, 8, 1, None, 7, 3, 0)
        nch = ctypes.c_int(0)
        assert comm.tuner.getCollInfo(*args, ctypes.byref(nch)) == 0 and nch.value == 6
        assert comm.tuner.getCollInfo(*args, None) == 0  # no nChannels pointer
        for coll in (-1, 5, 7, 1000):  # not a collective a tuner is asked about
            assert comm.tuner.getCollInfo(comm.context, coll, 8, 1, None, 7, 3, 0, ctypes.byref(nch)) == 0
        for bogus in (None, ctypes.addressof(nch)):  # a context the plugin never gave
            assert comm.tuner.getCollInfo(bogus, 4, 8, 1, None, 7, 3, 0, ctypes.byref(nch)) == 0
            assert comm.tuner.getChunkSize(bogus, 4, 8, 1, 2, 1, None) == 0
            assert comm.tuner.finalize(bogus) == 0
    decisions = plugin.drain_decisions()
    assert len(decisions) == 9  # 3 AllGather, 2 Broadcast, 4 others; nothing for the bogus contexts
    assert (decisions[0].table_mask, decisions[0].nccl_algo, decisions[0].algo) == (2**21 - 1, Algo.TREE, Algo.PAT)
    assert (decisions[1].table_mask, decisions[1].has("unavailable")) == (0b11011, True)  # entries of a 2x2 table
    assert (decisions[2].table_mask, decisions[2].nccl_algo, decisions[2].algo) == (0, None, None)
    assert [d.has("untracked") for d in decisions[5:]] == [True] * 4
    assert all(d.occurrence == UNKNOWN for d in decisions[5:])


def test_decision_ring_keeps_the_oldest_and_counts_what_it_dropped():
    plugin = fresh_plugin()
    calls = 16384 + 300
    with EmulatedComm(plugin, 31, nranks=2, tuner_abi=5) as comm:
        for _ in range(calls):
            comm.get_coll_info(Op.ALLREDUCE, 256, H200_TABLE)
    decisions = plugin.drain_decisions()
    assert [d.occurrence for d in decisions] == list(range(16384))
    assert plugin.dropped().decisions == 300 and plugin.drain_decisions() == []
    assert plugin.occurrences(31, Op.ALLREDUCE, 256) == 0  # closed contexts count no more


def test_rules_a_context_can_never_reach_again_are_freed():
    """20,000 schedule versions for one task (more than the rule pool) while calls advance."""
    plugin = fresh_plugin()
    with EmulatedComm(plugin, 41, nranks=2) as comm:
        for k in range(20000):
            Rule(k, k + 1, list(Algo)[k % 2], Proto.SIMPLE, nchannels=1 + k % 8).install(plugin, 41, Op.ALLREDUCE, 4096)
            chosen = comm.select(Op.ALLREDUCE, 4096, H200_TABLE)
            assert (chosen.algo, chosen.nchannels) == (list(Algo)[k % 2], 1 + k % 8)
        assert plugin.occurrences(41, Op.ALLREDUCE, 4096) == 20000


def test_full_tables_refuse_rules_and_keep_the_installed_ones():
    plugin = fresh_plugin()
    capacity = plugin.capacity()
    assert (capacity.rules, capacity.keys) == (16384, 3584)
    for k in range(capacity.rules):  # no context of comm 51 yet: every future rule may still be needed
        Rule(k, 1, Algo.RING, Proto.LL).install(plugin, 51, Op.ALLREDUCE, 64 if k % 2 else 128)
    with pytest.raises(RuleTableFull, match="comm 0x33"):
        Rule(99999, 1).install(plugin, 51, Op.ALLREDUCE, 64)
    with EmulatedComm(plugin, 51, nranks=2) as comm:  # the rule from 0 (of the 128-byte task) still works
        assert comm.select(Op.ALLREDUCE, 128, H200_TABLE) == Selection(Algo.RING, Proto.LL, 0, 0)
    assert plugin.clear_rules(51) == capacity.rules
    for n in range(capacity.keys):
        Rule(0, 1).install(plugin, 52, Op.ALLGATHER, n)
    with pytest.raises(RuleTableFull):
        Rule(0, 1).install(plugin, 52, Op.ALLGATHER, 10**9)


def test_clear_rules_forgets_one_communicator_only():
    plugin = fresh_plugin()
    Rule(0, 1, Algo.TREE, Proto.LL).install(plugin, 61, Op.ALLREDUCE, MB)
    Rule(0, 1, Algo.TREE, Proto.LL).install(plugin, 62, Op.ALLREDUCE, MB)
    Rule(5, 2, Algo.TREE, Proto.SIMPLE).install(plugin, 61, Op.ALLREDUCE, MB)
    assert plugin.clear_rules(61) == 2 and plugin.clear_rules(61) == 0
    with EmulatedComm(plugin, 61, nranks=2) as a, EmulatedComm(plugin, 62, nranks=2) as b:
        assert a.select(Op.ALLREDUCE, MB, H200_TABLE).proto is Proto.LL128  # NCCL's default again
        assert b.select(Op.ALLREDUCE, MB, H200_TABLE).algo is Algo.TREE


def test_set_rule_refuses_what_nccl_could_not_take():
    plugin = fresh_plugin()
    for bad, match in ((dict(nchannels=65), "nchannels"), (dict(version=2**32), "version"),
                       (dict(from_occurrence=-1), "from_occurrence"), (dict(chunk_bytes=-4), "chunk_bytes")):
        kwargs = dict(version=1, from_occurrence=0) | bad
        with pytest.raises(ValueError, match=match):
            plugin.set_rule(1, Op.ALLREDUCE, 8, kwargs.pop("from_occurrence"), **kwargs)
    with pytest.raises(ValueError, match="never reaches NCCL's tuner"):
        plugin.set_rule(1, Op.ALLTOALL, 8, 0, version=1)


def test_init_reports_through_nccls_logger():
    plugin, lines = fresh_plugin(), []
    with EmulatedComm(plugin, 71, nranks=2, log=lambda *line: lines.append(line)) as comm:
        assert comm.event_mask == (1 << 1) | (1 << 6)  # ncclProfileColl | ncclProfileKernelCh asked of NCCL
    (plevel, pflags, _, _, pfmt), (tlevel, tflags, tfile, _, tfmt) = lines
    assert (plevel, pflags, tlevel, tflags) == (3, 0x1 | 0x4000, 3, 0x1 | 0x40)  # INFO; INIT|PROFILE, INIT|TUNING
    assert "profiler v%d init" in pfmt and "tuner v%d init" in tfmt and tfile.endswith("ccltwin_live.c")


def test_concurrent_threads_decide_their_own_schedules():
    """ctypes releases the GIL around each call: these threads really run in the plugin at once."""
    plugin, errors, stop = fresh_plugin(), [], threading.Event()
    rules = [r for _, r in SCHEDULE]

    def rank(comm):
        with EmulatedComm(plugin, comm, nranks=8) as ctx:
            got = [ctx.select(Op.ALLREDUCE, MB, H200_TABLE) for _ in range(30 * CALLS)]
        if got != [expected(rules, k, H200_TABLE, 6) for k in range(30 * CALLS)]:
            errors.append(comm)

    def control():
        version = 0
        while not stop.is_set():
            version += 1
            plugin.set_rule(0xDEAD, Op.ALLGATHER, 64, version, version=version, algo=Algo.RING)
            plugin.drain_decisions()
            plugin.comms()

    for comm in range(100, 104):
        for rule in rules:
            rule.install(plugin, comm, Op.ALLREDUCE, MB)
    workers = [threading.Thread(target=rank, args=(c,)) for c in range(100, 104)]
    ctl = threading.Thread(target=control)
    ctl.start()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    stop.set()
    ctl.join()
    assert errors == []


# ---- hypothesis: random schedules and tables against the pure-Python reference ------------------

_comm_ids = iter(range(1 << 40, 1 << 41))
_shared = {}


def _plugin() -> Plugin:
    if "p" not in _shared:
        _shared["p"] = fresh_plugin()
    return _shared["p"]


entries = st.one_of(st.just(IGNORE), st.floats(0.0, 1e6, width=32))
tables = st.lists(st.lists(entries, min_size=3, max_size=3), min_size=7, max_size=7).filter(
    lambda t: nccl_select(t) is not None)
rules = st.builds(Rule, st.integers(0, 12), st.integers(1, 6), st.none() | st.sampled_from(list(Algo)),
                  st.none() | st.sampled_from(list(Proto)), st.integers(0, 64), st.sampled_from([0, 512, 1 << 20]))
steps = st.lists(st.one_of(st.tuples(st.just("rule"), rules), st.tuples(st.just("call"), tables)),
                 min_size=1, max_size=40)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(steps=steps, abi=st.sampled_from(ABIS))
def test_selected_config_equals_the_reference_for_random_schedules(steps, abi):
    plugin, comm = _plugin(), next(_comm_ids)
    installed, k = [], 0
    with EmulatedComm(plugin, comm, nranks=4, tuner_abi=abi) as ctx:
        for kind, what in steps:
            if kind == "rule":
                what.install(plugin, comm, Op.ALLREDUCE, 4096)
                installed.append(what)
                continue
            assert ctx.select(Op.ALLREDUCE, 4096, what) == expected(installed, k, what, abi), (k, installed)
            k += 1
    decisions = [d for d in plugin.drain_decisions() if d.comm == comm]
    assert [d.occurrence for d in decisions] == list(range(k))
