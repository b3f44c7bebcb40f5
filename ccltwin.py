"""The ``ccltwin`` command: one entry point, one subcommand group per package."""

from __future__ import annotations

import typer

from traces.commands import app as trace_app
from tuner.store_commands import app as store_app
from twin.commands import simulate
from twin.rank_commands import rank
from twin.topology_commands import app as topology_app
from twin.tune_commands import tune
from twin.whatif_commands import whatif

app = typer.Typer(help="A digital twin and live tuner for NCCL collectives.", no_args_is_help=True,
                  pretty_exceptions_enable=False)
app.command()(simulate)
app.command()(rank)
app.command()(whatif)
app.command()(tune)
app.add_typer(topology_app, name="topology", help="List, show and import cluster topologies.")
app.add_typer(trace_app, name="trace", help="Import collective traces and summarise their tasks.")
app.add_typer(store_app, name="store", help="Show the tuning store, import nccl-tests logs, export winners.")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
