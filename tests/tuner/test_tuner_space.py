"""The config space: subspaces per op and fabric, caps, refusals with reasons, knob tiers."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traces.task import Op, Task
from tuner.candidates import Candidates
from tuner.config import Algo, Config, Proto, Subspace, Transport
from tuner.knobs import ALL_TIERS, Knob, Tier, changeable_knobs, knob_tiers
from tuner.rules import CommFacts, subspace_problem
from tuner.space import ConfigError, ConfigSpace, channel_cap
from twin.model.schedule import Unsupported, check_supported
from twin.placement import Communicator
from twin.rank import comm_facts
from twin.topology import load_cluster

H100_NODE = CommFacts(nranks=8, nnodes=1, sm_count=132, sm_version=90, nvls=True,
                      transports=(Transport.P2P, Transport.SHM))
A40_DP = CommFacts(nranks=4, nnodes=4, sm_count=84, sm_version=86, transports=(Transport.P2P, Transport.SHM))


def task(op: Op, nbytes: int, facts: CommFacts) -> Task:
    return Task(op, nbytes, facts.nranks, group=f"{facts.ppn}x{facts.nnodes}")


def test_allgather_on_an_nvswitch_node_has_ring_and_nvls_only():
    """AllGather on one NVSwitch node: Ring × 3 protocols × 2 transports, NVLS/Simple; no Tree, no PAT."""
    space = ConfigSpace(task(Op.ALLGATHER, 56 << 20, H100_NODE), H100_NODE)
    rings = {Subspace(Algo.RING, p, t) for p in Proto for t in (Transport.P2P, Transport.SHM)}
    assert set(space.subspaces) == rings | {Subspace(Algo.NVLS, Proto.SIMPLE, Transport.P2P)}
    assert "no tree algorithm" in space.excluded[Subspace(Algo.TREE, Proto.SIMPLE)]
    assert space.excluded[Subspace(Algo.PAT, Proto.SIMPLE)] == "pat needs exactly one GPU per node"
    assert "only with the simple protocol" in space.excluded[Subspace(Algo.NVLS, Proto.LL)]
    assert "does not apply" in space.excluded[Subspace(Algo.NVLS, Proto.SIMPLE, Transport.SHM)]


def test_one_gpu_per_node_has_no_transport_variants_and_pat_only_from_2_23():
    """With every peer remote the intra-node transport is moot; PAT needs NCCL ≥ 2.23."""
    space = ConfigSpace(task(Op.REDUCESCATTER, 1 << 30, A40_DP), A40_DP)
    assert {s.transport for s in space.subspaces} == {Transport.P2P}
    assert Subspace(Algo.PAT, Proto.SIMPLE) in space.subspaces
    old = CommFacts(nranks=4, nnodes=4, sm_count=84, sm_version=86, nccl_version=(2, 21, 5))
    assert subspace_problem(Op.REDUCESCATTER, Subspace(Algo.PAT, Proto.SIMPLE), old) == "pat needs NCCL ≥ 2.23.4"


def test_llm128_disabled_platform_refuses_it_unless_communicators_can_be_made():
    """Where NCCL disables LL128, only an executor that creates communicators (NCCL_PROTO) may use it."""
    pcie = CommFacts(nranks=8, nnodes=1, sm_count=84, sm_version=86, ll128=False)
    t = task(Op.ALLREDUCE, 1 << 26, pcie)
    fixed = Config(Algo.RING, Proto.SIMPLE, Transport.P2P, 2, 256, 1 << 20)
    per_call = ConfigSpace(t, pcie, tiers={Tier.PER_CALL}, fixed=fixed)
    assert not any(s.proto is Proto.LL128 for s in per_call.subspaces)
    assert "LL128 is disabled" in per_call.excluded[Subspace(Algo.RING, Proto.LL128)]
    assert any(s.proto is Proto.LL128 for s in ConfigSpace(t, pcie).subspaces)


@pytest.mark.parametrize("preset,nodes,gpus", [("dgx-h100", 1, 8), ("a40-pcie", 4, 1),
                                               ("a40-nvlink-pairs", 1, 8), ("dgx-a100", 2, 4)])
def test_space_subspaces_are_exactly_what_the_twin_can_run(preset, nodes, gpus):
    """For every op, the space's (algo, proto) choices match the twin's own support check."""
    comm = Communicator.first(load_cluster(preset, nodes=nodes, gpus_per_node=gpus))
    facts = comm_facts(comm)
    for op in Op:
        if op is Op.SENDRECV and facts.nranks < 2:
            continue
        try:
            space = ConfigSpace(Task(op, 1 << 24, facts.nranks), facts)
            mine = {(s.algo, s.proto) for s in space.subspaces}
        except ConfigError:
            mine = set()
        twins = set()
        for algo in Algo:
            for proto in Proto:
                try:
                    check_supported(comm.geometry(), op, algo, proto)
                    twins.add((algo, proto))
                except Unsupported:
                    pass
        if not facts.ll128:  # LL128 stays searchable: communicators can force it with NCCL_PROTO
            twins = {(a, p) for a, p in twins if p is not Proto.LL128} | {(a, p) for a, p in mine if p is Proto.LL128}
        if not facts.nvls:  # the twin checks for NVSwitch only; NCCL also needs Hopper or later
            twins = {(a, p) for a, p in twins if a not in (Algo.NVLS, Algo.NVLS_TREE)}
        assert mine == twins, op


def test_channel_caps():
    """Channels stop at MAXCHANNELS of the release, 2 × SMs, resident CTAs, and the live communicator's."""
    assert channel_cap(H100_NODE) == 64
    assert channel_cap(CommFacts(nranks=8, nnodes=1, sm_count=132, sm_version=90, nccl_version=(2, 24, 3))) == 32
    assert channel_cap(CommFacts(nranks=8, nnodes=1, sm_count=20, sm_version=90)) == 40
    assert channel_cap(CommFacts(nranks=8, nnodes=1, sm_count=20, sm_version=75)) == 20  # 1024 threads per SM
    live = CommFacts(nranks=8, nnodes=1, sm_count=132, sm_version=90, channel_cap=24)
    assert channel_cap(live, {Tier.PER_CALL}) == 24
    assert channel_cap(live, ALL_TIERS) == 64
    assert channel_cap(CommFacts(nranks=8, nnodes=1, sm_count=132, sm_version=90, max_channels=128)) == 128


def test_invalid_configs_are_refused_with_every_reason():
    """A config breaking several rules lists them all."""
    space = ConfigSpace(task(Op.ALLREDUCE, 1 << 26, H100_NODE), H100_NODE)
    bad = Config(Algo.TREE, Proto.SIMPLE, Transport.P2P, 65, 576, 600_000)
    problems = space.problems(bad)
    assert any("nchannels 65 above the cap of 64" in p for p in problems)
    assert any("nthreads 576 outside 96..512" in p for p in problems)
    assert any("above the simple buffer's ceiling 524288" in p for p in problems)
    assert any("not a multiple of the simple grain 512" in p for p in problems)
    with pytest.raises(ConfigError, match="refused"):
        space.validate(bad)
    assert space.problems(Config(Algo.RING, Proto.LL128, Transport.P2P, 8, 640, 38_401)) == [
        "chunk_bytes 38401 is not a multiple of the ll128 grain 1920"]
    assert space.problems(Config(Algo.TREE, Proto.SIMPLE, Transport.P2P, 8, 256, 4096)) == []
    assert space.problems(Config(Algo.PAT, Proto.SIMPLE, Transport.P2P, 8, 256, 4096)) == [
        "allreduce has no pat algorithm (NCCL offers ring, tree, nvls, nvls_tree, collnet_direct, collnet_chain)"]


def test_every_grid_point_is_valid():
    """The grids hold only configs the space accepts."""
    space = ConfigSpace(task(Op.ALLREDUCE, 1 << 26, H100_NODE), H100_NODE)
    for s in space.subspaces:
        cands = space.candidates(s)
        for i in range(0, cands.size, max(1, cands.size // 200)):
            assert space.problems(cands.config(i)) == []


def test_knob_tiers_follow_the_nccl_release():
    """Per-call algo/proto/channels from 2.19.1, per-call chunk from 2.30.3, NO_CACHE tiers from 2.29.7."""
    assert knob_tiers((2, 18, 3))[Knob.ALGO] is Tier.PER_COMMUNICATOR
    assert knob_tiers((2, 18, 3))[Knob.NCHANNELS] is Tier.PER_PROCESS
    assert knob_tiers((2, 27, 5))[Knob.CHUNK_BYTES] is Tier.PER_PROCESS
    assert knob_tiers((2, 29, 7))[Knob.CHUNK_BYTES] is Tier.PER_COMMUNICATOR
    assert knob_tiers((2, 29, 7))[Knob.NTHREADS] is Tier.PER_COMMUNICATOR
    assert knob_tiers((2, 30, 3))[Knob.CHUNK_BYTES] is Tier.PER_CALL
    assert knob_tiers((2, 30, 7))[Knob.TRANSPORT] is Tier.PER_PROCESS
    assert changeable_knobs((2, 28, 9), {Tier.PER_CALL}) == {Knob.ALGO, Knob.PROTO, Knob.NCHANNELS}


def test_a_per_call_executor_searches_only_per_call_knobs():
    """On NCCL 2.28 a live tuner varies algo, proto and channels; threads, chunk, transport come from the plan."""
    fixed = Config(Algo.RING, Proto.SIMPLE, Transport.SHM, 16, 512, 1 << 20)
    facts = CommFacts(nranks=8, nnodes=1, sm_count=132, sm_version=90, channel_cap=24,
                      transports=(Transport.P2P, Transport.SHM))
    space = ConfigSpace(task(Op.ALLREDUCE, 1 << 26, facts), facts, tiers={Tier.PER_CALL}, fixed=fixed)
    assert {s.transport for s in space.subspaces if s.algo in (Algo.RING, Algo.TREE)} == {Transport.SHM}
    grid = space.grid(Subspace(Algo.TREE, Proto.LL, Transport.SHM))
    assert list(grid.nchannels) == list(range(1, 25)) and grid.nthreads == (512,)
    assert [list(c) for c in grid.chunks.values()] == [[1 << 20]]
    assert space.problems(Config(Algo.RING, Proto.SIMPLE, Transport.SHM, 8, 256, 1 << 20)) == [
        "nthreads is fixed to 512 (tier PER_PROCESS)"]
    with pytest.raises(ConfigError, match="pass fixed="):
        ConfigSpace(task(Op.ALLREDUCE, 1 << 26, facts), facts, tiers={Tier.PER_CALL})


def test_fingerprint_changes_with_what_shapes_the_space():
    t = task(Op.ALLREDUCE, 1 << 26, H100_NODE)
    assert ConfigSpace(t, H100_NODE).fingerprint == ConfigSpace(t, H100_NODE).fingerprint
    assert ConfigSpace(t, H100_NODE).fingerprint != ConfigSpace(task(Op.ALLREDUCE, 1 << 27, H100_NODE),
                                                                H100_NODE).fingerprint


@settings(max_examples=60, deadline=None)
@given(algo_proto=st.sampled_from([(Algo.RING, Proto.LL), (Algo.RING, Proto.LL128), (Algo.TREE, Proto.SIMPLE)]),
       data=st.data())
def test_candidate_index_round_trips(algo_proto, data):
    """Every grid point maps to its index and back; off-grid configs have no index."""
    space = ConfigSpace(task(Op.ALLREDUCE, 1 << 26, H100_NODE), H100_NODE)
    cands: Candidates = space.candidates(Subspace(*algo_proto))
    i = data.draw(st.integers(0, cands.size - 1))
    config = cands.config(i)
    assert cands.index(config) == i and config in space
    assert cands.nearest(config) == config
    off = Config(config.algo, config.proto, config.transport, config.nchannels, config.nthreads,
                 config.chunk_bytes + 16)
    assert cands.index(off) is None
