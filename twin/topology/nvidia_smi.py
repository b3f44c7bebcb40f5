"""Read ``nvidia-smi topo -m`` output into a cluster description.

The matrix says how each pair of devices is joined: ``NV12`` (12 bonded NVLinks), ``PIX``
(one PCIe switch), ``PXB`` (several switches, no host bridge), ``PHB`` (a CPU host
bridge), ``NODE`` (host bridges of one NUMA node), ``SYS``/``SOC`` (the socket
interconnect).  From it:

- sockets: devices joined by anything but SYS, and GPUs with the same CPU or NUMA
  affinity, share a socket (one CPU node per NUMA domain the matrix shows);
- PCIe switches: devices joined by PIX or PXB share one switch; the others sit on their
  socket's root ports;
- NVLink: if a GPU's NV# counts add up to more links than its model has, the GPUs hang
  off an NVSwitch with the largest NV# per GPU; otherwise NV# entries are direct pairs.

The output names neither the GPU model (taken from a ``GPU 0: NVIDIA A100-SXM4-40GB``
line when present, else ``gpu_model``) nor NIC speeds (``nic_gbps``).
"""

from __future__ import annotations

import re
from pathlib import Path

from twin.hardware import TopologyError, gpu_spec
from twin.topology.build import build_cluster
from twin.topology.cluster import Cluster
from twin.topology.loader import read_source
from twin.topology.spec import ClusterSpec, FabricSpec, NodeSpec, PcieGroup

_PCIE = ("PIX", "PXB", "PHB", "NODE", "SYS", "SOC")
_NV = re.compile(r"NV(\d+)")
_GPU = re.compile(r"GPU(\d+)")
_MODEL_LINE = re.compile(r"^\s*GPU[\s\d,]*:\s*(?P<name>[A-Za-z].*?)\s*(\(UUID:.*)?$")


def import_nvidia_smi_topo(text_or_path: str | Path, *, gpu_model: str | None = None,
                           nic_gbps: float | None = None) -> Cluster:
    """The one-node ``Cluster`` described by ``nvidia-smi topo -m`` output (text or a file)."""
    text, source, name = read_source(text_or_path, "nvidia-smi topo -m")
    spec = parse_nvidia_smi_topo(text, gpu_model=gpu_model, nic_gbps=nic_gbps, source=source, name=name)
    try:
        return build_cluster(spec)
    except TopologyError as err:
        raise TopologyError(f"{source}: {err}") from None


def parse_nvidia_smi_topo(text: str, *, gpu_model: str | None = None, nic_gbps: float | None = None,
                          source: str = "<nvidia-smi topo -m text>", name: str = "imported") -> ClusterSpec:
    """The ``ClusterSpec`` of one node from ``nvidia-smi topo -m`` output."""
    devices, matrix, affinity = _read_matrix(text, source)
    gpus = [d for d in devices if _GPU.fullmatch(d)]
    nics = [d for d in devices if not _GPU.fullmatch(d)]
    if not gpus:
        raise TopologyError(f"{source}: the matrix lists no GPU")
    if [int(_GPU.fullmatch(g)[1]) for g in gpus] != list(range(len(gpus))):
        raise TopologyError(f"{source}: GPU columns must be GPU0..GPU{len(gpus) - 1}, got {', '.join(gpus)}")
    model = _model(text, gpu_model, source)
    if nics and (nic_gbps is None or nic_gbps <= 0):
        raise TopologyError(f"{source}: nvidia-smi topo -m does not give NIC speeds; give --nic-gbps "
                            f"(line rate in Gb/s) for its {len(nics)} NICs")

    def relation(a: str, b: str) -> str:
        return matrix[devices.index(a)][devices.index(b)]

    sockets = _components(devices, lambda a, b: relation(a, b) in ("PIX", "PXB", "PHB", "NODE")
                          or (a in affinity and affinity.get(a) == affinity.get(b)))
    switches = _components(devices, lambda a, b: relation(a, b) in ("PIX", "PXB"))
    groups, root_ports = [], {}
    for members in switches:
        socket = next(i for i, s in enumerate(sockets) if members[0] in s)
        placed = {"gpus": tuple(gpus.index(d) for d in members if d in gpus),
                  "nics": tuple(nics.index(d) for d in members if d in nics)}
        if len(members) > 1:
            groups.append(PcieGroup(socket=socket, **placed))
        else:
            old = root_ports.get(socket, PcieGroup(socket=socket))
            root_ports[socket] = PcieGroup(socket=socket, gpus=old.gpus + placed["gpus"],
                                           nics=old.nics + placed["nics"])
    nvswitch_links, pairs = _nvlinks(gpus, relation, gpu_spec(model).nvlinks)
    node = NodeSpec(gpu=model, gpus=len(gpus), switches=tuple(groups),
                    root_ports=tuple(root_ports[s] for s in sorted(root_ports)),
                    nic_gbps=(float(nic_gbps),) * len(nics) if nics else (), nvswitch_links=nvswitch_links,
                    nvlink_pairs=pairs, sockets=len(sockets), pcie_gen=gpu_spec(model).pcie_gen)
    return ClusterSpec(name=name, node=node, description=f"imported from nvidia-smi topo -m ({source})",
                       fabric=FabricSpec(gbps=float(nic_gbps)) if nics else None)


def _read_matrix(text: str, source: str) -> tuple[list[str], list[list[str]], dict[str, str]]:
    """Device names, the relation matrix, and each GPU's CPU/NUMA affinity."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines)
                  if line.split()[:1] == ["GPU0"] and line.split()[1:2] != ["X"]), None)
    if start is None:
        raise TopologyError(f"{source}: no nvidia-smi topo -m header (a line starting with GPU0 GPU1 ...)")
    devices = []
    for token in lines[start].split():
        if token in ("CPU", "NUMA", "GPU"):  # "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"
            break
        devices.append(token)
    rows: dict[str, list[str]] = {}
    affinity: dict[str, str] = {}
    for line in lines[start + 1:]:
        tokens = line.split()
        if not tokens or tokens[0] not in devices or tokens[0] in rows:
            if rows:
                break
            continue
        name, cells = tokens[0], tokens[1:len(devices) + 1]
        if len(cells) < len(devices):
            raise TopologyError(f"{source}: row {name} has {len(cells)} entries, expected {len(devices)}")
        for cell in cells:
            if cell != "X" and cell not in _PCIE and not _NV.fullmatch(cell):
                raise TopologyError(f"{source}: row {name}: unknown connection {cell!r} "
                                    "(expected X, NV#, PIX, PXB, PHB, NODE or SYS)")
        if cells[devices.index(name)] != "X":
            raise TopologyError(f"{source}: row {name} does not have X on the diagonal")
        rows[name] = cells
        if _GPU.fullmatch(name) and len(tokens) > len(devices) + 1:
            affinity[name] = " ".join(t for t in tokens[len(devices) + 1:len(devices) + 3] if t != "N/A")
    missing = [d for d in devices if d not in rows]
    if missing:
        raise TopologyError(f"{source}: the matrix has no row for {missing[0]}")
    for i, a in enumerate(devices):  # a link is the same seen from either end
        for j, b in enumerate(devices[:i]):
            if rows[a][j] != rows[b][i]:
                raise TopologyError(f"{source}: the matrix is not symmetric: {a}-{b} is {rows[a][j]} but "
                                    f"{b}-{a} is {rows[b][i]}")
    return devices, [rows[d] for d in devices], {k: v for k, v in affinity.items() if v}


def _model(text: str, gpu_model: str | None, source: str) -> str:
    name = gpu_model
    if name is None:
        name = next((m["name"] for m in map(_MODEL_LINE.match, text.splitlines()) if m), None)
    if name is None:
        raise TopologyError(f"{source}: nvidia-smi topo -m does not name the GPU model; give --gpu-model "
                            "(e.g. 'H100-SXM5-80GB')")
    try:
        return gpu_spec(name).model
    except TopologyError as err:
        raise TopologyError(f"{source}: {err}; give --gpu-model") from None


def _components(devices: list[str], joined) -> list[list[str]]:
    """Groups of devices linked (transitively) by ``joined``, in column order."""
    parent = {d: d for d in devices}

    def root(d: str) -> str:
        while parent[d] != d:
            d = parent[d]
        return d

    for i, a in enumerate(devices):
        for b in devices[i + 1:]:
            if joined(a, b):
                parent[root(b)] = root(a)
    groups: dict[str, list[str]] = {}
    for d in devices:
        groups.setdefault(root(d), []).append(d)
    return list(groups.values())


def _nvlinks(gpus: list[str], relation, model_links: int) -> tuple[int, tuple[tuple[int, int, int], ...]]:
    """``(nvswitch_links, pairs)`` from the NV# entries between GPUs."""
    counts = {}
    for i, a in enumerate(gpus):
        for j in range(i + 1, len(gpus)):
            match = _NV.fullmatch(relation(a, gpus[j]))
            if match:
                counts[i, j] = int(match[1])
    total = [sum(n for pair, n in counts.items() if g in pair) for g in range(len(gpus))]
    if any(t > model_links for t in total):
        return max(counts.values()), ()
    return 0, tuple((i, j, n) for (i, j), n in sorted(counts.items()))
