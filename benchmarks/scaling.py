"""How the cost of a whole-iteration replay grows with the job (issue 13's scale targets).

Each case generates one training iteration's trace (``traces.generate``, one representative rank
per role), writes it, and in a fresh process loads it and runs ``ccltwin whatif``'s evaluation
(the default replay, then the tuned one): CPU seconds of the load, the default replay, the whole
evaluation with tuning, and the process's peak memory.  The growth table fits the exponent
``b`` of ``cost ∝ world^b`` between successive sizes and over all of them (a slope of 0 means
the cost follows distinct work, not GPUs).

Targets: Llama-3-405B (TP8 × PP16 × DP) on 16,384 GPUs ≤ 60 s with tuning, on ~100,000 GPUs
≤ 120 s; the AutoCCL paper's Yi-1.5-34B on 32 GPUs (about 155k collectives per rank) ≤ 10 s;
memory under 2 GiB; one core.

    taskset -c 0 python benchmarks/scaling.py                  # 405B from 256 to 16,384 GPUs, Yi-34B
    taskset -c 0 python benchmarks/scaling.py --dp 2 32 128 256 512 784  # up to 100,352 GPUs
    python benchmarks/scaling.py --case llama3-405b-16k --dp 128   # one measurement, as JSON
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

LLAMA = "llama3-405b-16k"
"""TP 8 × PP 16: 128 GPUs per data-parallel rank."""
YI = "autoccl-yi34b"
TOPOLOGY = {LLAMA: "dgx-h100", YI: "a40-nvlink-pairs"}


def measure(case: str, dp: int | None, tuned: bool) -> dict:
    """Generate, write, load and evaluate one case in this process; CPU seconds and peak RSS."""
    from traces.generate import generate, workload
    from traces.trace_file import load_trace, save_trace
    from twin.placement import Placement, cluster_for
    from twin.replay import replay
    from twin.whatif import Candidate, evaluate_cluster

    overrides = {} if dp is None else {"dp": dp, "world_size": 128 * dp}
    trace = generate(workload(case, overrides=overrides))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json.gz"
        save_trace(trace, path)
        del trace
        start = time.process_time()
        trace = load_trace(path)
        load_s = time.process_time() - start
    cluster = cluster_for(trace, TOPOLOGY[case])
    start = time.process_time()
    default = replay(trace, cluster, placement=Placement(trace, cluster))
    default_s = time.process_time() - start
    start = time.process_time()
    report = evaluate_cluster(trace, cluster, Candidate(TOPOLOGY[case]), tuned=tuned)
    evaluate_s = time.process_time() - start
    best = report.tuned or report.default
    return {"case": case, "world": trace.world_size, "ranks": len(trace.ranks),
            "collectives_per_rank": max(Counter(rank for rank, _ in trace.collectives()).values()),
            "load_s": load_s, "default_s": default_s, "evaluate_s": evaluate_s,
            "peak_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
            "iteration_ms": default.mean_iteration_us / 1e3, "tuned_ms": best.mean_iteration_us / 1e3}


def _run(case: str, dp: int | None, tuned: bool) -> dict:
    command = [sys.executable, __file__, "--case", case, *(["--dp", str(dp)] if dp else []),
               *([] if tuned else ["--no-tuned"])]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(out.splitlines()[-1])


def exponent(a: dict, b: dict, key: str) -> float:
    """``log(cost_b / cost_a) / log(world_b / world_a)``.

    >>> exponent({"world": 1024, "s": 2.0}, {"world": 4096, "s": 8.0}, "s")  # 4x the GPUs, 4x the cost
    1.0
    """
    return math.log(max(b[key], 1e-9) / max(a[key], 1e-9)) / math.log(b["world"] / a["world"])


def fit_exponent(rows: list[dict], key: str) -> float:
    """Least-squares slope of log cost over log world.

    >>> round(fit_exponent([{"world": w, "s": 3.0} for w in (256, 1024, 16384)], "s"), 6)  # flat
    0.0
    """
    xs = [math.log(r["world"]) for r in rows]
    ys = [math.log(max(r[key], 1e-9)) for r in rows]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


def table(rows: list[dict]) -> str:
    head = (f"{'case':16} {'GPUs':>7} {'ranks':>5} {'coll/rank':>9} {'load s':>7} {'default s':>9} "
            f"{'tuned s':>8} {'peak GiB':>8} {'iter ms':>10} {'tuned ms':>10}  b(tuned)")
    lines = [head]
    for i, r in enumerate(rows):
        b = (f"{exponent(rows[i - 1], r, 'evaluate_s'):+.2f}"
             if i and rows[i - 1]["case"] == r["case"] and rows[i - 1]["world"] != r["world"] else "")
        lines.append(f"{r['case']:16} {r['world']:>7} {r['ranks']:>5} {r['collectives_per_rank']:>9} "
                     f"{r['load_s']:>7.2f} {r['default_s']:>9.2f} {r['evaluate_s']:>8.2f} {r['peak_gib']:>8.2f} "
                     f"{r['iteration_ms']:>10.1f} {r['tuned_ms']:>10.1f}  {b}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", help="measure one case in this process and print it as JSON")
    parser.add_argument("--dp", type=int, nargs="*", default=[2, 8, 32, 128],
                        help="data-parallel sizes of the 405B job (world = 128 × dp)")
    parser.add_argument("--no-tuned", dest="tuned", action="store_false", help="the default replay only")
    parser.add_argument("--no-yi", dest="yi", action="store_false", help="leave out the Yi-34B case")
    args = parser.parse_args()
    if args.case:
        print(json.dumps(measure(args.case, args.dp[0] if args.dp and args.case == LLAMA else None, args.tuned)))
        return
    print(f"# {platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}; CPU seconds, one process per case")
    llama = [_run(LLAMA, dp, args.tuned) for dp in args.dp]
    rows = llama + ([_run(YI, None, args.tuned)] if args.yi else [])
    print(table(rows))
    if len(llama) > 1:
        tuned, default = fit_exponent(llama, "evaluate_s"), fit_exponent(llama, "default_s")
        print(f"growth exponent b (cost ∝ GPUs^b) over {llama[0]['world']}-{llama[-1]['world']} GPUs: "
              f"with tuning {tuned:+.2f}, default replay {default:+.2f}")

if __name__ == "__main__":
    main()
