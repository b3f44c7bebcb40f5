"""The twin's compute model against the H200 sweeps, and a fit of its parameters to them.

    python benchmarks/compute_fit.py                       # model vs measured, per group
    python benchmarks/compute_fit.py --fit gemm            # refit compute.gemm.* on the bf16 rows

The sweeps: ``benchmarks/data/h200-compute.json`` (``benchmarks/gpu_compute_sweep.py``),
``benchmarks/data/h200-compute-interference.json`` (``benchmarks/gpu_interference_sweep.py``) and
``benchmarks/data/h200-attention.json`` (``benchmarks/gpu_attention_sweep.py``).
A fit minimises the squared log error (bounded least squares, scipy) of the groups it names and
prints the parameters; the defaults in ``twin/params.py`` are such a fit, rounded.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from scipy.optimize import least_squares

from twin.compute.check import compared, load_sweep, summary
from twin.hardware import gpu_spec
from twin.params import DEFAULT_PARAMS, TwinParams

DATA = Path(__file__).resolve().parent / "data"
SWEEPS = (DATA / "h200-compute.json", DATA / "h200-compute-interference.json", DATA / "h200-attention.json")
FITS = {
    "gemm": (("gemm bfloat16", "gemm wave"), ("compute.gemm.efficiency", "compute.gemm.k_overhead",
                                               "compute.gemm.fixed_us")),
    "fp8": (("gemm fp8",), ("compute.gemm.fp8_efficiency",)),
    "flash": (("attention flash fwd", "attention flash fwd+bwd"),
              ("compute.attention.flash_efficiency", "compute.attention.small_head_penalty",
               "compute.attention.tile_overhead_us", "compute.attention.backward_factor")),
    "unfused": (("attention unfused fwd", "attention unfused fwd+bwd"),
                ("compute.attention.unfused_score_passes", "compute.attention.unfused_backward_factor")),
    "fused-softmax": (("attention fused-softmax fwd", "attention fused-softmax bwd"),
                      ("compute.attention.score_hbm_fraction",)),
    "memory": (("memory add", "memory copy"), ("compute.hbm_fraction",)),
    "optimizer": (("optimizer step",), ("compute.kernels.optimizer_launch_us",
                                        "compute.kernels.optimizer_hbm_fraction")),
    "clip": (("optimizer clip",), ("compute.kernels.grad_clip_us",)),
    "scale": (("optimizer scale",), ("compute.kernels.loss_scale_us",)),
}


def all_rows(params: TwinParams) -> dict:
    rows = {}
    for path in SWEEPS:
        sweep = load_sweep(path)
        rows.update(compared(sweep, gpu_spec(sweep["device"]), params))
    return rows


def fit(groups: tuple[str, ...], names: tuple[str, ...], prior: TwinParams) -> TwinParams:
    bounds = TwinParams.bounds()

    def residuals(x):
        params = prior.replace(**dict(zip(names, x, strict=True)))
        rows = all_rows(params)
        return [math.log(r.ratio) for g in groups for r in rows[g]]

    x0 = [prior.to_dict()[n] for n in names]
    lo, hi = zip(*(bounds[n] for n in names), strict=True)
    result = least_squares(residuals, x0, bounds=(lo, hi), loss="soft_l1", f_scale=0.1, diff_step=1e-3)
    return prior.replace(**dict(zip(names, result.x, strict=True)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", choices=sorted(FITS), action="append", default=[])
    args = parser.parse_args()
    params = DEFAULT_PARAMS
    for name in args.fit:
        groups, names = FITS[name]
        params = fit(groups, names, params)
        print(", ".join(f"{n} = {params.to_dict()[n]:.4g}" for n in names))
    print(f"{'group':<28} {'rows':>5} {'median':>7} {'p90':>7} {'max':>7} {'mean pred/meas':>15}")
    for group, rows in sorted(all_rows(params).items()):
        med, p90, worst = summary(rows)
        mean = sum(r.ratio for r in rows) / len(rows)
        print(f"{group:<28} {len(rows):>5} {med:>7.1%} {p90:>7.1%} {worst:>7.1%} {mean:>15.3f}")


if __name__ == "__main__":
    main()
