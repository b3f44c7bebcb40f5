"""Per-release facts (spot checks against NVIDIA/nccl tags), the version option, and NCCL's choice
changing across releases exactly where a documented rule changed."""

from __future__ import annotations

from dataclasses import replace

import pytest
from typer.testing import CliRunner

from ccltwin import app
from traces.task import Op
from tuner.config import Algo, ConfigError, Proto
from twin.nccl_model import NcclCommInfo, nccl_choice
from twin.nccl_model.cost_table import ll128_default, model_entry
from twin.nccl_model.envparse import env_name, parse_algo_env
from twin.nccl_model.releases import CHANGES, arch_row, facts, introduced
from twin.placement import Communicator
from twin.topology import load_cluster

# A DGX A100 as NCCL's search sees it: 12 search channels of 20 GB/s over NVSwitch.
A100 = NcclCommInfo(nranks=8, nnodes=1, sm_version=80, intra_nvlink=True, bw_intra=20, bw_inter=20,
                    nchannels=24, tree_bw_intra=20, tree_bw_inter=20, graph_channels=12)


def test_table_is_ordered_and_sourced():
    firsts = [first for first, _, _ in CHANGES]
    assert firsts == sorted(firsts) and len(set(firsts)) == len(firsts)
    assert all(" @ v2." in where for _, where, _ in CHANGES)


@pytest.mark.parametrize("version, algos", [
    ((2, 8, 4), {"tree", "ring", "collnet_chain"}),                        # ncclAlgoStr @ v2.8.4-1
    ((2, 14, 3), {"tree", "ring", "collnet_direct", "collnet_chain"}),      # @ v2.14.3-1
    ((2, 17, 1), {"tree", "ring", "collnet_direct", "collnet_chain", "nvls"}),
    ((2, 18, 5), {"tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree"}),
    ((2, 23, 4), {a.value for a in Algo}),                                  # PAT @ v2.23.4-1
])
def test_algorithms_by_release(version, algos):
    assert set(facts(version).algorithms) == algos


def test_table_spot_checks():
    # src/graph/tuning.cc @ v2.8.4-1
    old = facts((2, 8, 4))
    assert old.base_lat[Algo.RING.nccl_index] == (3.6, 10.0, 8.4)
    assert old.hw_lat[0][Algo.TREE.nccl_index] == (.52, 1.25, 28.0)
    assert old.ll128_per_coll[4] == 16.9 and old.ampere_bus_cap == 235.0
    # @ v2.10.3-1: one LL128 cap of 20 GB/s, Ampere tree N2 23.6
    assert facts((2, 10, 3)).ring_ll128[1] == (20.0, 20.0, 20.0) and facts((2, 10, 3)).tree[1][1] == 23.6
    # @ v2.12.7-1 only: NET Ring/Simple 28 µs, back to 9.6 in v2.14.3-1
    assert facts((2, 12, 7)).hw_lat[2][1][2] == 28.0 and facts((2, 14, 3)).hw_lat[2][1][2] == 9.6
    # @ v2.18.1-1: new base latencies, no Ampere 235 GB/s cap; @ v2.21.5-1 Ring LL 1/2
    assert facts((2, 18, 1)).base_lat[1] == (6.6, 14.0, 8.4) and facts((2, 18, 1)).ampere_bus_cap is None
    assert facts((2, 20, 3)).ring_ll_factor == 0.25 and facts((2, 21, 5)).ring_ll_factor == 0.5
    # MAXCHANNELS 32 → 64 at v2.25.1-1 (src/include/device.h)
    assert facts((2, 24, 3)).max_channels == 32 and facts((2, 25, 1)).max_channels == 64
    assert introduced("max_channels") == [(2, 8, 3), (2, 25, 1)]
    # src/collectives/device/all_reduce.h: Tree LL and Simple up, then down, @ v2.8.4-1 and v2.9.9-1;
    # every protocol runTreeSplit @ v2.10.3-1
    assert facts((2, 9, 9)).tree_up_down == ("ll", "simple") and facts((2, 10, 3)).tree_up_down == ()
    assert introduced("tree_up_down") == [(2, 8, 3), (2, 10, 3)]


def test_arch_rows_and_ll128_enablement():
    # ≤ 2.14 only a pure sm80 communicator gets the Ampere row (compCap80); sm86 falls to Volta's;
    # 2.15 adds the Hopper row for pure sm90; 2.17 picks rows by tiers (sm86 → Ampere)
    assert arch_row(facts((2, 8, 4)), 86) == 0 and arch_row(facts((2, 8, 4)), 90) == 0
    assert arch_row(facts((2, 15, 1)), 86) == 0 and arch_row(facts((2, 15, 1)), 90) == 2
    assert arch_row(facts((2, 17, 1)), 86) == 1 and arch_row(facts((2, 25, 1)), 100) == 3
    h100 = replace(A100, sm_version=90)
    assert not ll128_default(replace(h100, nccl_version=(2, 15, 1)))  # sm90 LL128 from v2.16.2-1
    assert ll128_default(replace(h100, nccl_version=(2, 16, 2)))
    assert ll128_default(replace(A100, nccl_version=(2, 8, 4)))


def test_env_names_follow_the_release():
    assert env_name(Algo.NVLS_TREE) == "NVLSTree" and env_name(Algo.COLLNET_DIRECT) == "CollNetDirect"
    with pytest.raises(ConfigError, match=r"added in NCCL 2\.18\.1"):
        env_name(Algo.NVLS_TREE, (2, 17, 1))
    for spelling in ("NVLSTree", "nvlstree", "NVLSTREE"):
        assert parse_algo_env(spelling)[Op.ALLREDUCE][Algo.NVLS_TREE] == 1
    with pytest.raises(ValueError, match="unknown element 'nvls_tree'"):
        parse_algo_env("nvls_tree")  # NCCL compares names with strcasecmp: no underscore
    old = parse_algo_env("ring,nvls", (2, 8, 4))  # before 2.24 unknown names are ignored, AllReduce only
    assert old[Op.ALLREDUCE][Algo.RING] == 1 and old[Op.ALLREDUCE][Algo.TREE] == 0
    assert old[Op.BROADCAST][Algo.TREE] == 1
    assert parse_algo_env("allreduce:tree", (2, 24, 3))[Op.ALLREDUCE][Algo.RING] == 0  # prefixes from v2.24.3-1
    assert parse_algo_env("allreduce:tree", (2, 23, 4))[Op.ALLREDUCE][Algo.TREE] == 0  # one unknown token before
    with pytest.raises(ValueError, match="must have a prefix"):
        parse_algo_env("ring;tree", (2, 24, 3))


def test_choice_changes_where_a_rule_changed():
    """DGX A100 AllReduce: the Ring/LL bandwidth rule went from 1/4 to 1/2 of the bus in v2.21.5-1, so the
    LL → LL128 crossover moves up; nothing else in the table moved between 2.20.3 and 2.21.5 for sm80."""
    def proto(version, nbytes):
        return nccl_choice(replace(A100, nccl_version=version), Op.ALLREDUCE, nbytes).proto
    ll_bw = {v: model_entry(replace(A100, nccl_version=v), Op.ALLREDUCE, Algo.RING, Proto.LL)[0]
             for v in ((2, 20, 3), (2, 21, 5))}
    assert ll_bw[(2, 20, 3)] == pytest.approx(min(87.7, 12 * 20 / 4) * 8 / 14)
    assert ll_bw[(2, 21, 5)] == pytest.approx(min(87.7, 12 * 20 / 2) * 8 / 14)  # llMaxBws caps it
    sizes = [1 << k for k in range(16, 24)]
    before = [proto((2, 20, 3), n) for n in sizes]
    after = [proto((2, 21, 5), n) for n in sizes]
    assert before != after
    assert sum(p is Proto.LL for p in after) > sum(p is Proto.LL for p in before)
    assert [proto((2, 19, 1), n) for n in sizes] == before  # no Ampere rule changed in 2.20


def run(*args):
    return CliRunner().invoke(app, ["simulate", "--topology", "dgx-a100", "--op", "allreduce", "--sizes", "1M",
                                    *args])


def test_cli_version_option():
    good = run("--nccl-version", "2.8.4")
    assert good.exit_code == 0 and "NCCL 2.8.4" in good.output
    refused = run("--nccl-version", "2.7.8")
    assert refused.exit_code == 2 and "2.8.3 to 2.30.7" in refused.output
    malformed = run("--nccl-version", "2.8")
    assert malformed.exit_code == 2 and "MAJOR.MINOR.PATCH" in malformed.output
    newer = run("--nccl-version", "2.31.1")
    assert newer.exit_code == 0 and "warning: NCCL 2.31.1 is newer than the newest modelled release (2.30.7)" \
        in newer.output
    lacking = run("--nccl-version", "2.17.1", "--algo", "nvls_tree")
    assert lacking.exit_code == 2 and "has no nvls_tree algorithm" in lacking.output


@pytest.mark.parametrize("command", [
    ["tune", "--topology", "dgx-a100", "--op", "allreduce", "--nbytes", "1MiB", "--nranks", "8"],
    ["whatif", "--topology", "l40s-pcie", "--no-tuned"],
])
def test_every_twin_command_refuses_an_unmodelled_release(command):
    result = CliRunner().invoke(app, [*command, "--nccl-version", "2.7.8"])
    assert result.exit_code == 2 and "NCCL 2.7.8 is not modelled: the supported releases are 2.8.3 to 2.30.7" \
        in result.output


def test_tune_runs_the_release_given():
    result = CliRunner().invoke(app, ["tune", "--topology", "dgx-h100", "--op", "allreduce", "--nbytes", "64MiB",
                                      "--nranks", "8", "--nccl-version", "2.16.2", "--max-trials", "3", "--json"])
    assert result.exit_code == 0, result.output
    assert '"algo": "nvls"' not in result.output  # NVLS arrived in 2.17.1 (2.28.9 picks it here)


def test_threads_and_channel_filling_by_release():
    from twin.nccl_model.select import algo_info, channels_used
    # src/enqueue.cc: Tree/Simple gets 512 + 2 warps in 2.8, + 4 warps from 2.10, all 640 threads from 2.22
    threads = {v: algo_info(replace(A100, nccl_version=v), Op.ALLREDUCE, Algo.TREE, Proto.SIMPLE, 1 << 26)[1]
               for v in ((2, 8, 4), (2, 10, 3), (2, 21, 5), (2, 22, 3))}
    assert threads == {(2, 8, 4): 576, (2, 10, 3): 640, (2, 21, 5): 640, (2, 22, 3): 640}
    assert algo_info(replace(A100, nccl_version=(2, 8, 4)), Op.ALLREDUCE, Algo.TREE, Proto.LL, 1 << 26)[1] == 512
    assert algo_info(replace(A100, nccl_version=(2, 22, 3)), Op.ALLREDUCE, Algo.TREE, Proto.LL, 1 << 26)[1] == 640
    # before 2.22 every channel getAlgoInfo keeps takes a share; from 2.22 cells of 16 KiB of traffic
    old, new = (channels_used(replace(A100, nccl_version=v), Op.ALLREDUCE, Algo.RING, Proto.SIMPLE, 64 << 10, 24)
                for v in ((2, 21, 5), (2, 22, 3)))
    assert old == 24 and new < 24


def test_simulate_choice_changes_only_where_a_rule_changed():
    """DGX H100, 8 ranks, AllReduce (what ``simulate`` takes as NCCL's choice): NVLS is the pick at
    16 MiB from the release that added it (2.17.1), at 1 MiB only while NVLS latency was 23 µs and
    Ring/LL ×1/4 (2.18.1 – 2.21.4)."""
    cluster = load_cluster("dgx-h100")
    releases = [first for first, _, _ in CHANGES]
    infos = {v: Communicator.first(cluster, 8, nccl_version=v).nccl for v in releases}

    def choice(version, size):
        c = nccl_choice(infos[version], Op.ALLREDUCE, size)
        return c.algo, c.proto
    nvls = (Algo.NVLS, Proto.SIMPLE)
    large = {v for v in releases if choice(v, 16 << 20) == nvls}
    assert large == {v for v in releases if v >= (2, 17, 1)}
    assert {v for v in releases if choice(v, 1 << 20) == nvls} == {(2, 18, 1), (2, 18, 5), (2, 19, 1), (2, 20, 3)}


def test_no_nvls_before_the_release_that_added_it():
    """``comm_info`` reports NVLS support only from 2.17.1, so the tuner's space (``tuner.rules``,
    fed from it) offers no NVLS subspace on a release that has none."""
    from tuner.config import Subspace
    from tuner.rules import subspace_problem
    from twin.rank import comm_facts

    cluster = load_cluster("dgx-h100")
    for version, nvls in (((2, 16, 5), False), ((2, 17, 1), True)):
        comm = Communicator.first(cluster, 8, nccl_version=version)
        assert comm.nccl.nvls_support is nvls
        problem = subspace_problem(Op.ALLREDUCE, Subspace(Algo.NVLS, Proto.SIMPLE), comm_facts(comm))
        assert (problem is None) is nvls
