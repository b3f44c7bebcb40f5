"""How close ``ccltwin predict`` comes to measured training iterations of Megatron GPT jobs.

    python -m benchmarks.iteration_accuracy                 # both tables
    python -m benchmarks.iteration_accuracy --limit 40      # every 9th single-node row or so, quicker
    python -m benchmarks.iteration_accuracy --multi-only    # the SC'21 runs alone
    python -m benchmarks.iteration_accuracy --json out.json

Single node: the development quarter of vTrain's measured Megatron-DeepSpeed runs on one
8×A100 node (``benchmarks/data/vtrain-a100-single-node-dev.csv``), predicted on the ``dgx-a100``
preset. Multi-node: the SC'21 Megatron-LM runs on Selene (``megatron-sc21-table1.csv``,
iteration times derived from the published teraFLOP/s), predicted on ``benchmarks/clusters/
selene.yaml``, with pipeline sends on the world communicator as the paper's Megatron-LM sent them.
Each row is generated from its model and plan (``traces.generate.gpt``) and
replayed with NCCL's default configurations, as ``ccltwin predict --no-tuned`` does. Prints the
mean and median absolute percentage error, the signed error (negative: predicted too fast) per
hidden size, and the worst rows.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from traces.generate import generate
from traces.generate.gpt import gpt_workload
from twin.iteration import check_fits
from twin.placement import cluster_for
from twin.whatif import Candidate, evaluate_cluster

HERE = Path(__file__).resolve().parent
SINGLE = HERE / "data" / "vtrain-a100-single-node-dev.csv"
MULTI = HERE / "data" / "megatron-sc21-table1.csv"
SELENE = HERE / "clusters" / "selene.yaml"
SC21_VOCAB, SC21_SEQ = 51200, 2048


@dataclass(frozen=True)
class Row:
    """One measured run and its prediction."""

    label: str
    hidden: int
    gpus: int
    measured_ms: float
    predicted_ms: float
    compute_ms: float
    exposed_comm_ms: float
    host_wait_ms: float
    bubble_ms: float

    @property
    def error(self) -> float:
        """Signed relative error (negative: predicted too fast)."""
        return self.predicted_ms / self.measured_ms - 1


def _numbers(path: Path) -> list[list[float]]:
    with path.open(encoding="utf-8") as f:
        return [[float(x) for x in line] for line in csv.reader(r for r in f if r.strip() and not r.startswith("#"))]


def _predict(label: str, topology: str, measured_ms: float, **shape) -> Row:
    work = gpt_workload(**shape)
    trace = generate(work)
    cluster = cluster_for(trace, topology)
    check_fits(trace, cluster)
    b = evaluate_cluster(trace, cluster, Candidate(topology), tuned=False).breakdown
    return Row(label, shape["hidden"], work.parallelism.world_size, measured_ms, b.iteration_ms, b.compute_ms,
               b.exposed_comm_ms, b.host_wait_ms, b.bubble_ms)


def single_node(limit: int | None = None) -> list[Row]:
    """The vTrain development rows (every k-th when ``limit`` asks for fewer)."""
    rows = _numbers(SINGLE)
    if limit:
        rows = rows[:: max(1, len(rows) // limit)][:limit]
    out = []
    for gpus, gbs, mbs, h, heads, layers, seq, tp, dp, pp, ms in rows:
        label = f"h{int(h)} L{int(layers)} tp{int(tp)} dp{int(dp)} pp{int(pp)} mb{int(mbs)} gb{int(gbs)}"
        assert int(gpus) == int(tp * dp * pp), label
        out.append(_predict(label, "dgx-a100", ms, hidden=int(h), heads=int(heads), layers=int(layers),
                            seq=int(seq), tp=int(tp), dp=int(dp), pp=int(pp), micro_batch=int(mbs),
                            global_batch=int(gbs)))
    return out


def sc21_iteration_ms(batch: int, layers: int, hidden: int, gpus: int, tflops: float) -> float:
    """The paper's equation 3 FLOPs (full recompute) over the reported throughput."""
    s, v, h, lay = SC21_SEQ, SC21_VOCAB, hidden, layers
    flops = 96 * batch * s * lay * h * h * (1 + s / (6 * h) + v / (16 * lay * h))
    return flops / (gpus * tflops * 1e12) * 1e3


def multi_node() -> list[Row]:
    out = []
    for size, heads, h, layers, tp, pp, gpus, gbs, mbs, vpp, tflops in _numbers(MULTI):
        dp = int(gpus) // int(tp * pp)
        ms = sc21_iteration_ms(int(gbs), int(layers), int(h), int(gpus), tflops)
        out.append(_predict(f"{size:g}B tp{int(tp)} pp{int(pp)} dp{dp} v{int(vpp)} on {int(gpus)}", str(SELENE), ms,
                            hidden=int(h), heads=int(heads), layers=int(layers), seq=SC21_SEQ, vocab=SC21_VOCAB,
                            tp=int(tp), dp=dp, pp=int(pp), vpp=int(vpp), micro_batch=int(mbs), global_batch=int(gbs),
                            recompute="full", pipeline_on_world=True))
    return out


def summary(rows: list[Row]) -> dict:
    errors = [abs(r.error) for r in rows]
    by_hidden: dict[int, list[float]] = {}
    for r in rows:
        by_hidden.setdefault(r.hidden, []).append(r.error)
    return {
        "rows": len(rows), "mape": statistics.fmean(errors), "median_abs_error": statistics.median(errors),
        "too_fast": sum(r.error < 0 for r in rows),
        "by_hidden": {h: {"rows": len(e), "mape": statistics.fmean(map(abs, e)), "mean_error": statistics.fmean(e)}
                      for h, e in sorted(by_hidden.items())},
    }


def _table(title: str, rows: list[Row], worst: int) -> str:
    s = summary(rows)
    lines = [f"## {title}: {s['rows']} runs, MAPE {s['mape']:.1%}, median |error| {s['median_abs_error']:.1%}, "
             f"{s['too_fast']} predicted too fast", "", "| hidden | runs | MAPE | mean signed error |",
             "|---|---|---|---|"]
    lines += [f"| {h} | {v['rows']} | {v['mape']:.1%} | {v['mean_error']:+.1%} |" for h, v in s["by_hidden"].items()]
    lines += ["", "| run | GPUs | measured ms | predicted ms | error | compute | exposed comm | host wait | bubble |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: -abs(r.error))[:worst]:
        lines.append(f"| {r.label} | {r.gpus} | {r.measured_ms:.1f} | {r.predicted_ms:.1f} | {r.error:+.1%} | "
                     f"{r.compute_ms:.1f} | {r.exposed_comm_ms:.1f} | {r.host_wait_ms:.1f} | {r.bubble_ms:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, help="predict at most this many single-node rows (spread evenly)")
    parser.add_argument("--single-only", action="store_true", help="skip the multi-node runs")
    parser.add_argument("--multi-only", action="store_true", help="skip the single-node runs")
    parser.add_argument("--json", type=Path, help="also write every row and the summaries here")
    args = parser.parse_args(argv)
    start = time.process_time()
    if args.single_only and args.multi_only:
        parser.error("--single-only and --multi-only leave nothing to predict")
    single = [] if args.multi_only else single_node(args.limit)
    if single:
        print(_table("Single node (vTrain dev quarter, 8×A100, dgx-a100)", single, 10))
    multi = [] if args.single_only else multi_node()
    if multi:
        print()
        print(_table("Multi-node (Megatron-LM SC'21 Table 1, Selene)", multi, len(multi)))
    print(f"\n{time.process_time() - start:.0f} CPU s", file=sys.stderr)
    if args.json:
        doc = {"single_node": single and {"summary": summary(single), "rows": [asdict(r) for r in single]},
               "multi_node": multi and {"summary": summary(multi), "rows": [asdict(r) for r in multi]}}
        args.json.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
