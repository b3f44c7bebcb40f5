"""The cluster graph: GPUs, NVSwitches, PCIe switches, CPUs, NICs and fabric switches.

>>> cluster = load_cluster("dgx-h100", nodes=2)
>>> cluster.nodes, cluster.gpus_per_node, cluster.nvlink_bw("n0/gpu0")
(2, 8, 450.0)
>>> [hop.dst for hop in cluster.route("n0/gpu3", "n1/gpu3")]
['n0/pcie3', 'n0/nic3', 'leaf3', 'n1/nic3', 'n1/pcie3', 'n1/gpu3']
"""

from twin.hardware import TopologyError
from twin.topology.build import build_cluster
from twin.topology.cluster import Cluster, Hop
from twin.topology.loader import dump_spec, list_presets, load_cluster, read_spec
from twin.topology.nccl_xml import import_nccl_topo_xml, parse_nccl_topo_xml
from twin.topology.nvidia_smi import import_nvidia_smi_topo, parse_nvidia_smi_topo
from twin.topology.spec import ClusterSpec

__all__ = [
    "Cluster",
    "ClusterSpec",
    "Hop",
    "TopologyError",
    "build_cluster",
    "dump_spec",
    "import_nccl_topo_xml",
    "import_nvidia_smi_topo",
    "list_presets",
    "load_cluster",
    "parse_nccl_topo_xml",
    "parse_nvidia_smi_topo",
    "read_spec",
]
