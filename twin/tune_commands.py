"""``ccltwin tune``: run a search against an executor and print the trajectory and winner per task.

    ccltwin tune --executor twin --topology a40-pcie --op allreduce --nbytes 632MB --nranks 4 --gpus-per-node 1
    ccltwin tune --executor twin --topology dgx-h100 --nodes 4 --trace phi2.json.gz --search ours \\
        --warm-start plan.json --store tuning.db --json

With ``--store`` every trial is recorded (source ``twin``), and a rerun replays the stored trials
of the same search and seed instead of measuring them again, so tuning resumes where it stopped.
Errors go to stderr with exit code 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from traces.errors import TraceError
from traces.schema import Trace
from traces.task import Task, parse_op
from traces.trace_file import load_trace
from traces.units import parse_size
from tuner.codec import config_to_dict, task_to_dict
from tuner.executor import space_for
from tuner.measurement import Measurement
from tuner.plan import Plan, PlanError, load_plan
from tuner.search import SEARCHES, Search, make_search
from tuner.search.base import fastest_share_mean
from tuner.space import ConfigError
from tuner.store import Store, StoreError
from twin.executor import TwinExecutor
from twin.replay.comms import cluster_for, shaped_tasks
from twin.topology import Cluster, TopologyError, load_cluster

DEFAULT_REPEATS = 3
"""Measurements of NCCL's default behind ``default_time_us`` when the search did not take them."""


def fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def trace_tasks(trace: Trace, cluster: Cluster) -> list[tuple[Task, Task, float]]:
    """(task as the trace names it, task with a ``GxN`` group shape, calls per iteration).

    Groups are placed on ``cluster`` as ``ccltwin whatif`` and ``ccltwin rank`` place them
    (``shaped_tasks``).  Tasks that end up with the same shape and size are one task.
    """
    calls = trace.tasks()
    merged: dict[Task, tuple[Task, float]] = {}
    for task, shaped in shaped_tasks(trace, cluster).items():
        if shaped not in merged or calls[task] > merged[shaped][1]:  # groups of one shape run side by side
            merged[shaped] = (task, calls[task])
    return [(named, shaped, n) for shaped, (named, n) in merged.items()]


def replay(search: Search, stored: list[Measurement], executor: TwinExecutor) -> int:
    """Feed ``search`` the stored measurements it would propose next, in order; how many."""
    n = 0
    for m in stored:
        config = search.propose()
        if config is None:
            break
        if m.config == config:
            search.observe(config, m.time_us)
            executor.resumed(m.task, config)
            n += 1
    return n


def _no_entry(plan: Plan, task: Task) -> str:
    """Why ``plan`` gives ``task`` no entry: none of its op, size and ranks, or several."""
    same = len(plan.like(task))
    if same > 1:
        return f"the plan has {same} entries of this op, size and rank count and none of group {task.group}"
    return "the plan has no entry for it"


def tune_task(executor: TwinExecutor, named: Task, task: Task, *, search_name: str, seed: int,
              plan: Plan | None, store: Store | None, max_trials: int | None, echo) -> dict:
    """Tune one task; prints its trajectory through ``echo`` and returns its JSON object."""
    default = executor.default_config(task)
    space = space_for(executor, task)
    entry = (plan.find(named) or plan.find(task)) if plan is not None else None
    warm = entry.warm_start() if entry is not None and search_name in ("autoccl", "ours") else None
    search = make_search(search_name, space, seed=seed, warm_start=warm,
                         default=default if search_name in ("autoccl", "ours", "default") else None,
                         **({"max_trials": max_trials} if max_trials else {}))
    replayed = 0
    if store is not None:
        replayed = replay(search, [m for m in store.history(task, hardware=executor.hardware)
                                   if m.source == "twin" and m.config is not None], executor)
    start = "warm start from the plan" if warm else "cold start" + (f" ({_no_entry(plan, task)})" if plan else "")
    echo(f"## {task.op} {task.nbytes} B {task.dtype} on {task.nranks} ranks ({task.group}): {space.size} configs in "
         f"{len(space.subspaces)} subspaces; {start}"
         f"{f'; {replayed} trials replayed from the store' if replayed else ''}")
    echo(f"{'trial':>6}  {'config':<48} {'time (us)':>11} {'best (us)':>11}")
    for n, (config, t) in enumerate(search.history, 1):
        echo(f"{n:>6}  {config!s:<48} {t:>11.2f} {'(replayed)':>11}")
    while (config := search.propose()) is not None:
        t = executor.measure(task, config)
        search.observe(config, t)
        if store is not None:
            store.add(Measurement(task=task, config=config, time_us=t, source="twin", hardware=executor.hardware,
                                  nccl_version=".".join(map(str, executor.nccl_version)),
                                  occurrence=search.trials - 1))
        echo(f"{search.trials:>6}  {config!s:<48} {t:>11.2f} {search.best[1] if search.best else float('inf'):>11.2f}")
    if search.best is None:
        raise ConfigError(f"{task.op} {task.nbytes} B: every trial failed")
    winner, time_us = search.best
    default_samples = search.samples.get(default) or [executor.measure(task, default) for _ in range(DEFAULT_REPEATS)]
    default_us = fastest_share_mean(default_samples)
    found = next(i for i, (c, _) in enumerate(search.history, 1) if c == winner)
    cut = " (stopped by --max-trials)" if max_trials is not None and search.trials >= max_trials else ""
    echo(f"winner: {winner}  {time_us:.2f} us after {search.trials} trials{cut} (found at trial {found}); "
         f"NCCL default {default}  {default_us:.2f} us: {default_us / time_us:.3f}x")
    return {**task_to_dict(task), "search": search_name, **config_to_dict(winner), "time_us": round(time_us, 3),
            "trials": search.trials, "found_at": found, "default": config_to_dict(default),
            "default_time_us": round(default_us, 3), "speedup": round(default_us / time_us, 4),
            "warm_start": warm is not None, "replayed": replayed}


def tune(
    topology: Annotated[str, typer.Option(help="Preset name or cluster YAML file.")],
    executor: Annotated[str, typer.Option(help="What measures: twin (the model, with noise).")] = "twin",
    trace: Annotated[Path | None, typer.Option(help="Tune every task of this trace (≥ --min-size).")] = None,
    op: Annotated[str | None, typer.Option(help="One task: the collective.")] = None,
    nbytes: Annotated[str | None, typer.Option(help="One task: nccl-tests' size, e.g. 64MiB.")] = None,
    nranks: Annotated[int | None, typer.Option(min=2, help="One task: ranks of the communicator.")] = None,
    dtype: Annotated[str, typer.Option(help="One task: element type.")] = "float32",
    search: Annotated[str, typer.Option(help=", ".join(SEARCHES))] = "autoccl",
    warm_start: Annotated[Path | None, typer.Option(help="Warm-start plan (ccltwin rank -o).")] = None,
    store: Annotated[Path | None, typer.Option(help="SQLite tuning store to record into and resume from.")] = None,
    nodes: Annotated[int | None, typer.Option(help="Override the preset's node count.")] = None,
    gpus_per_node: Annotated[int | None, typer.Option(help="Use the first G GPUs of each node.")] = None,
    min_size: Annotated[str, typer.Option(help="With --trace: skip tasks smaller than this.")] = "1MiB",
    noise: Annotated[float, typer.Option(min=0.0, help="Twin executor: relative measurement noise (sigma).")] = 0.02,
    seed: Annotated[int, typer.Option(min=0, help="Seed of the search and of the twin's noise.")] = 0,
    max_trials: Annotated[int | None, typer.Option(min=1, help="Stop each task's search after this many trials.")
                          ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array, one object per task.")] = False,
) -> None:
    """Tune NCCL configs per task with a search algorithm; print each trajectory and winner."""
    if executor != "twin":
        fail(f"--executor {executor}: only the twin executor runs here (live tuning runs inside a job)")
    if search not in SEARCHES:
        fail(f"--search {search}: expected one of {', '.join(SEARCHES)}")
    if (trace is None) == (op is None):
        fail("give either --trace or --op/--nbytes/--nranks")
    echo = (lambda _line: None) if as_json else typer.echo
    try:
        if trace is not None:
            loaded = load_trace(trace)
            cluster = cluster_for(loaded, topology, nodes=nodes, gpus_per_node=gpus_per_node)
            runner = TwinExecutor(cluster, noise=noise, seed=seed)
            floor = parse_size(min_size)
            tasks = [(n, t) for n, t, _ in trace_tasks(loaded, cluster) if t.nbytes >= floor]
            if not tasks:
                typer.echo(f"note: no task of {trace} moves at least {min_size}; nothing to tune", err=True)
        else:
            cluster = load_cluster(topology, nodes=nodes, gpus_per_node=gpus_per_node)
            runner = TwinExecutor(cluster, noise=noise, seed=seed)
            if nbytes is None or nranks is None:
                fail("--op needs --nbytes and --nranks")
            size = parse_size(nbytes)
            if size < 1:
                fail(f"--nbytes {nbytes}: a task moves at least 1 byte")
            placed = runner.twin(Task(parse_op(op), size, nranks, dtype)).task(parse_op(op), size, dtype)
            tasks = [(placed, placed)]
        plan = load_plan(warm_start) if warm_start is not None else None
        db = Store(store) if store is not None else None
        echo(f"# ccltwin tune: {search} on {cluster.label}, twin executor with {noise:.0%} noise, seed {seed}; "
             "predicted, not measured")
        if plan is not None and plan.cluster != cluster.label:
            typer.echo(f"note: {warm_start} was ranked on {plan.cluster}, not on {cluster.label}: its order and "
                       "starting points may not fit", err=True)
        try:
            results = [tune_task(runner, named, task, search_name=search, seed=seed, plan=plan, store=db,
                                 max_trials=max_trials, echo=echo) for named, task in tasks]
        finally:
            if db is not None:
                db.close()
    except (TopologyError, TraceError, PlanError, StoreError, ConfigError, ValueError) as err:
        fail(str(err))
    if as_json:
        typer.echo(json.dumps(results, indent=1))

