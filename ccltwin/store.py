"""``ccltwin store``: look into a tuning store, load nccl-tests logs into it, export its winners.

    ccltwin store show tuning.db [--hardware h100-a] [--history] [--json]
    ccltwin store import tuning.db all_reduce.log [--hardware h100-a]
    ccltwin store export tuning.db --csv nccl_tuner.conf --env nccl.env [--hardware h100-a]
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from ccltwin.cli import App
from traces.errors import CcltwinError
from traces.trace_file import check_writable
from tuner.export import NO_WINNERS, settings_from_winners, store_winners, write_env, write_tuner_csv
from tuner.measurement import Measurement, read_nccl_tests_measurements
from tuner.store import Store

app = App(help="The SQLite tuning store: show, import, export.", no_args_is_help=True)

StorePath = Annotated[Path, typer.Argument(help="The store file (SQLite).")]
Hardware = Annotated[str | None, typer.Option(help="Only this hardware id (needed when the store has several).")]
FullCheck = Annotated[bool, typer.Option(
    "--full-check", help="SQLite's full integrity check before reading, however large the store "
                         "(by default stores over 16 MiB get its quick check).")]


def _row(m: Measurement, width: int) -> str:
    t, c = m.task, m.config
    if c is None:
        forced = " ".join(f"{k}={v}" for k, v in m.env.items() if k in ("NCCL_ALGO", "NCCL_PROTO"))
        config = f"nccl default ({forced})" if forced else "nccl default"
    else:
        config = f"{c.subspace} nc={c.nchannels} nt={c.nthreads} chunk={c.chunk_bytes}"
    return (f"{m.hardware:<{width}} {t.op:<13} {t.nbytes:>12} {t.nranks:>5} {t.dtype:<8} {t.group or '-':<6} "
            f"{m.comm or '-':<8} {m.time_us:>10.2f}  {m.source:<10} {config}")


@app.command()
def show(
    store: StorePath,
    hardware: Hardware = None,
    history: Annotated[bool, typer.Option("--history", help="Every measurement, not only the winners.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array of measurements.")] = False,
    full_check: FullCheck = False,
) -> None:
    """Print the current best config of every task (or the whole history)."""
    with Store(store, create=False, full_check=full_check or None) as db:
        rows = db.history(hardware=hardware) if history else db.bests(hardware=hardware)
        total, known = db.count(), db.hardware_ids()
    if hardware is not None and hardware not in known:
        typer.echo(f"note: no measurement of hardware {hardware!r}; the store has {', '.join(map(repr, known))}",
                   err=True)
    if as_json:
        typer.echo(json.dumps([m.to_dict() for m in rows], indent=1))
        return
    of = f" of {hardware!r}" if hardware is not None else ""
    what = f"{len(rows)} measurements{of}" if history else f"{len(rows)} winners{of} (measured, with a config)"
    typer.echo(f"# {store}: {total} measurements in all; {what}")
    width = max([len("hardware"), *(len(m.hardware) for m in rows)])
    typer.echo(f"# {'hardware':<{width - 2}} {'op':<13} {'size (B)':>12} {'ranks':>5} {'dtype':<8} {'group':<6} "
               f"{'comm':<8} {'time (us)':>10}  {'source':<10} config")
    for m in rows:
        typer.echo(_row(m, width))
    if not history and not rows and total:
        typer.echo(f"# no winners: {NO_WINNERS}")


@app.command("import")
def import_(
    store: StorePath,
    logs: Annotated[list[Path], typer.Argument(help="nccl-tests result files (text, JSON, CSV, markdown).")],
    hardware: Annotated[str | None, typer.Option(help="Hardware id (default: each log's '# HARDWARE:' line).")] = None,
) -> None:
    """Add every row of nccl-tests logs to the store's history (NCCL's default config); rows already
    there (the same log imported again) are skipped."""
    measurements = [m for log in logs for m in read_nccl_tests_measurements(log, hardware=hardware)]
    with Store(store) as db:
        new = db.add_unseen(measurements)
    skipped = len(measurements) - len(new)
    typer.echo(f"{store}: added {len(new)} measurements from {len(logs)} log(s)"
               + (f"; skipped {skipped} already in the store or given twice" if skipped else ""))


@app.command()
def export(
    store: StorePath,
    csv: Annotated[Path | None, typer.Option(help="Write NCCL's example tuner plugin rules here.")] = None,
    env: Annotated[Path | None, typer.Option(help="Write the per-process NCCL_* variables here.")] = None,
    hardware: Hardware = None,
    exact_sizes: Annotated[bool, typer.Option(
        "--exact-sizes", help="One rule per measured size instead of covering every size.")] = False,
    full_check: FullCheck = False,
) -> None:
    """Export the winners: the example tuner plugin's CSV and/or an environment file."""
    if csv is None and env is None:
        raise CcltwinError("nothing to do: give --csv and/or --env")
    for path, what in ((csv, "tuner rules"), (env, "environment file")):
        if path is not None:
            check_writable(path, what)
    with Store(store, create=False, full_check=full_check or None) as db:
        hardware, winners = store_winners(db, hardware)
    title = f"{len(winners)} winners of {store} on {hardware}"
    if csv is not None:
        notes = write_tuner_csv(winners, csv, cover_all_sizes=not exact_sizes, title=title)
        typer.echo(f"wrote {csv} (load it with NCCL_TUNER_CONFIG_FILE={csv.resolve()})")
        for note in notes:
            typer.echo(f"  note: {note}")
    if env is not None:
        extra = {"NCCL_TUNER_CONFIG_FILE": str(csv.resolve())} if csv is not None else None
        write_env(settings_from_winners(winners), env, extra=extra, title=title)
        typer.echo(f"wrote {env} (bash: set -a; . {env}; set +a)")
