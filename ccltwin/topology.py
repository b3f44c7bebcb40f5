"""``ccltwin topology``: list presets, show a cluster, import a real machine's description.

    ccltwin topology list
    ccltwin topology show dgx-h100 --nodes 4 --json
    ccltwin topology import topo.txt --gpu-model H100 --nic-gbps 400 -o mynode.yaml
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from ccltwin.cli import App
from ccltwin.tuners import TunerConfigOption, TunerOption, tuner_overrides
from traces.trace_file import check_writable, write_atomic
from twin.topology import dump_spec, list_presets, load_cluster
from twin.topology.importer import TopologyFormat, import_spec
from twin.topology.summary import format_preset, format_summary, preset_facts, summarize

app = App(help="Cluster topologies: presets, YAML files, importers.", no_args_is_help=True)


@app.command("list")
def list_(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """The shipped presets, each with its GPU's data-sheet figures, its NICs and fabric kind, and sources."""
    facts = [preset_facts(name) for name, _ in list_presets()]
    typer.echo(json.dumps(facts, indent=2) if as_json else "\n".join(format_preset(f) for f in facts))


@app.command()
def show(
    cluster: Annotated[str, typer.Argument(help="A preset name or a YAML file.")],
    nodes: Annotated[int | None, typer.Option(help="Number of nodes.")] = None,
    gpus_per_node: Annotated[int | None, typer.Option(help="Keep the first G GPUs of each node.")] = None,
    nics_per_node: Annotated[int | None, typer.Option(help="Keep the first K NICs of each node.")] = None,
    nic_gbps: Annotated[float | None, typer.Option(help="Every NIC's and the fabric's rate, Gb/s.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    tuner: TunerOption = None,
    tuner_config: TunerConfigOption = None,
) -> None:
    """Summarise a cluster: GPUs, NVLink, PCIe, NICs and their GPU affinity, NCCL's tuner, fabric."""
    facts = summarize(load_cluster(cluster, nodes=nodes, gpus_per_node=gpus_per_node, nics_per_node=nics_per_node,
                                   nic_gbps=nic_gbps, **tuner_overrides(tuner, tuner_config)))
    typer.echo(json.dumps(facts, indent=2) if as_json else format_summary(facts))


@app.command("import")
def import_(
    file: Annotated[Path, typer.Argument(help="nvidia-smi topo -m output or an NCCL topology XML file.")],
    format: Annotated[TopologyFormat, typer.Option("--format", help="Input format.")] = TopologyFormat.AUTO,
    gpu_model: Annotated[str | None, typer.Option(help="GPU model if the file has none.")] = None,
    nic_gbps: Annotated[float | None, typer.Option(help="NIC line rate, Gb/s, if the file has none.")] = None,
    nvswitch: Annotated[bool, typer.Option(help="XML without <nvlink>: GPUs sit on an NVSwitch.")] = False,
    fabric: Annotated[str | None, typer.Option(help="What the NICs speak: infiniband (default), roce, tcp, "
                                               "gpudirect-tcpx, gpudirect-tcpxo, efa, slingshot.")] = None,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="YAML file (else stdout).")] = None,
) -> None:
    """Turn a real machine's description into the cluster YAML format."""
    if output is not None:
        check_writable(output, "cluster description")
    yaml_text = dump_spec(import_spec(file, format, gpu_model=gpu_model, nic_gbps=nic_gbps, nvswitch=nvswitch,
                                      fabric=fabric))
    if output is None:
        typer.echo(yaml_text, nl=False)
    else:
        write_atomic(output, [yaml_text])
        typer.echo(f"wrote {output}", err=True)

