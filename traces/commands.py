"""``ccltwin trace``: import traces people already have, and summarize a trace.

ccltwin trace import rank0.json.gz rank1.json.gz -o job.json
ccltwin trace import all_reduce.log --format nccl-tests -o ar.json
ccltwin trace summary job.json [--json]
ccltwin trace capture -o job.json --nproc-per-node 2 [--iterations N] [--warmup W] train.py [script args]
ccltwin trace generate --preset autoccl-phi2 -o phi2.json.gz [--iterations N] [--set micro_batches=4]
ccltwin trace generate --model llama-3.1-8b --plan plan.yaml -o job.json
ccltwin trace presets
"""

from __future__ import annotations

import gzip
import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
import yaml

from traces.capture.launch import torchrun_command
from traces.chakra import read_chakra
from traces.errors import TraceError
from traces.flight_recorder import read_flight_recorder
from traces.generate import generate as generate_trace
from traces.generate import list_models, list_presets, workload
from traces.kineto import read_kineto
from traces.nccl_tests import read_nccl_tests
from traces.summary import format_summary, summarize
from traces.trace_file import check_writable, load_trace, save_trace, write_atomic

__all__ = ["app", "detect_format"]

app = typer.Typer(help="Import, inspect and summarize collective traces.", no_args_is_help=True)


class Format(StrEnum):
    AUTO = "auto"
    KINETO = "kineto"
    CHAKRA = "chakra"
    FLIGHT_RECORDER = "flight-recorder"
    NCCL_TESTS = "nccl-tests"


_HEAD = 1 << 16
# (format, JSON keys that identify it), tried in order on the first 64 KiB of a JSON file
_JSON_SIGNS = (
    (Format.KINETO, ('"traceEvents"',)),
    (Format.CHAKRA, ('"nodes"', '"schema"')),
    (Format.FLIGHT_RECORDER, ('"entries"', '"pg_config"')),
    (Format.NCCL_TESTS, ('"results"',)),
)


@contextmanager
def errors_exit(*kinds: type[Exception]) -> Iterator[None]:
    """Turn the errors a user can cause (``TraceError`` unless told) into ``error: …`` and exit status 2."""
    caught = kinds or (TraceError,)
    try:
        yield
    except caught as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None


def _described(trace) -> str:
    events = sum(len(r.events) for r in trace.ranks)
    return f"{len(trace.ranks)} rank(s) in the trace, {events} events, {len(trace.tasks())} distinct tasks"


def detect_format(path: str) -> Format:
    """Tell the format of a file from its first 64 KiB."""
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rb") as file:
                head = file.read(_HEAD).decode("utf-8", "replace")
        else:
            with open(path, "rb") as file:
                head = file.read(_HEAD).decode("utf-8", "replace")
    except (OSError, EOFError) as err:
        raise TraceError(f"cannot read ({err})", path) from None
    if not head.lstrip().startswith("{"):
        return Format.NCCL_TESTS
    for fmt, signs in _JSON_SIGNS:
        if all(sign in head for sign in signs):
            return fmt
    raise TraceError("cannot tell the format of this JSON file: give --format", path)


def _nccl_tests_document(paths: list[str]) -> dict:
    logs = []
    for path in paths:
        log = read_nccl_tests(path)
        logs.append({**asdict(log), "op": log.op.value if log.op else None})
    return {"format": "ccltwin-nccl-tests", "version": 1, "logs": logs}


@app.command("import")
def import_(
    files: Annotated[list[Path], typer.Argument(help="One file per rank (or several nccl-tests logs).")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Where to write; .gz compresses.")],
    fmt: Annotated[
        Format, typer.Option("--format", help="Input format; auto tells from the content.")
    ] = Format.AUTO,
    rank: Annotated[
        list[int] | None,
        typer.Option("--rank", help="Rank of each file, in order (execution traces, flight recorder)."),
    ] = None,
) -> None:
    """Import Kineto, execution-trace, flight-recorder or nccl-tests files; write nothing on error."""
    paths = [str(f) for f in files]
    with errors_exit():
        check_writable(output, "trace")
        formats = {detect_format(p) if fmt is Format.AUTO else fmt for p in paths}
        if len(formats) > 1:
            raise TraceError(f"the files are of different formats ({', '.join(sorted(formats))})")
        chosen = formats.pop()
        if rank and chosen in (Format.KINETO, Format.NCCL_TESTS):
            raise TraceError(f"--rank does not apply to {chosen} files")
        if chosen is Format.NCCL_TESTS:
            document = _nccl_tests_document(paths)
            write_atomic(output, [json.dumps(document, indent=1), "\n"])
            typer.echo(f"wrote {output}: {sum(len(log['rows']) for log in document['logs'])} rows")
            return
        readers = {
            Format.KINETO: read_kineto,
            Format.CHAKRA: read_chakra,
            Format.FLIGHT_RECORDER: read_flight_recorder,
        }
        trace = readers[chosen](paths) if chosen is Format.KINETO else readers[chosen](paths, rank or None)
        save_trace(trace, output)
    typer.echo(f"wrote {output}: {_described(trace)}")


@app.command()
def summary(
    trace_file: Annotated[Path, typer.Argument(metavar="TRACE", help="A ccltwin trace (.json or .json.gz).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Distinct tasks with calls and bytes per iteration and their share of the traffic."""
    with errors_exit(TraceError, OSError):
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
    with errors_exit():
        check_writable(output, "trace")
        if not script.is_file():
            raise TraceError("no such script", script)
    command = torchrun_command(
        script, ctx.args, output, nproc_per_node=nproc_per_node, iterations=iterations, warmup=warmup
    )
    code = subprocess.run(command, check=False).returncode
    if code:
        raise typer.Exit(code)


def _plan_overrides(settings: list[str]) -> dict:
    """``["micro_batches=4", "zero=1"]`` → plan fields, values read as YAML scalars."""
    overrides = {}
    for setting in settings:
        key, sep, value = setting.partition("=")
        if not sep or not key.strip():
            raise TraceError(f"--set takes FIELD=VALUE, got {setting!r}")
        overrides[key.strip()] = yaml.safe_load(value)
    return overrides


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
    with errors_exit():
        check_writable(output, "trace")
        work = workload(preset, model=model, parallelism=None if plan is None else str(plan),
                        overrides=_plan_overrides(settings or []))
        trace = generate_trace(work, iterations, "all" if all_ranks else "representative")
        save_trace(trace, output)
    typer.echo(f"wrote {output}: {work.name}, world size {trace.world_size}, {_described(trace)}")


@app.command()
def presets() -> None:
    """List the bundled workloads, models and example traces."""
    from traces.examples import DEFAULT
    from traces.examples import names as example_names

    for name in list_presets():
        typer.echo(f"{name:20} {workload(name).description}")
    typer.echo(f"models: {', '.join(list_models())}")
    typer.echo(f"example traces (traces/examples, default {DEFAULT}): {', '.join(example_names())}")
