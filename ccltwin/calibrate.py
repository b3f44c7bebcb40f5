"""``ccltwin calibrate``: fit the twin's constants to a cluster's measurements, or show a profile.

    ccltwin calibrate --measurements all_reduce.log --topology dgx-a100 -o a100.json
    ccltwin calibrate --measurements tuning.db --hardware dgx-h100:8x2 --topology dgx-h100 --nodes 2 \\
        --prior h100-type.json -o site.json
    ccltwin calibrate --show a100.json

A fit that does not lower the held-out error is refused: exit 2, nothing written (docs/calibrate.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from traces.errors import CcltwinError
from traces.trace_file import check_writable
from twin.calibrate import Holdout, read_points, show_profile
from twin.calibrate import calibrate as fit_profile
from twin.profile import load_profile
from twin.topology import load_cluster


def calibrate(
    measurements: Annotated[list[Path] | None, typer.Option(
        "--measurements", "-m", help="nccl-tests logs, measurement JSON/JSONL files, Kineto traces or tuning "
                                     "stores (repeat the option).")] = None,
    topology: Annotated[str | None, typer.Option(help="The cluster measured: a preset or a topology YAML.")] = None,
    nodes: Annotated[int | None, typer.Option(min=1, help="Nodes of the cluster (default: the topology's).")] = None,
    hardware: Annotated[str | None, typer.Option(help="Which hardware id of a store to use (and the id of logs "
                                                      "that name none).")] = None,
    gpus_per_process: Annotated[int | None, typer.Option(min=1, help="GPUs one process drove (nccl-tests -g), "
                                                                     "when the log does not say.")] = None,
    prior: Annotated[Path | None, typer.Option(help="A profile to start from (a cluster-type prior).")] = None,
    holdout: Annotated[str, typer.Option(help="Held-out evaluation: size (k-fold over sizes) or gpus "
                                              "(leave one GPU count out).")] = "size",
    folds: Annotated[int, typer.Option(min=2, help="Folds of the k-fold over sizes.")] = 3,
    residual: Annotated[bool, typer.Option(help="Keep a residual model on top of the physics where it lowers "
                                                "held-out error.")] = True,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write the profile here.")] = None,
    show: Annotated[Path | None, typer.Option(help="Print what a profile was fitted on and exit.")] = None,
) -> None:
    """Calibrate the twin from measurements (docs/calibrate.md)."""
    if show is not None:
        typer.echo(show_profile(load_profile(show), str(show)))
        return
    if not measurements or topology is None:
        raise CcltwinError("calibrate needs --measurements and --topology (or --show PROFILE)")
    if output is not None:
        check_writable(output, "profile")
    cluster = load_cluster(topology, nodes=nodes)
    points = read_points(measurements, hardware=hardware, gpus_per_process=gpus_per_process)
    result = fit_profile(points, cluster, prior=None if prior is None else load_profile(prior),
                         holdout=Holdout(by=holdout, folds=folds), residual=residual,
                         sources=[str(m) for m in measurements])
    typer.echo(result.report())
    if output is not None:
        result.save(output)  # CalibrationRefused (exit 2) when the fit did not help: nothing written
        typer.echo(f"wrote {output}", err=True)
    elif result.refused:
        raise CcltwinError(f"fit refused: {result.refused}")
