"""How the searches do on the AutoCCL paper's workloads, in the twin with measurement noise.

For the four bundled workloads (traces/examples: Phi-2 and Llama-3.1-8B TP8×DP4, Yi-1.5-34B
TP8×PP4, VGG19 DP32) on four 4-node clusters (the paper's A40 NVLink-pairs and A40 PCIe
platforms, DGX H100, HGX H200), every distinct task of at least 1 MiB is tuned by each search
against ``twin.executor.TwinExecutor`` (2 % lognormal noise plus 5 % stragglers 5–25 % slow).
The exhaustive optimum comes from the fast path over the whole space.  Warm starts come from
a plan entry (``tuner.plan.PlanEntry.warm_start``): "exact" is the one the same sweep gives
(the best case: the executor is the model the plan came from), "off" the same with
``PLAN_ERROR`` added (the twin's error on real logs is 5–50 %: benchmarks/accuracy.py).

Per task: ``found`` is the trial at which the search first measured its final winner (trials
to converge), ``to5`` the first trial after which its incumbent is within 5 % of the optimum,
``x`` the winner's noise-free time over the optimum.  Per workload: one iteration's
communication time (Σ calls × time; tasks under 1 MiB stay at NCCL's default) with NCCL's
default and with each search's winners.

    python benchmarks/tuning.py [--jobs 2] [--clusters a40-pcie,...] [--workloads phi2,...] [--ablation]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np

from traces.examples import path
from traces.task import Task
from traces.trace_file import load_trace
from tuner.executor import space_for
from tuner.plan import PlanEntry, RankedSubspace
from tuner.search.base import fastest_share_mean
from tuner.session import TuningSession, search_for
from twin.executor import TwinExecutor
from twin.topology import Cluster, load_cluster
from twin.tuning import trace_tasks

WORKLOADS = {"phi2": "phi2-tp8dp4", "llama8b": "llama8b-tp8dp4", "yi34b": "yi34b-tp8pp4", "vgg19": "vgg19-dp32"}
CLUSTERS = ("a40-nvlink-pairs", "a40-pcie", "dgx-h100", "hgx-h200")
NODES = 4
MIN_NBYTES = 1 << 20
RUNS = {  # label: (search, its parameters, warm start: None, "exact" or "off")
    "autoccl": ("autoccl", {}, None),
    "warm": ("autoccl", {}, "exact"),
    "warm-off": ("autoccl", {}, "off"),
    "ours": ("ours", {}, None),
    "ours-warm": ("ours", {}, "exact"),
    "ours-warm-off": ("ours", {}, "off"),
    "random": ("random", {"budget": 200}, None),
    "afnfa": ("afnfa", {"max_samples": 2048, "pool": 100_000}, None),
}
ABLATION = {  # ours with one of its changes taken out
    "ours-no-repeats": ("ours", {"max_repeats": 1, "verify": 0}, None),
    "ours-no-pruning": ("ours", {"screen_ratio": float("inf"), "prune_ratio": float("inf")}, None),
    "ours-no-valley": ("ours", {"valley_line": False}, None),
}
PLAN_ERROR = 0.2
"""The "off" plan: predicted times × exp(N(0, 0.2)), each starting point's channels and chunk
scaled by 2^U(-1, 1) and its threads moved by up to ±128 (a stand-in for the twin's own error)."""


def workload_tasks(name: str, cluster: Cluster) -> dict[Task, float]:
    """Distinct tasks of a bundled trace placed on ``cluster`` with ``GxN`` group shapes, and their
    calls per iteration."""
    return {task: calls for _, task, calls in trace_tasks(load_trace(path(WORKLOADS[name])), cluster)}


def first_within(history, executor, task, optimum) -> int | None:
    """The first trial after which the incumbent (lowest score so far) is within 5 % of optimum."""
    scores: dict = {}
    samples: dict = {}
    for n, (config, t) in enumerate(history, 1):
        samples.setdefault(config, []).append(t)
        scores[config] = fastest_share_mean(samples[config])
        incumbent = min(scores, key=scores.__getitem__)
        if executor.true_time(task, incumbent) <= 1.05 * optimum:
            return n
    return None


def off_plan(entry: PlanEntry, rng: np.random.Generator) -> PlanEntry:
    """``entry`` with the errors ``PLAN_ERROR`` describes."""
    ranked = []
    for r in entry.ranked:
        c = r.config
        moved = replace(c, nchannels=max(1, round(c.nchannels * 2 ** rng.uniform(-1, 1))),
                        nthreads=int(np.clip(c.nthreads + 32 * rng.integers(-4, 5), 96, 640)),
                        chunk_bytes=max(1, round(c.chunk_bytes * 2 ** rng.uniform(-1, 1))))
        ranked.append(RankedSubspace(config=moved, time_us=r.time_us * math.exp(PLAN_ERROR * rng.standard_normal())))
    return replace(entry, ranked=tuple(sorted(ranked, key=lambda r: r.time_us)))


def tune_task(executor: TwinExecutor, task: Task, seed: int, runs: dict) -> dict:
    space = space_for(executor, task)
    start = time.perf_counter()
    _, optimum = executor.load_sweep(task, space)
    sweep_s = time.perf_counter() - start
    default = executor.default_config(task)
    tables = [(s, executor.table(task, s)) for s in space.subspaces]
    ranked = sorted((RankedSubspace(config=space.candidates(s).config(int(t.argmin())), time_us=float(t.min()))
                     for s, t in tables), key=lambda r: r.time_us)
    exact = PlanEntry(task=task, ranked=tuple(ranked),
                      default=RankedSubspace(config=default, time_us=executor.true_time(task, default)))
    plans = {"exact": exact, "off": off_plan(exact, np.random.default_rng(seed))}
    row = {"task": f"{task.op} {task.nbytes / 2**20:.0f}MiB {task.group}", "size": space.size,
           "optimum_us": optimum, "default_x": executor.true_time(task, default) / optimum, "sweep_s": sweep_s}
    for label, (name, params, plan) in runs.items():
        search = search_for(executor, task, name, seed=seed, warm_start=plans[plan].warm_start() if plan else None,
                            **params)
        started = time.perf_counter()
        result = TuningSession(executor, task, search, default=default).run()
        row[label] = {"trials": result.trials, "found": result.found_at,
                      "x": executor.true_time(task, result.winner) / optimum,
                      "to5": first_within(search.history, executor, task, optimum),
                      "time_us": executor.true_time(task, result.winner), "cpu_s": time.perf_counter() - started}
    return row


def bench_cluster(cluster_name: str, workloads: list[str], runs: dict) -> dict:
    cluster = load_cluster(cluster_name, nodes=NODES)
    executor = TwinExecutor(cluster, seed=7)
    out = {}
    for w in workloads:
        rows, iteration = [], {"default": 0.0, "optimum": 0.0, **{label: 0.0 for label in runs}}
        for seed, (task, calls) in enumerate(sorted(workload_tasks(w, cluster).items(), key=lambda kv: -kv[0].nbytes)):
            default_us = executor.true_time(task, executor.default_config(task))
            iteration["default"] += calls * default_us
            if task.nbytes < MIN_NBYTES:
                for label in ("optimum", *runs):
                    iteration[label] += calls * default_us
                continue
            row = tune_task(executor, task, seed, runs)
            row["calls"] = calls
            rows.append(row)
            iteration["optimum"] += calls * row["optimum_us"]
            for label in runs:
                iteration[label] += calls * row[label]["time_us"]
        out[w] = {"rows": rows, "iteration_us": iteration}
    return out


def print_report(results: dict, runs, header: str) -> None:
    print(header)
    print("# per search: trials (cold) or to5 (warm) and winner/optimum; random and afnfa: winner/optimum")
    shown = [k for k in runs if k not in ("random", "afnfa")]
    all_rows = []
    for cluster, workloads in results.items():
        for w, data in workloads.items():
            print(f"\n## {cluster} / {w}")
            print(f"{'task':<28} {'configs':>8} {'opt µs':>8} {'dflt':>5} " + " ".join(f"{k:>13.13}" for k in shown)
                  + f" {'random':>6} {'afnfa':>6}")
            for r in data["rows"]:
                all_rows.append(r)
                cells = [f"{_n(r[k]['to5'] if 'warm' in k else r[k]['trials']):>6} {r[k]['x']:>6.3f}" for k in shown]
                print(f"{r['task']:<28} {r['size']:>8} {r['optimum_us']:>8.0f} {r['default_x']:>5.2f} "
                      + " ".join(cells) + f" {r['random']['x']:>6.3f} {r['afnfa']['x']:>6.3f}")
    print("\n## Summary over all tasks")
    n = len(all_rows)
    for label in runs:
        within = sum(r[label]["x"] <= 1.05 for r in all_rows)
        trials = sorted(r[label]["trials"] for r in all_rows)
        found = sorted(r[label]["found"] for r in all_rows)
        to5 = sorted(r[label]["to5"] or 10**9 for r in all_rows)
        median_to5 = to5[n // 2] if to5[n // 2] < 10**9 else None
        print(f"{label:<16} within 5 % of optimum: {within:>2}/{n} ({within / n:4.0%}); "
              f"median trials {trials[n // 2]:>5}; found {found[n // 2]:>4}; median to5 {_n(median_to5):>5}; "
              f"worst x{max(r[label]['x'] for r in all_rows):.3f}")
    for warm in ("warm", "warm-off", "ours-warm", "ours-warm-off"):
        ratios = [r[warm]["to5"] / r["autoccl"]["found"] for r in all_rows if r[warm]["to5"] is not None]
        print(f"{warm:<14} within 5 % in <= 1/3 of cold AutoCCL's trials-to-converge (found): "
              f"{sum(x <= 1 / 3 for x in ratios)}/{n} tasks; median ratio {sorted(ratios)[len(ratios) // 2]:.3f}; "
              f"never within 5 %: {n - len(ratios)}")
    print("\n## One iteration's communication (Σ calls × time; tasks under 1 MiB at NCCL's default): "
          "NCCL's default, and its speed-up with each search's winners")
    gains = ("optimum", "autoccl", "warm", "ours", "afnfa")
    print(f"{'cluster':<18}{'workload':<9}{'default ms':>11}" + "".join(f"{k:>9}" for k in gains))
    for cluster, workloads in results.items():
        for w, data in workloads.items():
            it = data["iteration_us"]
            print(f"{cluster:<18}{w:<9}{it['default'] / 1e3:>11.1f}"
                  + "".join(f"{it['default'] / it[k]:>8.3f}x" for k in gains))


def _n(value) -> str:
    return "-" if value is None else str(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--clusters", default=",".join(CLUSTERS))
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--ablation", action="store_true", help="also run ours with each of its changes taken out")
    parser.add_argument("--json", help="also write the raw results to this file")
    parser.add_argument("--report", help="print the report of results saved with --json, without running")
    args = parser.parse_args()
    if args.report:
        results = json.loads(Path(args.report).read_text())
        first = next(iter(next(iter(results.values())).values()))["rows"][0]
        print_report(results, [k for k in first if isinstance(first[k], dict)], f"# results saved in {args.report}")
        return
    clusters, workloads = args.clusters.split(","), args.workloads.split(",")
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        runs = {**RUNS, **(ABLATION if args.ablation else {})}
        futures = {c: pool.submit(bench_cluster, c, workloads, runs) for c in clusters}
        results = {c: f.result() for c, f in futures.items()}
    print_report(results, runs, f"# {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
                 f"{args.jobs} worker(s), {time.perf_counter() - start:.0f} s; twin executor, noise 2 % + 5 % "
                 "stragglers; seed = task index")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
