"""``ccltwin rank``: the warm-start plan of a trace on a cluster.

    ccltwin rank --trace job.json --topology dgx-h100 --nodes 2 -o plan.json [--env nccl.env] [--csv tuner.csv]

Rank r of the trace runs on GPU r of the cluster (as ``ccltwin whatif`` replays it), sized to
the trace unless ``--nodes`` is given. Prints one row per distinct task (best subspace and
resources, predicted best and default times) and the per-process settings; writes the plan
(docs/plan-format.md) and optionally the settings as an environment file and the predicted
winners as the rule file of NCCL's example tuner plugin (``tuner.export``; each rule names the
node and rank count of its communicator as placed here).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ccltwin.nccl_release import DEFAULT_VERSION_TEXT, NcclVersionOption, parse_nccl_version
from ccltwin.profiles import ProfileOption, params_of
from ccltwin.tuners import TunerConfigOption, TunerOption, tuner_overrides
from traces.trace_file import check_writable, load_trace
from tuner.export import write_env, write_tuner_csv
from tuner.plan import PlanEntry, save_plan
from twin.placement import cluster_for, shaped_tasks
from twin.rank import predicted_winners, rank_trace
from twin.topology.summary import tuner_facts, tuner_line

HEADER = (f"{'op':<13} {'size (B)':>12} {'ranks':>5} {'group':<6} {'calls/it':>8}  {'best subspace':<24} "
          f"{'nc':>3} {'nt':>4} {'chunk':>8} {'best (us)':>10}  {'NCCL default':<24} {'default (us)':>12} "
          f"{'speedup':>7}")



def _row(e: PlanEntry) -> str:
    t, b, d = e.task, e.best.config, e.default.config
    return (f"{t.op:<13} {t.nbytes:>12} {t.nranks:>5} {t.group or '-':<6} {e.calls_per_iteration:>8.3g}  "
            f"{b.subspace!s:<24} {b.nchannels:>3} {b.nthreads:>4} {b.chunk_bytes:>8} {e.best.time_us:>10.2f}  "
            f"{d.subspace!s:<24} {e.default.time_us:>12.2f} {e.speedup:>6.2f}x")


def rank(
    trace: Annotated[Path, typer.Option(help="A ccltwin trace file (see 'ccltwin trace import').")],
    topology: Annotated[str, typer.Option(help="Preset name or cluster YAML file.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Where to write the plan (JSON).")],
    nodes: Annotated[int | None, typer.Option(
        help="Nodes of the cluster (default: as many as the trace's world size needs).")] = None,
    gpus_per_node: Annotated[int | None, typer.Option(help="Use the first G GPUs of each node.")] = None,
    nics_per_node: Annotated[int | None, typer.Option(help="Keep the first K NICs of each node.")] = None,
    nic_gbps: Annotated[float | None, typer.Option(help="Line rate of every NIC, Gb/s.")] = None,
    nccl_version: NcclVersionOption = DEFAULT_VERSION_TEXT,
    max_channels: Annotated[int | None, typer.Option(
        help="Sweep channels up to N (default: each communicator's own channel count).")] = None,
    env: Annotated[Path | None, typer.Option(help="Also write the per-process NCCL_* settings here.")] = None,
    csv: Annotated[Path | None, typer.Option(
        help="Also write the predicted best config per task as NCCL's example tuner plugin rules.")] = None,
    profile: ProfileOption = None,
    tuner: TunerOption = None,
    tuner_config: TunerConfigOption = None,
) -> None:
    """Rank NCCL's subspaces for every task of a trace and write the warm-start plan."""
    if max_channels is not None and max_channels < 1:
        raise typer.BadParameter("must be at least 1", param_hint="--max-channels")
    for path, what in ((output, "plan"), (env, "environment file"), (csv, "tuner rules")):
        if path is not None:
            check_writable(path, what)
    version = parse_nccl_version(nccl_version)  # twin.rank notes a release newer than the modelled ones
    params, constants = params_of(profile)
    workload = load_trace(trace)
    cluster = cluster_for(workload, topology, nodes=nodes, gpus_per_node=gpus_per_node,
                          nics_per_node=nics_per_node, nic_gbps=nic_gbps, **tuner_overrides(tuner, tuner_config))
    ranking = rank_trace(workload, cluster, nccl_version=version, max_channels=max_channels, params=params)
    plan, process = ranking.plan, ranking.process
    save_plan(plan, output)
    typer.echo(f"# ccltwin rank: {len(plan.entries)} tasks of {trace} on {plan.cluster}, NCCL {plan.nccl_version}, "
               f"tuner {tuner_line(tuner_facts(cluster))}, {constants}; predicted, not measured")
    typer.echo("# " + HEADER)
    for entry in plan.entries:
        typer.echo("  " + _row(entry))
    for note in ranking.notes:
        typer.echo(f"# note: {note}")
    settings = " ".join(f"{k}={v}" for k, v in process.settings.env().items())
    typer.echo(f"# per-process settings: {settings}")
    typer.echo(f"# predicted communication time per iteration: NCCL default {process.default_us:.1f} us, "
               f"tuned per call {process.per_call_us:.1f} us, with the per-process settings "
               f"{process.tuned_us:.1f} us")
    typer.echo(f"wrote {output}")
    if csv is not None:
        notes = write_tuner_csv(predicted_winners(plan, shaped_tasks(workload, cluster)), csv,
                                title=f"twin predictions for {trace} on {plan.cluster}")
        typer.echo(f"wrote {csv} (load it with NCCL_TUNER_CONFIG_FILE={csv.resolve()})")
        for note in notes:
            typer.echo(f"  note: {note}")
    if env is not None:
        extra = {"NCCL_TUNER_CONFIG_FILE": str(csv.resolve())} if csv is not None else None
        write_env(process.settings, env, extra=extra, title=f"ccltwin rank of {trace} on {plan.cluster}")
        typer.echo(f"wrote {env}")
