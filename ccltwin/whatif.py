"""``ccltwin whatif``: a training trace on candidate clusters, NCCL's default vs tuned, with cost.

    ccltwin whatif                                        # bundled example trace on two presets
    ccltwin whatif --trace job.json --topology dgx-h100 --topology mybox.yaml --nodes 4 --json
    ccltwin whatif -o report.md                           # also write a Markdown report
    ccltwin whatif --html whatif-report.html              # and/or the figures as one offline HTML file

The clusters are replayed in parallel (``--engine local``: processes here; ``ray``: on Ray) with a
progress bar on stderr for long runs (none under ``--json``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from ccltwin.nccl_release import DEFAULT_VERSION_TEXT, NcclVersionOption, nccl_version_of
from ccltwin.profiles import ProfileOption, params_of
from ccltwin.tuners import TunerConfigOption, TunerOption, tuner_overrides
from traces.errors import CcltwinError
from traces.examples import default_trace
from traces.trace_file import check_writable, load_trace, write_atomic
from twin.whatif import Candidate
from twin.whatif_format import format_markdown, format_text

DEFAULT_TOPOLOGIES = ("dgx-h100", "dgx-a100")
ENGINES = ("local", "ray")


def _per_topology(values: list | None, count: int, option: str) -> list:
    if not values:
        return [None] * count
    if len(values) == 1:
        return values * count
    if len(values) != count:
        raise CcltwinError(f"give {option} once (for every topology) or once per --topology ({count}), "
                           f"not {len(values)} times")
    return list(values)


def whatif(
    trace: Annotated[Path | None, typer.Option(help="A ccltwin trace (default: the bundled example).")] = None,
    topology: Annotated[list[str] | None, typer.Option(
        help="Candidate cluster: preset or YAML file; repeat for several (default: dgx-h100 and dgx-a100).")] = None,
    nodes: Annotated[list[int] | None, typer.Option(
        help="Nodes of each cluster, once for all or once per --topology (default: as many as the trace needs).")
    ] = None,
    price_per_gpu_hour: Annotated[list[float] | None, typer.Option(
        help="USD per GPU-hour, once for all or once per --topology (default: a list price by GPU model).")] = None,
    tuned: Annotated[bool, typer.Option(help="Also find and replay the best configuration per task.")] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Also write the report: .md or .json.")
                      ] = None,
    html: Annotated[Path | None, typer.Option(help="Also write the report and its figures as one offline HTML file.")
                    ] = None,
    engine: Annotated[str, typer.Option(help="Where the clusters are replayed: local (processes) or ray.")
                      ] = "local",
    profile: ProfileOption = None,
    nccl_version: NcclVersionOption = DEFAULT_VERSION_TEXT,
    tuner: TunerOption = None,
    tuner_config: TunerConfigOption = None,
) -> None:
    """Replay a training trace on candidate clusters: iteration time, communication share, per-task
    bus bandwidth and cost, with NCCL's default configuration and with the best one found."""
    if output is not None and output.suffix not in (".md", ".json"):
        raise CcltwinError(f"{output}: the report is written as Markdown (.md) or JSON (.json)")
    topologies = list(topology or DEFAULT_TOPOLOGIES)
    node_counts = _per_topology(nodes, len(topologies), "--nodes")
    prices = _per_topology(price_per_gpu_hour, len(topologies), "--price-per-gpu-hour")
    if any(n is not None and n < 1 for n in node_counts):
        raise CcltwinError("--nodes must be at least 1")
    path, name = (trace, trace.name.removesuffix(".gz").removesuffix(".json")) if trace else default_trace()
    if engine not in ENGINES:
        raise CcltwinError(f"--engine {engine}: expected one of {', '.join(ENGINES)}")
    if output is not None:
        check_writable(output, "report")
    if html is not None:
        check_writable(html, "HTML report")
    version = nccl_version_of(nccl_version)
    params, constants = params_of(profile)
    workload = load_trace(path)
    # dashboards (plotly, dash) load only for the commands that use them: every other command starts faster.
    from dashboards.progress import progress_bar
    from dashboards.report import write_html
    from dashboards.studies import whatif_report

    overrides = tuner_overrides(tuner, tuner_config)
    candidates = [Candidate(t, n, p, version, **overrides) for t, n, p in zip(topologies, node_counts, prices,
                                                                                strict=True)]
    with progress_bar("replaying clusters", quiet=as_json) as update:
        report = whatif_report(workload, candidates, tuned=tuned, name=name, engine=engine, params=params,
                               on_progress=update)
    document = json.dumps(report.as_dict(), indent=1)
    typer.echo(document if as_json else format_text(report, constants=constants), nl=as_json)
    if output is not None:
        text = document + "\n" if output.suffix == ".json" else format_markdown(report, constants=constants)
        write_atomic(output, [text])
        typer.echo(f"wrote {output}", err=True)
    if html is not None:
        write_html(report, html, constants=constants)
        typer.echo(f"wrote {html} (open it in a browser; it needs no network)", err=True)
