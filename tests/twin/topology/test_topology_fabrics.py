"""Fabric kinds in the topology format and the model, the cloud and 2026 presets, and GB200's
multi-node NVLink domain."""

from dataclasses import replace
from pathlib import Path

import pytest

from traces.task import Op
from tuner.config import Algo, Config, Proto, Transport
from twin.hardware import FABRIC_KINDS, TopologyError, fabric_kind
from twin.nccl_model.search import comm_info
from twin.params import DEFAULT_PARAMS
from twin.placement import Communicator
from twin.predict import predict
from twin.topology import build_cluster, dump_spec, load_cluster, read_spec

NEW_PRESETS = [
    # name, nodes, GPUs per node, model, NICs, Gb/s, fabric kind
    ("aws-p5", 1, 8, "H100-SXM5-80GB", 32, 100, "efa"),
    ("aws-p5e", 1, 8, "H200-SXM-141GB", 32, 100, "efa"),
    ("aws-p5en", 1, 8, "H200-SXM-141GB", 16, 200, "efa"),
    ("gcp-a3-high", 1, 8, "H100-SXM5-80GB", 4, 200, "gpudirect-tcpx"),
    ("gcp-a3-mega", 1, 8, "H100-SXM5-80GB", 8, 200, "gpudirect-tcpxo"),
    ("gcp-a3-ultra", 1, 8, "H200-SXM-141GB", 8, 400, "gib-a3u"),
    ("gcp-a4", 1, 8, "B200", 8, 400, "gib-a4"),
    ("azure-nd-h100-v5", 1, 8, "H100-SXM5-80GB", 8, 400, "infiniband"),
    ("azure-nd-h200-v5", 1, 8, "H200-SXM-141GB", 8, 400, "infiniband"),
    ("oci-bm-gpu-h100-8", 1, 8, "H100-SXM5-80GB", 16, 200, "roce"),
    ("dgx-b200", 1, 8, "B200", 8, 400, "infiniband"),
    ("dgx-a100-80gb", 1, 8, "A100-SXM4-80GB", 8, 200, "infiniband"),
    ("hgx-b300", 1, 8, "B300", 8, 800, "infiniband"),
    ("gb200-nvl72", 1, 72, "GB200", 72, 400, "infiniband"),
    ("gh200-slingshot", 1, 4, "GH200", 4, 200, "slingshot"),
    ("h100-pcie", 1, 8, "H100-PCIE", 4, 400, "infiniband"),
    ("h100-nvl", 1, 8, "H100-NVL", 4, 400, "infiniband"),
]


@pytest.mark.parametrize(("name", "nodes", "gpus", "model", "nics", "gbps", "kind"), NEW_PRESETS)
def test_new_presets_load_with_their_shape_fabric_and_sources(name, nodes, gpus, model, nics, gbps, kind):
    """Each preset builds, with its GPU model, NIC count and rate, fabric kind and named sources."""
    cluster = load_cluster(name)
    assert (cluster.nodes, cluster.gpus_per_node, cluster.gpu_model) == (nodes, gpus, model)
    assert cluster.nics_per_node == nics and {cluster.graph.nodes[n]["gbps"] for n in cluster.nics()} == {gbps}
    assert cluster.fabric.name == kind
    assert read_spec(name).sources and all(len(s) > 20 for s in read_spec(name).sources)
    two = load_cluster(name, nodes=2)  # every preset scales out over its fabric
    assert {h.kind for h in two.route("n0/gpu0", "n1/gpu0")} >= {"net"}


@pytest.mark.parametrize("kind", sorted(FABRIC_KINDS))
def test_every_fabric_kind_round_trips_through_the_format(kind, tmp_path):
    """``fabric.kind`` is written out and read back, and every NIC of the built cluster carries it."""
    spec = read_spec("dgx-h100")
    spec = replace(spec, nodes=2, fabric=replace(spec.fabric, kind=kind))
    path = tmp_path / "c.yaml"
    path.write_text(dump_spec(spec))
    back = read_spec(path)
    assert back == replace(spec, name=back.name) and back.fabric.kind == kind
    cluster = load_cluster(path)
    assert cluster.fabric == fabric_kind(kind)
    assert {cluster.graph.nodes[n]["fabric"] for n in cluster.nics()} == {kind}
    assert ("kind" in dump_spec(spec)) is (kind != "infiniband")  # files without it keep loading as IB


def test_a_bad_fabric_kind_names_the_file_and_the_key(tmp_path):
    """An unknown kind is one line naming the file, ``fabric.kind`` and the known kinds."""
    text = dump_spec(read_spec("dgx-h100")).replace("fabric: {", "fabric: {kind: myrinet, ")
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(TopologyError) as err:
        read_spec(path)
    message = str(err.value)
    assert message.startswith(f"{path}: fabric.kind: unknown fabric kind 'myrinet' (known: infiniband, roce, tcp")
    assert "\n" not in message
    path.write_text(text.replace("kind: myrinet", "kind: roce, sharp: true"))
    with pytest.raises(TopologyError, match=r"bad.yaml: fabric.sharp: SHARP needs InfiniBand switches, not roce$"):
        read_spec(path)


def _pair(kind: str, gbps: float = 200.0, params=DEFAULT_PARAMS) -> Communicator:
    """One GPU on each of two DGX H100-shaped nodes whose NICs speak ``kind`` at ``gbps``."""
    spec = read_spec("dgx-h100")
    spec = replace(spec, nodes=2, fabric=replace(spec.fabric, kind=kind)).with_overrides(nic_gbps=gbps)
    return Communicator.first(build_cluster(spec).subset(gpus_per_node=1), params=params)


def _time(comm: Communicator, nbytes: int, nchannels: int = 1) -> float:
    config = Config(Algo.RING, Proto.SIMPLE, Transport.P2P, nchannels, 512, 1 << 19)
    return float(comm.schedule(comm.task(Op.ALLREDUCE, nbytes), config).time_us())


def test_small_message_latency_orders_ib_roce_tcpxo_tcp():
    """At one line rate and one config, an 8 KiB AllReduce across two nodes takes longest over
    kernel TCP and least over InfiniBand: IB < RoCE < Slingshot < TCPXO < TCP; TCPX (TCP in the host
    kernel, payload straight to GPU memory) is slower than TCPXO's offload; EFA's SRD sits between."""
    t = {kind: _time(_pair(kind), 8 << 10) for kind in FABRIC_KINDS}
    assert t["infiniband"] < t["roce"] < t["gpudirect-tcpxo"] < t["tcp"]
    assert t["roce"] < t["slingshot"] < t["gpudirect-tcpxo"] < t["gpudirect-tcpx"]
    assert t["slingshot"] < t["efa"] < t["tcp"] and min(t.values()) == t["infiniband"]


def test_host_staged_is_slower_than_gpudirect_at_large_sizes():
    """TCP with RoCE's wire, message cost and efficiency differs from RoCE only by staging every
    byte in host memory: its route crosses the CPU, NCCL loses GPUDirect, a 1 GiB AllReduce is slower."""
    as_roce = DEFAULT_PARAMS.replace(**{f"fabric.tcp.{k}": v for k, v in
                                        (("wire_us", 1.6), ("message_us", 0.0), ("efficiency", 0.91))})
    staged, direct = _pair("tcp", 400.0, as_roce), _pair("roce", 400.0, as_roce)
    route = staged.cluster.route("n0/gpu0", "n1/gpu0")
    assert "n0/cpu0" in [h.dst for h in route] and "n0/cpu0" not in [h.dst for h in direct.cluster.route(
        "n0/gpu0", "n1/gpu0")]
    assert not staged.geometry().flow("n0/gpu0", "n1/gpu0").gdr_send
    assert _time(staged, 1 << 30, 8) > 1.15 * _time(direct, 1 << 30, 8)


def test_tcpxo_runs_simple_only_between_nodes_as_googles_profile_sets():
    """a3-mega across nodes: NCCL_PROTO=Simple, 8 MiB buffers, no NVLS (the FasTrak profile); on
    one node the plugin is not used and NCCL picks freely."""
    two = load_cluster("gcp-a3-mega", nodes=2)
    info = comm_info(two, two.gpus())
    assert (info.proto_env, info.algo_env, info.buffsize, info.nvls_support) == ("Simple", "Ring,Tree", 8 << 20, False)
    comm = Communicator.first(two)
    assert {predict(comm, Op.ALLREDUCE, n).config.proto for n in (8, 64 << 10, 1 << 20)} == {Proto.SIMPLE}
    one = load_cluster("gcp-a3-mega")
    assert comm_info(one, one.gpus()).proto_env is None
    ib = Communicator.first(load_cluster("azure-nd-h100-v5", nodes=2, nic_gbps=200))
    small = [predict(c, Op.ALLREDUCE, 64 << 10).time_us for c in (comm, ib)]
    assert small[0] > 2 * small[1]  # the 2-4x that IB physics under-predicted on a3-mega


def test_gb200_nvl72_allreduce_inside_the_domain_uses_nvlink_not_the_nic():
    """All 72 GPUs of a rack are one NVLink domain (NCCL's MNNVL): trays reach each other over
    NVLink, an AllReduce runs NVLS on it and does not change without NICs; between racks the NIC."""
    rack = load_cluster("gb200-nvl72")
    assert [h.kind for h in rack.route("n0/gpu0", "n0/gpu71")] == ["nvlink", "nvlink"]
    comm = Communicator.first(rack)
    flows = [comm.geometry().flow(a, b) for a, b in zip(rack.gpus(), rack.gpus()[1:], strict=False)]
    assert all(f.kind == "nvlink" for f in flows)
    with_nics = predict(comm, Op.ALLREDUCE, 1 << 30)
    without = predict(Communicator.first(load_cluster("gb200-nvl72", nics_per_node=0)), Op.ALLREDUCE, 1 << 30)
    assert with_nics.config.algo is Algo.NVLS and with_nics.time_us == without.time_us
    busbw = 2 * 71 / 72 * (1 << 30) / with_nics.time_us / 1e3
    assert busbw > 8 * 400 / 8  # 8x what each GPU's 400 Gb/s NIC could carry
    assert "net" in {h.kind for h in load_cluster("gb200-nvl72", nodes=2).route("n0/gpu0", "n1/gpu0")}


CLUSTERS = Path(__file__).resolve().parents[3] / "benchmarks" / "clusters"


def test_aws_ofi_nccl_profile_on_first_and_second_generation_efa():
    """aws-ofi-nccl reports 75 µs of network latency to NCCL on p4de and p5 (its cost model adds it
    to every network step, twice for Simple), and on p4de's first-generation EFA, which does not
    deliver 128-byte writes in order, forces NCCL_PROTO=simple: an 8-byte AllReduce over two p4de
    runs Simple and takes about the measured 160 µs (awsome-distributed-training's log), two p5 run LL."""
    p4de = load_cluster(str(CLUSTERS / "aws-p4de.yaml"), nodes=2)
    p5 = load_cluster(str(CLUSTERS / "aws-p5.yaml"), nodes=2)
    assert (p4de.fabric.name, p5.fabric.name) == ("efa-v1", "efa")
    infos = {c.fabric.name: comm_info(c, c.gpus()) for c in (p4de, p5)}
    assert {k: (i.proto_env, i.latency_inter) for k, i in infos.items()} == {"efa-v1": ("Simple", 75.0),
                                                                            "efa": (None, 75.0)}
    assert comm_info(load_cluster(str(CLUSTERS / "aws-p4de.yaml")), p4de.gpus()[:8]).latency_inter == 0.0
    small = {c.fabric.name: predict(Communicator.first(c), Op.ALLREDUCE, 8) for c in (p4de, p5)}
    assert (small["efa-v1"].config.proto, small["efa"].config.proto) == (Proto.SIMPLE, Proto.LL)
    assert 130 < small["efa-v1"].time_us < 190 and small["efa"].time_us < 0.5 * small["efa-v1"].time_us
    # Same wire: the first generation shares the second's times (TwinParams.fabric.efa).
    assert DEFAULT_PARAMS.on_fabric("efa-v1") == DEFAULT_PARAMS.on_fabric("efa")
