"""The ``ccltwin`` command: one entry point, a subcommand or group per job.

This package is the command line and nothing else: each command reads its options, calls the
library (``traces``, ``tuner``, ``twin``, ``dashboards``, ``live``) and prints. It is the only code
that imports typer, and no library code imports it. Bad input (``traces.errors.CcltwinError``, ``OSError``) becomes one
line on stderr and exit status 2 in one place, ``ccltwin.cli``.
"""

from __future__ import annotations

from ccltwin import bench, calibrate, dashboard, predict, rank, simulate, store, topology, trace, tune, whatif
from ccltwin.cli import App

__all__ = ["app", "main"]

app = App(help="A digital twin and live tuner for NCCL collectives.", no_args_is_help=True,
          pretty_exceptions_enable=False)
app.command()(simulate.simulate)
app.command()(rank.rank)
app.command()(whatif.whatif)
app.command()(predict.predict)
app.command()(tune.tune)
app.command()(dashboard.dashboard)
app.command()(bench.bench)
app.command()(calibrate.calibrate)
app.add_typer(topology.app, name="topology", help="List, show and import cluster topologies.")
app.add_typer(trace.app, name="trace", help="Import collective traces and summarise their tasks.")
app.add_typer(store.app, name="store", help="Show the tuning store, import nccl-tests logs, export winners.")


def main() -> None:
    app()
