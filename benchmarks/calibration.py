"""Does calibration make the twin better on what it did not see?  Two benchmarks, one table each.

**nccl-tests** (``--part files``): every system of ``shared/data/nccl-tests`` (the hardware each
file's header describes: ``accuracy.RUNS``) is calibrated on a third of its sizes and scored on
the other two thirds, for each of the three thirds (``Holdout(train_on="fold")``); systems
measured at several GPU counts (Azure ND A100 v4 at 2, 8, 16, 64; vTrain's A100 at 2, 4, 8) are
also calibrated on one GPU count and scored on the others.  Printed per system: points, the
median busbw error ≥ 1 MiB and < 1 MiB before (the uncalibrated twin) and after (what
``calibrate`` delivers: the physics fit, with the residual model where it kept it), the verdict,
and what moved.  Targets: ≤ 5 % at ≥ 1 MiB, ≤ 10 % below, and lower than before on every system.

**closed loop** (``--part loop``): a twin whose constants are perturbed ("the truth": every
constant ``calibrate`` may move, times exp(U(-0.25, 0.25)), kept within its plausible range) is
the cluster; live tuning is simulated as it runs: the ``ours`` search, warm-started from the
uncalibrated twin's plan, tunes half of a workload's tasks against the true twin with
measurement noise (``TwinExecutor``: 2 % lognormal, 5 % stragglers), and every trial becomes a
``live`` measurement.  ``calibrate`` fits those trials.  Then, on every task (and separately on
the tasks not tuned): is the calibrated twin's predicted best config within 2 % of the true
optimum (the true twin's exhaustive sweep), and how many trials does the search need to get
within 5 % of it from the calibrated plan against the uncalibrated plan.

    python benchmarks/calibration.py [--part files|loop|both] [--data DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np
from accuracy import DATA, RUNS
from tuning import first_within, workload_tasks

from traces.task import Task
from tuner.executor import space_for
from tuner.measurement import Measurement
from tuner.search import make_search, run
from twin.calibrate import Holdout, calibrate, read_points
from twin.calibrate.space import FitSpace
from twin.executor import TwinExecutor
from twin.params import DEFAULT_PARAMS, TwinParams
from twin.topology import load_cluster

MIB = 1 << 20
SYSTEMS = {  # several GPU counts of one system: calibrated on one, scored on the others
    "Azure ND A100 v4 (2, 8, 16, 64 GPUs)": [f"echo-azure-ndA100v4-allreduce-{n}gpu" for n in (2, 8, 16, 64)],
    "vTrain A100 (2, 4, 8 GPUs)": [f"vtrain-a100-{n}gpu-intranode-allreduce-LUT-1MiB-1GiB" for n in (2, 4, 8)],
}
LOOP = {"cluster": "dgx-h100", "nodes": 4, "workloads": ("llama8b", "vgg19"), "perturb": 0.25, "seed": 3}
MIN_NBYTES = 1 << 20


def regime_medians(result) -> dict:
    """Median held-out busbw error (%) at ≥ 1 MiB and below: before, physics fit, what ``calibrate``
    delivers (with the residual model where it kept one; the uncalibrated twin when it refused);
    ``None`` where no point is held out."""
    out = {}
    for key, keep in (("big", lambda n: n >= MIB), ("small", lambda n: n < MIB)):
        preds = [p for p in result.predictions if keep(p.nbytes)]
        if not preds:
            out[key], out[f"n_{key}"] = None, 0
            continue
        delivered = [p.before if not result.accepted else p.after_residual if result.residual is not None
                     else p.after for p in preds]
        out[key] = tuple(100 * statistics.median(v) for v in ([p.before for p in preds], [p.after for p in preds],
                                                              delivered))
        out[f"n_{key}"] = len(preds)
    return out


def files_part(data: Path) -> list[dict]:
    rows = []
    jobs = [(path.stem, [path.stem], Holdout(train_on="fold")) for path in sorted(data.glob("*.txt"))
            if path.stem in RUNS]
    jobs += [(name, files, Holdout(by="gpus", train_on="fold")) for name, files in SYSTEMS.items()
             if all((data / f"{f}.txt").is_file() for f in files)]
    for name, files, holdout in jobs:
        runs = [RUNS[f] for f in files]
        biggest = max(runs, key=lambda r: r.nodes)
        cluster = load_cluster(biggest.topology, nodes=biggest.nodes, nics_per_node=biggest.nics_per_node)
        points = [p for f, r in zip(files, runs, strict=True)
                  for p in read_points([data / f"{f}.txt"], gpus_per_process=r.gpus_per_process)]
        start = time.process_time()
        result = calibrate(points, cluster, holdout=holdout, sources=[f"{f}.txt" for f in files])
        cpu = time.process_time() - start
        moved = result.profile_meta.changes
        rows.append({"system": name, "holdout": holdout.describe(), "points": len(points), **regime_medians(result),
                     "accepted": result.accepted,
                     "refused": result.refused, "residual": result.residual is not None, "cpu_s": cpu,
                     "moved": {c.name: [c.before, c.after] for c in moved},
                     "walls": list(result.outcome.at_bounds) if result.outcome else []})
        print(_file_line(rows[-1]), flush=True)
    return rows


def _cell(values) -> str:
    return " ".join(f"{v:5.1f}" for v in values) if values else f"{'-':>5} {'-':>5} {'-':>5}"


def _file_line(r: dict) -> str:
    verdict = "kept" + ("+res" if r["residual"] else "") if r["accepted"] else "REFUSED"
    return (f"{r['system'][:58]:<58} {r['points']:>5} {r['n_big']:>5} {_cell(r['big'])} {r['n_small']:>5} "
            f"{_cell(r['small'])}  {verdict:<9} {len(r['moved']):>2} {r['cpu_s']:5.1f}")


FILES_HEADER = (f"{'':<58} {'':>5} {'≥ 1 MiB':^23} {'< 1 MiB':^23}\n"
                f"{'system (held out: 2/3 of sizes, or the other GPU counts)':<58} {'pts':>5} {'n':>5} "
                f"{'bef':>5} {'phys':>5} {'cal':>5} {'n':>5} {'bef':>5} {'phys':>5} {'cal':>5}  "
                f"{'verdict':<9} mv cpu s")


# ---- closed loop ------------------------------------------------------------------------------


def perturbed(prior: TwinParams, spread: float, seed: int) -> TwinParams:
    """``prior`` with every constant ``calibrate`` may move times exp(U(-spread, spread)),
    kept inside its plausible range."""
    rng = np.random.default_rng(seed)
    space = FitSpace.of(prior)
    low, high = space.bounds()
    return space.params(np.clip(rng.uniform(-spread, spread, len(space.names)), low, high))


def plan_of(model: TwinExecutor, task: Task, space) -> list:
    """The warm-start plan entry ``model`` (a twin with some constants) gives ``task`` over ``space``
    (the space the live search explores): per subspace its predicted best point, fastest first."""
    model.load_sweep(task, space)
    ranked = []
    for s in space.subspaces:
        try:
            table = model.table(task, s)
        except KeyError:  # a subspace the twin does not model here
            continue
        i = int(np.argmin(table))
        ranked.append((space.candidates(s).config(i), float(table[i])))
    return sorted(ranked, key=lambda ct: ct[1])


def tune(executor: TwinExecutor, task: Task, warm_start, seed: int, optimum: float) -> dict:
    space = space_for(executor, task)
    search = make_search("ours", space, seed=seed, default=executor.default_config(task), warm_start=warm_start)
    history = run(search, lambda c: executor.measure(task, c))
    return {"history": history, "trials": search.trials, "to5": first_within(history, executor, task, optimum),
            "x": executor.true_time(task, search.best[0]) / optimum}


def loop_part() -> dict:
    cluster = load_cluster(LOOP["cluster"], nodes=LOOP["nodes"])
    truth = perturbed(DEFAULT_PARAMS, LOOP["perturb"], LOOP["seed"])
    executor = TwinExecutor(cluster, params=truth, seed=LOOP["seed"])
    tasks = {}
    for w in LOOP["workloads"]:
        tasks.update({t: c for t, c in workload_tasks(w, cluster).items() if t.nbytes >= MIN_NBYTES})
    tasks = sorted(tasks, key=lambda t: (t.op, t.group, t.nbytes))
    trained = set(tasks[::2])
    spaces = {t: space_for(executor, t) for t in tasks}
    optimum = {t: executor.load_sweep(t, spaces[t])[1] for t in tasks}
    uncalibrated = TwinExecutor(cluster, params=DEFAULT_PARAMS, noise=0.0, spike_prob=0.0)
    start = time.process_time()
    trials = []
    for i, task in enumerate(tasks):
        if task in trained:
            out = tune(executor, task, plan_of(uncalibrated, task, spaces[task]), i, optimum[task])
            trials += [Measurement(task=task, config=c, time_us=t, source="live", hardware=cluster.identity,
                                   nccl_version="2.28.9", occurrence=k) for k, (c, t) in enumerate(out["history"])]
    tuning_s = time.process_time() - start
    start = time.process_time()
    result = calibrate(trials, cluster, sources=["simulated live tuning"])
    calibrate_s = time.process_time() - start
    print(result.report())
    fitted = result.params
    truth_d, prior_d, fit_d = truth.to_dict(), DEFAULT_PARAMS.to_dict(), fitted.to_dict()
    recovered = {n: {"prior": prior_d[n], "true": truth_d[n], "fitted": fit_d[n]} for n in result.profile_meta.moved}
    calibrated = TwinExecutor(cluster, params=fitted, noise=0.0, spike_prob=0.0)
    rows = []
    for i, task in enumerate(tasks):
        row = {"task": f"{task.op} {task.nbytes / MIB:.0f}MiB {task.group}", "tuned": task in trained,
               "optimum_us": optimum[task]}
        for label, model in (("uncal", uncalibrated), ("cal", calibrated)):
            plan = plan_of(model, task, spaces[task])
            row[f"{label}_best_x"] = executor.true_time(task, plan[0][0]) / optimum[task]
            fresh = TwinExecutor(cluster, params=truth, seed=LOOP["seed"] + 1000)
            fresh.load_sweep(task, space_for(fresh, task))
            out = tune(fresh, task, plan, i, optimum[task])
            row[f"{label}_to5"], row[f"{label}_trials"], row[f"{label}_x"] = out["to5"], out["trials"], out["x"]
        rows.append(row)
    return {"cluster": cluster.identity, "tasks": len(tasks), "trained": len(trained), "trials": len(trials),
            "tuning_cpu_s": tuning_s, "calibrate_cpu_s": calibrate_s, "accepted": result.accepted,
            "table": result.table(), "recovered": recovered, "rows": rows}


def print_loop(out: dict) -> None:
    print(f"\n# closed loop on {out['cluster']}: {out['tasks']} tasks ≥ 1 MiB of {', '.join(LOOP['workloads'])}, "
          f"{out['trained']} tuned live against the true twin ({out['trials']} trials, {out['tuning_cpu_s']:.0f} s), "
          f"calibrated in {out['calibrate_cpu_s']:.1f} s CPU, {'accepted' if out['accepted'] else 'REFUSED'}")
    print(out["table"])
    print(f"\n{'constant':<34} {'prior':>9} {'true':>9} {'fitted':>9}  error prior→fitted")
    for name, v in out["recovered"].items():
        print(f"{name:<34} {v['prior']:>9.4g} {v['true']:>9.4g} {v['fitted']:>9.4g}  "
              f"{abs(v['prior'] / v['true'] - 1):6.1%} → {abs(v['fitted'] / v['true'] - 1):6.1%}")
    print(f"\n{'task':<30} {'tuned':>5} {'opt µs':>9} {'best/opt':>17} {'to5 (trials to ≤5 %)':>22} "
          f"{'search trials':>15}")
    print(f"{'':<30} {'':>5} {'':>9} {'uncal':>8} {'cal':>8} {'uncal':>10} {'cal':>10} {'uncal':>7} {'cal':>7}")
    for r in out["rows"]:
        print(f"{r['task']:<30} {'yes' if r['tuned'] else 'no':>5} {r['optimum_us']:>9.0f} {r['uncal_best_x']:>8.3f} "
              f"{r['cal_best_x']:>8.3f} {_n(r['uncal_to5']):>10} {_n(r['cal_to5']):>10} {r['uncal_trials']:>7} "
              f"{r['cal_trials']:>7}")
    for which, keep in (("all tasks", lambda r: True), ("tasks not tuned", lambda r: not r["tuned"])):
        rows = [r for r in out["rows"] if keep(r)]
        within = sum(r["cal_best_x"] <= 1.02 for r in rows)
        within_uncal = sum(r["uncal_best_x"] <= 1.02 for r in rows)
        to5 = {k: sum(r[f"{k}_to5"] or r[f"{k}_trials"] for r in rows) for k in ("uncal", "cal")}
        print(f"{which}: calibrated best within 2 % of the true optimum on {within}/{len(rows)} "
              f"(uncalibrated {within_uncal}/{len(rows)}); trials to ≤ 5 %: {to5['uncal']} uncalibrated plan, "
              f"{to5['cal']} calibrated ({to5['uncal'] / max(to5['cal'], 1):.2f}x fewer); median "
              f"{statistics.median(r['uncal_to5'] or r['uncal_trials'] for r in rows)} vs "
              f"{statistics.median(r['cal_to5'] or r['cal_trials'] for r in rows)}")


def _n(v) -> str:
    return "-" if v is None else str(v)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("files", "loop", "both"), default="both")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--json", help="also write the raw results here")
    args = parser.parse_args()
    print(f"# {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    results = {}
    if args.part in ("files", "both"):
        print(FILES_HEADER)
        results["files"] = files_part(args.data)
        rows = results["files"]
        met = lambda r, k, t: r[k] is None or r[k][2] <= t  # noqa: E731
        better = sum(r["accepted"] for r in rows)
        print(f"\ntargets met: ≥ 1 MiB ≤ 5 %: {sum(met(r, 'big', 5) for r in rows)}/{len(rows)}; < 1 MiB ≤ 10 %: "
              f"{sum(met(r, 'small', 10) for r in rows)}/{len(rows)}; lower than uncalibrated (accepted): "
              f"{better}/{len(rows)}")
    if args.part in ("loop", "both"):
        results["loop"] = loop_part()
        print_loop(results["loop"])
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
