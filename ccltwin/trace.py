"""``ccltwin trace``: import traces people already have, and summarize a trace.

ccltwin trace import rank0.json.gz rank1.json.gz -o job.json
ccltwin trace import profiles/ -o job.json          (every rank's file in a directory)
ccltwin trace import all_reduce.log --format nccl-tests -o ar.json
ccltwin trace summary job.json [--json]
ccltwin trace capture -o job.json --nproc-per-node 2 [--iterations N] [--warmup W] train.py [script args]
ccltwin trace generate --preset autoccl-phi2 -o phi2.json.gz [--iterations N] [--set micro_batches=4]
ccltwin trace generate --model llama-3.1-8b --plan plan.yaml -o job.json
ccltwin trace presets
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Annotated

import typer

from ccltwin.cli import App
from traces.capture.launch import torchrun_command
from traces.errors import TraceError
from traces.formats import TraceFormat, expand_paths, files_format, read_files
from traces.generate import generate as generate_trace
from traces.generate import list_models, list_presets, workload
from traces.generate.workload import parse_overrides
from traces.summary import describe, format_summary, summarize
from traces.trace_file import check_writable, load_trace, save_trace

app = App(help="Import, inspect and summarize collective traces.", no_args_is_help=True)


@app.command("import")
def import_(
    files: Annotated[
        list[Path], typer.Argument(help="One file per rank, or directories of them (or nccl-tests logs).")
    ],
    output: Annotated[Path, typer.Option("-o", "--output", help="Where to write; .gz compresses.")],
    fmt: Annotated[
        TraceFormat, typer.Option("--format", help="Input format; auto tells from the content.")
    ] = TraceFormat.AUTO,
    rank: Annotated[
        list[int] | None,
        typer.Option("--rank", help="Rank of each file, in order (execution traces, flight recorder)."),
    ] = None,
) -> None:
    """Import Kineto, execution-trace, flight-recorder or nccl-tests files; write nothing on error.

    An nccl-tests run becomes a trace of its measured sizes, that summary, whatif and predict take.
    """
    paths = expand_paths([str(f) for f in files])
    check_writable(output, "trace")
    trace = read_files(paths, files_format(paths, fmt, rank), rank)
    save_trace(trace, output)
    typer.echo(f"wrote {output}: {describe(trace)}")


@app.command()
def summary(
    trace_file: Annotated[Path, typer.Argument(metavar="TRACE", help="A ccltwin trace (.json or .json.gz).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Distinct tasks with calls and bytes per iteration and their share of the traffic."""
    result = summarize(load_trace(trace_file))
    typer.echo(json.dumps(result, indent=1) if as_json else format_summary(result))


_SCRIPT_ARGS = {"allow_extra_args": True, "ignore_unknown_options": True, "allow_interspersed_args": False}


@app.command(context_settings=_SCRIPT_ARGS)
def capture(
    ctx: typer.Context,
    script: Annotated[Path, typer.Argument(help="The training script; its own arguments follow it.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="The trace to write; .gz compresses.")],
    nproc_per_node: Annotated[int, typer.Option("--nproc-per-node", min=1, help="Processes (ranks) to start.")] = 1,
    iterations: Annotated[
        int | None, typer.Option("--iterations", min=1, help="Iterations to record (default: the whole run).")
    ] = None,
    warmup: Annotated[int, typer.Option("--warmup", min=0, help="Iterations to run unrecorded first.")] = 0,
) -> None:
    """Run a script under torchrun on this host and capture every collective it issues.

    An iteration ends at each optimizer step. For several hosts, run
    `torchrun ... -m traces.capture -o job.json train.py` yourself.
    """
    check_writable(output, "trace")
    if not script.is_file():
        raise TraceError("no such script", script)
    command = torchrun_command(
        script, ctx.args, output, nproc_per_node=nproc_per_node, iterations=iterations, warmup=warmup
    )
    code = subprocess.run(command, check=False).returncode
    if code:
        raise typer.Exit(code)


@app.command()
def generate(
    output: Annotated[Path, typer.Option("-o", "--output", help="Where to write; .gz compresses.")],
    preset: Annotated[
        str | None, typer.Option("--preset", help="A bundled workload (see `ccltwin trace presets`) or a file.")
    ] = None,
    model: Annotated[str | None, typer.Option("--model", help="A bundled model name or a model file.")] = None,
    plan: Annotated[Path | None, typer.Option("--plan", help="A plan file (YAML or JSON).")] = None,
    iterations: Annotated[int, typer.Option("--iterations", min=1, help="Training iterations.")] = 1,
    all_ranks: Annotated[
        bool, typer.Option("--all-ranks", help="Every rank, not one per pipeline stage (small jobs only).")
    ] = False,
    settings: Annotated[
        list[str] | None, typer.Option("--set", metavar="FIELD=VALUE", help="Change a plan field (repeatable).")
    ] = None,
) -> None:
    """Generate a training trace from a model and a parallelism plan; write nothing on error."""
    check_writable(output, "trace")
    work = workload(preset, model=model, parallelism=None if plan is None else str(plan),
                    overrides=parse_overrides(settings or []))
    trace = generate_trace(work, iterations, "all" if all_ranks else "representative")
    save_trace(trace, output)
    typer.echo(f"wrote {output}: {work.name}, world size {trace.world_size}, {describe(trace)}")


@app.command()
def presets() -> None:
    """List the bundled workloads, models and example traces."""
    from traces.examples import DEFAULT
    from traces.examples import names as example_names

    for name in list_presets():
        typer.echo(f"{name:20} {workload(name).description}")
    typer.echo(f"models: {', '.join(list_models())}")
    typer.echo(f"example traces (traces/examples, default {DEFAULT}): {', '.join(example_names())}")
