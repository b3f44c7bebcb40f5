"""``ccltwin trace``: import traces people already have, and summarize a trace.

ccltwin trace import rank0.json.gz rank1.json.gz -o job.json
ccltwin trace import all_reduce.log --format nccl-tests -o ar.json
ccltwin trace summary job.json [--json]
"""

from __future__ import annotations

import gzip
import json
from dataclasses import asdict
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from traces.chakra import read_chakra
from traces.errors import TraceError
from traces.flight_recorder import read_flight_recorder
from traces.kineto import read_kineto
from traces.nccl_tests import read_nccl_tests
from traces.summary import format_summary, summarize
from traces.trace_file import load_trace, save_trace, write_atomic

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
    try:
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
    except TraceError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1) from None
    events = sum(len(r.events) for r in trace.ranks)
    typer.echo(
        f"wrote {output}: {len(trace.ranks)} rank(s), {events} events, {len(trace.tasks())} distinct tasks"
    )


@app.command()
def summary(
    trace_file: Annotated[Path, typer.Argument(metavar="TRACE", help="A ccltwin trace (.json or .json.gz).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Distinct tasks with calls and bytes per iteration and their share of the traffic."""
    try:
        result = summarize(load_trace(trace_file))
    except (TraceError, OSError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1) from None
    typer.echo(json.dumps(result, indent=1) if as_json else format_summary(result))
