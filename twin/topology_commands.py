"""``ccltwin topology``: list presets, show a cluster, import a real machine's description.

    ccltwin topology list
    ccltwin topology show dgx-h100 --nodes 4 --json
    ccltwin topology import topo.txt --gpu-model H100 --nic-gbps 400 -o mynode.yaml

Errors go to stderr with exit code 2.
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from traces.errors import TraceError
from traces.trace_file import check_writable, write_atomic
from twin.hardware import TopologyError
from twin.topology import build_cluster, dump_spec, list_presets, load_cluster
from twin.topology.loader import read_source
from twin.topology.nccl_xml import parse_nccl_topo_xml
from twin.topology.nvidia_smi import parse_nvidia_smi_topo
from twin.topology.summary import summarize

app = typer.Typer(help="Cluster topologies: presets, YAML files, importers.", no_args_is_help=True)


class Format(StrEnum):
    AUTO = "auto"
    NVIDIA_SMI = "nvidia-smi"
    NCCL_XML = "nccl-xml"


def _fail(err: Exception) -> typer.Exit:
    typer.echo(f"error: {err}", err=True)
    return typer.Exit(2)


@app.command("list")
def list_() -> None:
    """The shipped presets."""
    presets = list_presets()
    width = max(len(name) for name, _ in presets)
    for name, description in presets:
        typer.echo(f"{name:<{width}}  {description}")


@app.command()
def show(
    cluster: Annotated[str, typer.Argument(help="A preset name or a YAML file.")],
    nodes: Annotated[int | None, typer.Option(help="Number of nodes.")] = None,
    gpus_per_node: Annotated[int | None, typer.Option(help="Keep the first G GPUs of each node.")] = None,
    nics_per_node: Annotated[int | None, typer.Option(help="Keep the first K NICs of each node.")] = None,
    nic_gbps: Annotated[float | None, typer.Option(help="Every NIC's and the fabric's rate, Gb/s.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Summarise a cluster: GPUs, NVLink, PCIe, NICs and their GPU affinity, fabric."""
    try:
        facts = summarize(load_cluster(cluster, nodes=nodes, gpus_per_node=gpus_per_node,
                                       nics_per_node=nics_per_node, nic_gbps=nic_gbps))
    except TopologyError as err:
        raise _fail(err) from None
    typer.echo(json.dumps(facts, indent=2) if as_json else _text(facts))


@app.command("import")
def import_(
    file: Annotated[Path, typer.Argument(help="nvidia-smi topo -m output or an NCCL topology XML file.")],
    format: Annotated[Format, typer.Option("--format", help="Input format.")] = Format.AUTO,
    gpu_model: Annotated[str | None, typer.Option(help="GPU model if the file has none.")] = None,
    nic_gbps: Annotated[float | None, typer.Option(help="NIC line rate, Gb/s, if the file has none.")] = None,
    nvswitch: Annotated[bool, typer.Option(help="XML without <nvlink>: GPUs sit on an NVSwitch.")] = False,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="YAML file (else stdout).")] = None,
) -> None:
    """Turn a real machine's description into the cluster YAML format."""
    try:
        if nic_gbps is not None and nic_gbps <= 0:
            raise TopologyError(f"--nic-gbps {nic_gbps:g}: a NIC's line rate must be positive")
        if output is not None:
            check_writable(output, "cluster description")
        text, source, name = read_source(file, "topology")
        if format is Format.AUTO:
            format = Format.NCCL_XML if text.lstrip().startswith("<") else Format.NVIDIA_SMI
        if format is Format.NCCL_XML:
            spec = parse_nccl_topo_xml(text, gpu_model=gpu_model, nic_gbps=nic_gbps, nvswitch=nvswitch,
                                       source=source, name=name)
        else:
            spec = parse_nvidia_smi_topo(text, gpu_model=gpu_model, nic_gbps=nic_gbps, source=source,
                                         name=name)
        build_cluster(spec)  # refuse to write a description that does not load
        yaml_text = dump_spec(spec)
        if output is None:
            typer.echo(yaml_text, nl=False)
        else:
            write_atomic(output, [yaml_text])
            typer.echo(f"wrote {output}", err=True)
    except (TopologyError, TraceError, OSError) as err:
        raise _fail(err) from None


def _text(facts: dict) -> str:
    nvlink = ("none" if not facts["nvlinks_per_gpu"] else
              f"{'NVSwitch' if facts['nvswitch'] else 'direct'}, {facts['nvlinks_per_gpu']} links, "
              f"{facts['nvlink_gbps_per_gpu']:g} GB/s per GPU, NVLink peers: {facts['nvlink_peers_per_gpu']}")
    rates = sorted(set(facts["nic_gbps"]))
    affinity = " ".join(f"{g}→{n}" for g, n in facts["gpu_nic_affinity"].items()) or "-"
    fabric = facts["fabric"]
    lines = [
        f"{facts['name']}: {facts['description']}" if facts["description"] else facts["name"],
        f"  nodes      {facts['nodes']}",
        f"  GPUs       {facts['nodes'] * facts['gpus_per_node']} × {facts['gpu_model']} "
        f"({facts['gpus_per_node']} per node)",
        f"  NVLink     {nvlink}",
        f"  PCIe       {facts['gpu_pcie_gbps']:g} GB/s per GPU link, "
        f"{facts['pcie_switches_per_node']} switches, {facts['sockets_per_node']} × {facts['cpu_vendor']} CPU"
        + (f" ({facts['socket_link_gbps']:g} GB/s between sockets)" if facts["socket_link_gbps"] else ""),
        f"  NICs       {facts['nics_per_node']} per node"
        + (f" at {'/'.join(f'{r:g}' for r in rates)} Gb/s" if rates else ""),
        f"  GPU→NIC    {affinity}",
        "  fabric     " + (f"{fabric['leaves']} leaves, {fabric['spines']} spines, "
                           f"{fabric['link_gbps']:g} Gb/s links" if fabric else "none"),
        f"  graph      {facts['graph']['nodes']} nodes, {facts['graph']['edges']} edges",
    ]
    return "\n".join(lines)
