"""``ccltwin tune``: run a search against an executor and print the trajectory and winner per task.

    ccltwin tune --executor twin --topology a40-pcie --op allreduce --nbytes 632MB --nranks 4 --gpus-per-node 1
    ccltwin tune --executor twin --topology dgx-h100 --nodes 4 --trace phi2.json.gz --search ours \\
        --warm-start plan.json --store tuning.db --json

Each task is one tuning session (``tuner.session``). With ``--store`` every trial is recorded
(source ``twin``), and a rerun resumes from the stored trials the search would propose instead of
measuring them again, so tuning goes on where it stopped. Live tuning cannot be run from here: its
measurements are the calls of a running job (``live.enable()`` in the job, or ``ccltwin bench``
under torchrun); ``--executor live`` says so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from ccltwin.nccl_release import DEFAULT_VERSION_TEXT, NcclVersionOption, nccl_version_of
from ccltwin.profiles import ProfileOption, params_of
from ccltwin.simulate import DTYPE_HELP
from ccltwin.tuners import TunerConfigOption, TunerOption, tuner_overrides
from traces.errors import CcltwinError
from traces.task import Task, parse_dtype, parse_op, whole_elements
from traces.trace_file import load_trace
from traces.units import SIZE_RULE, parse_size
from tuner.codec import config_to_dict, task_to_dict
from tuner.plan import Plan, load_plan
from tuner.search import SEARCHES, USES_WARM_START
from tuner.session import TuningResult, TuningSession, search_for
from tuner.store import Store
from twin.executor import TwinExecutor
from twin.placement import cluster_for, trace_tasks
from twin.topology import load_cluster

LIVE_HOWTO = ("--executor live: live tuning times a running job's own calls, so it runs inside the job, not from "
              "this command: add `live.enable()` to the training script and launch it as usual (docs/live.md), or "
              "benchmark collectives with `torchrun --nproc-per-node N -m ccltwin bench`; then `ccltwin store "
              "export` writes the winners")


def tune(
    topology: Annotated[str, typer.Option(help="Preset name or cluster YAML file.")],
    executor: Annotated[str, typer.Option(
        help="What measures: twin (the model, with noise); live tuning runs inside the job (--executor live: how).")
    ] = "twin",
    trace: Annotated[Path | None, typer.Option(help="Tune every task of this trace (≥ --min-size).")] = None,
    op: Annotated[str | None, typer.Option(help="One task: the collective.")] = None,
    nbytes: Annotated[str | None, typer.Option(help=f"One task: nccl-tests' size, e.g. 64MiB ({SIZE_RULE}).")
                      ] = None,
    nranks: Annotated[int | None, typer.Option(min=2, help="One task: ranks of the communicator.")] = None,
    dtype: Annotated[str, typer.Option(help=f"One task: {DTYPE_HELP[0].lower()}{DTYPE_HELP[1:]}")] = "float32",
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
    profile: ProfileOption = None,
    nccl_version: NcclVersionOption = DEFAULT_VERSION_TEXT,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array, one object per task.")] = False,
    tuner: TunerOption = None,
    tuner_config: TunerConfigOption = None,
) -> None:
    """Tune NCCL configs per task with a search algorithm; print each trajectory and winner."""
    if executor == "live":
        raise CcltwinError(LIVE_HOWTO)
    if executor != "twin":
        raise CcltwinError(f"--executor {executor}: expected twin (live tuning runs inside a job: --executor live "
                           "says how)")
    if search not in SEARCHES:
        raise CcltwinError(f"--search {search}: expected one of {', '.join(SEARCHES)}")
    if (trace is None) == (op is None):
        raise CcltwinError("give either --trace or --op/--nbytes/--nranks")
    echo = (lambda _line: None) if as_json else typer.echo
    version = nccl_version_of(nccl_version)
    params, constants = params_of(profile)
    overrides = tuner_overrides(tuner, tuner_config)
    if trace is not None:
        loaded = load_trace(trace)
        cluster = cluster_for(loaded, topology, nodes=nodes, gpus_per_node=gpus_per_node, **overrides)
        runner = TwinExecutor(cluster, noise=noise, seed=seed, params=params, nccl_version=version)
        floor = parse_size(min_size)
        tasks = [(n, t) for n, t, _ in trace_tasks(loaded, cluster) if t.nbytes >= floor]
        if not tasks:
            typer.echo(f"note: no task of {trace} moves at least {min_size}; nothing to tune", err=True)
    else:
        cluster = load_cluster(topology, nodes=nodes, gpus_per_node=gpus_per_node, **overrides)
        runner = TwinExecutor(cluster, noise=noise, seed=seed, params=params, nccl_version=version)
        if nbytes is None or nranks is None:
            raise CcltwinError("--op needs --nbytes and --nranks")
        size = parse_size(nbytes)
        if size < 1:
            raise CcltwinError(f"--nbytes {nbytes}: a task moves at least 1 byte")
        the_dtype = parse_dtype(dtype)
        whole_elements(size, the_dtype, f"--nbytes {nbytes}")
        placed = runner.communicator(Task(parse_op(op), size, nranks, the_dtype)).task(parse_op(op), size, the_dtype)
        tasks = [(placed, placed)]
    plan = load_plan(warm_start) if warm_start is not None else None
    db = Store(store) if store is not None else None
    try:
        echo(f"# ccltwin tune: {search} on {cluster.label}, NCCL {nccl_version}, twin executor with {noise:.0%} noise, "
             f"seed {seed}, "
             f"{constants}; predicted, not measured")
        if plan is not None and plan.cluster != cluster.identity:
            typer.echo(f"note: {warm_start} was ranked on {plan.cluster}, not on {cluster.identity}: its order and "
                       "starting points may not fit", err=True)
        results = [_tune_task(runner, named, task, search, seed=seed, plan=plan, store=db, max_trials=max_trials,
                              echo=echo) for named, task in tasks]
    finally:
        if db is not None:
            db.close()
    if as_json:
        typer.echo(json.dumps(results, indent=1))


def _tune_task(executor: TwinExecutor, named: Task, task: Task, search_name: str, *, seed: int, plan: Plan | None,
               store: Store | None, max_trials: int | None, echo) -> dict:
    """Tune one task in a session; prints its trajectory through ``echo`` and returns its JSON object."""
    entry = (plan.find(named) or plan.find(task)) if plan is not None else None
    warm = entry.warm_start() if entry is not None and search_name in USES_WARM_START else None
    session = TuningSession(executor, task, search_for(executor, task, search_name, seed=seed, warm_start=warm,
                                                       max_trials=max_trials), store=store)
    resumed = session.resume()
    space = session.search.space
    start = "warm start from the plan" if warm else "cold start" + (f" ({_no_entry(plan, task)})" if plan else "")
    echo(f"## {task.op} {task.nbytes} B {task.dtype} on {task.nranks} ranks ({task.group}): {space.size} configs in "
         f"{len(space.subspaces)} subspaces; {start}"
         f"{f'; {resumed} trials replayed from the store' if resumed else ''}")
    echo(f"{'trial':>6}  {'config':<48} {'time (us)':>11} {'best (us)':>11}")
    for n, (config, t) in enumerate(session.search.history, 1):
        echo(f"{n:>6}  {config!s:<48} {t:>11.2f} {'(replayed)':>11}")
    result = session.run(lambda n, config, t, best: echo(
        f"{n:>6}  {config!s:<48} {t:>11.2f} {best[1] if best else float('inf'):>11.2f}"))
    cut = " (stopped by --max-trials)" if result.stopped_by_budget else ""
    echo(f"winner: {result.winner}  {result.time_us:.2f} us after {result.trials} trials{cut} (found at trial "
         f"{result.found_at}); NCCL default {result.default}  {result.default_us:.2f} us: {result.speedup:.3f}x")
    return _as_json(result, warm is not None)


def _no_entry(plan: Plan, task: Task) -> str:
    """Why ``plan`` gives ``task`` no entry: none of its op, size and ranks, or several."""
    same = len(plan.like(task))
    if same > 1:
        return f"the plan has {same} entries of this op, size and rank count and none of group {task.group}"
    return "the plan has no entry for it"


def _as_json(r: TuningResult, warm_start: bool) -> dict:
    return {**task_to_dict(r.task), "search": r.search, **config_to_dict(r.winner), "time_us": round(r.time_us, 3),
            "trials": r.trials, "found_at": r.found_at, "default": config_to_dict(r.default),
            "default_time_us": round(r.default_us, 3), "speedup": round(r.speedup, 4), "warm_start": warm_start,
            "replayed": r.resumed}
