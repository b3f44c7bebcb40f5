"""aws-ofi-nccl's region tuner on the AWS presets: its polygons at their edges, where it keeps
NCCL's choice, and what NCCL then runs (``twin.nccl_model.ofi_tuner``, ``select.plugin_pair``)."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traces.task import Op
from tuner.config import Algo, Proto
from twin.nccl_model import nccl_choice
from twin.nccl_model.ofi_tuner import PLATFORMS, region_pair, regions
from twin.placement import Communicator
from twin.topology import load_cluster

GATHERS = (Op.ALLREDUCE, Op.ALLGATHER, Op.REDUCESCATTER)


@cache
def info(preset: str, nodes: int):
    return Communicator.first(load_cluster(preset, nodes=nodes)).nccl


def switch_size(platform: str, nranks: int, nnodes: int, low: int, high: int, before) -> int:
    """The first size in [low, high] whose pair is no longer ``before`` (bisection: the tables are
    convex along the size axis where the tests use them)."""
    assert region_pair(platform, Op.ALLREDUCE, low, nranks, nnodes) == before
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if region_pair(platform, Op.ALLREDUCE, mid, nranks, nnodes) == before else (low, mid)
    return high


def test_the_p5_tree_ll128_region_ends_on_its_vertices_and_between_them_on_the_log_log_line():
    tree, ring = (Algo.TREE, Proto.LL128), (Algo.RING, Proto.LL128)
    # vertices (31457280, 16), (37748736, 32), (117440512, 64) of the Tree LL128 polygon (8 ranks per node)
    assert region_pair("p5", Op.ALLREDUCE, 37748736, 32, 4) == tree  # on the edge: inside
    assert region_pair("p5", Op.ALLREDUCE, 37748736 + 4096, 32, 4) == ring
    assert region_pair("p5", Op.ALLREDUCE, 117440512, 64, 8) == tree
    assert region_pair("p5", Op.ALLREDUCE, 117440512 + 4096, 64, 8) == ring
    # 24 ranks (3 nodes): the edge from (2^24.907, 2^4) to (2^25.17, 2^5) in log2-log2 coordinates
    x0, x1 = math.log2(31457280), math.log2(37748736)
    expected = 2 ** (x0 + (math.log2(24) - 4) * (x1 - x0))
    got = switch_size("p5", 24, 3, 1 << 20, 64 << 20, tree)
    assert abs(got / expected - 1) < 1e-6, (got, expected)


def test_p5en_has_its_own_table():
    # p5en runs Tree LL below 192 KiB (its first polygon); p5/p5e's table has no LL region
    assert region_pair("p5en", Op.ALLREDUCE, 196608, 32, 4) == (Algo.TREE, Proto.LL)
    assert region_pair("p5en", Op.ALLREDUCE, 196608 + 1024, 32, 4) == (Algo.TREE, Proto.LL128)
    assert region_pair("p5", Op.ALLREDUCE, 196608, 32, 4) == (Algo.TREE, Proto.LL128)
    # AllGather: p5en has 8-ranks-per-node regions (Ring LL to the edge (768 KiB, 16)-(4.5 MiB, 128),
    # 1.42 MiB at 32 ranks), p5 none
    assert region_pair("p5en", Op.ALLGATHER, 1 << 20, 32, 4) == (Algo.RING, Proto.LL)
    assert region_pair("p5en", Op.ALLGATHER, 2 << 20, 32, 4) == (Algo.RING, Proto.LL128)
    assert region_pair("p5", Op.ALLGATHER, 1 << 20, 32, 4) is None
    assert PLATFORMS["p5e.48xlarge"] == PLATFORMS["p5.48xlarge"] != PLATFORMS["p5en.48xlarge"]


def test_the_degenerate_line_region_holds_only_its_line():
    line = regions("p5", 8, Op.ALLREDUCE)[1]  # NVLS-Tree on 16 ranks above 30 MiB: a polygon of zero area
    assert (line.algo, line.proto) == (Algo.NVLS_TREE, Proto.SIMPLE)
    assert line.holds(math.log2(64 << 20), 4.0)
    assert not line.holds(math.log2(64 << 20), math.log2(17))
    assert not line.holds(math.log2(16 << 20), 4.0)


@pytest.mark.parametrize("platform", ["p5", "p5en"])
def test_on_two_nodes_or_fewer_and_on_other_shapes_the_plugin_keeps_nccls_choice(platform):
    for s in (1, 1 << 16, 8 << 20, 30 << 20, 1 << 30):
        for nranks, nnodes in ((16, 2), (8, 1), (2, 2), (32, 8), (24, 6)):  # 2 nodes, 1 node, 4 and 4 ranks per node
            assert region_pair(platform, Op.ALLREDUCE, s, nranks, nnodes) is None


@settings(max_examples=150, deadline=None)
@given(platform=st.sampled_from(sorted(set(PLATFORMS.values()))), op=st.sampled_from(GATHERS),
       per_node=st.sampled_from((1, 2, 4, 8)), nnodes=st.integers(1, 512), log_size=st.floats(0, 36))
def test_the_plugin_names_a_pair_of_its_own_tables_or_none(platform, op, per_node, nnodes, log_size):
    nbytes = int(2 ** log_size)
    pair = region_pair(platform, op, nbytes, per_node * nnodes, nnodes)
    own = {(r.algo, r.proto) for r in regions(platform, per_node, op)}
    if nnodes <= 2 or not own:
        assert pair is None
    else:
        assert pair is None or pair in own
    blocked = region_pair(platform, op, nbytes, per_node * nnodes, nnodes, lambda a, p: a is not Algo.TREE)
    assert blocked is None or blocked[0] is not Algo.TREE


@settings(max_examples=40, deadline=None)
@given(preset=st.sampled_from(["aws-p5", "aws-p5en"]), nodes=st.sampled_from((2, 3, 4, 8)),
       log_size=st.integers(10, 33))
def test_nccl_runs_the_plugins_pair_where_it_names_one_and_its_own_choice_elsewhere(preset, nodes, log_size):
    comm = info(preset, nodes)
    stock = dataclasses.replace(comm, tuner="none")
    nbytes = 1 << log_size
    pair = region_pair(PLATFORMS[comm.instance], Op.ALLREDUCE, nbytes, comm.nranks, comm.nnodes)
    tuned, own = nccl_choice(comm, Op.ALLREDUCE, nbytes), nccl_choice(stock, Op.ALLREDUCE, nbytes)
    assert (tuned.algo, tuned.proto) == (pair or (own.algo, own.proto))
    if (tuned.algo, tuned.proto) == (own.algo, own.proto):
        assert tuned == own  # channels, threads and chunk stay NCCL's


def test_the_nccl_release_decides_whether_the_plugin_is_loaded_and_how_it_answers():
    comm = info("aws-p5", 4)  # 1 GiB: the plugin says Ring LL128, NCCL's own tables Ring Simple (2.20) or NVLS-Tree
    choice = {v: nccl_choice(dataclasses.replace(comm, nccl_version=v), Op.ALLREDUCE, 1 << 30)
              for v in ((2, 20, 5), (2, 21, 5), (2, 28, 9))}
    assert [(c.algo, c.proto) for c in choice.values()] == [(Algo.RING, Proto.SIMPLE)] + [(Algo.RING, Proto.LL128)] * 2
    # v3 passes over a region NCCL_ALGO took away; v2 declines under NCCL_ALGO altogether
    tree_only = nccl_choice(dataclasses.replace(comm, algo_env="Tree"), Op.ALLREDUCE, 1 << 30)
    assert tree_only.algo is Algo.TREE  # the Ring regions are passed over: NCCL's own Tree
    v2 = nccl_choice(dataclasses.replace(comm, nccl_version=(2, 21, 5), algo_env="Tree,Ring"), Op.ALLREDUCE, 1 << 30)
    assert (v2.algo, v2.proto) == (choice[(2, 20, 5)].algo, choice[(2, 20, 5)].proto)
    p4d = nccl_choice(dataclasses.replace(comm, instance="p4d.24xlarge"), Op.ALLREDUCE, 1 << 30)
    assert (p4d.algo, p4d.proto) == (Algo.NVLS_TREE, Proto.SIMPLE)  # no tables for p4d: NCCL's own


def test_the_efa_presets_load_the_plugin_with_their_instance_and_others_none():
    assert load_cluster("aws-p5").nccl_tuner == ("aws-ofi-nccl", "p5.48xlarge")
    assert load_cluster("aws-p5en").nccl_tuner == ("aws-ofi-nccl", "p5en.48xlarge")
    assert load_cluster("dgx-h100").nccl_tuner == ("none", None)
    with pytest.raises(ValueError, match="unknown tuner plugin"):
        dataclasses.replace(info("aws-p5", 4), tuner="nccl-tuner-x")


def write_p5(tmp_path, fabric_extra: str) -> str:
    text = (load_preset_text("aws-p5").replace("fabric: {kind: efa, instance: p5.48xlarge,",
                                               f"fabric: {{kind: efa, instance: p5.48xlarge, {fabric_extra}"))
    path = tmp_path / "p5.yaml"
    path.write_text(text)
    return str(path)


def load_preset_text(name: str) -> str:
    return (Path(__file__).resolve().parents[3] / "twin/topology/presets" / f"{name}.yaml").read_text()


def test_a_description_can_turn_the_plugin_off_and_a_wrong_name_is_one_line_exit_2(tmp_path):
    off = load_cluster(write_p5(tmp_path, "tuner: none,"), nodes=4)
    assert off.nccl_tuner == ("none", "p5.48xlarge")
    comm = Communicator.first(off).nccl
    assert nccl_choice(comm, Op.ALLREDUCE, 1 << 30).algo is Algo.NVLS_TREE  # NCCL's own choice
    shown = subprocess.run([sys.executable, "-m", "ccltwin", "topology", "show", str(tmp_path / "p5.yaml")],
                           capture_output=True, text=True, check=True).stdout
    assert "tuner      none (NCCL's own choice)" in shown
    bad = write_p5(tmp_path, "tuner: nccl-tuner-x,")
    run = subprocess.run([sys.executable, "-m", "ccltwin", "topology", "show", bad], capture_output=True, text=True)
    assert run.returncode == 2
    assert "p5.yaml" in run.stderr and "unknown tuner plugin 'nccl-tuner-x'" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1
