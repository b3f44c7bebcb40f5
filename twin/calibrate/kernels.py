"""The compute and interference constants fitted to kernel timings on one GPU.

``benchmarks/interference.py --measure`` times, on a real GPU, bf16 matrix products and a
memory-bound elementwise kernel alone, a *channel copy* (k CTAs of t threads, each copying its own
slice with 16-byte loads and stores, one CTA per SM, as an NCCL Simple channel runs) alone, and
each beside the other.  ``fit_kernels`` fits, on part of those rows and with the same bounded
least squares as ``calibrate`` (``twin.calibrate.fit``), the constants the twin's replay and
channel model use, and predicts the rest:

* ``compute.flops_fraction`` from two of the matrix-product shapes (the other two held out);
* ``compute.hbm_fraction`` from the elementwise kernel (held out: the 1 GiB device copy of an
  earlier run, when its file is given);
* ``cta.hbm_share`` and ``cta.threads_at_half_rate`` (``twin.model.protocols.cta_copy_gbps`` at 2
  memory operations per byte, times the CTA count) from the channel copy alone at 1-8 CTAs and
  64, 256 and 1,024 threads (held out: 128 and 512 threads, and 16-64 CTAs, where the CTAs
  together approach what HBM gives);
* ``compute.copy_rate_under_compute`` from the copy beside matrix products at 1, 4, 16 and 64
  CTAs (held out: 2, 8 and 32 CTAs, and every copy beside the elementwise kernel).

What the twin's interference model cannot express is reported, not fitted: a compute phase runs
at ``1 - busy SMs / SMs`` whatever the communication kernel does with its SMs, and a copy keeps
one share of its rate whatever the compute is.  ``KernelFit.table`` prints both as predicted
against measured.  The fitted ``cta.*`` describe a plain copy CTA, which does less per byte than
an NCCL channel (no flags, no FIFO), so they are reported and kept out of ``KernelFit.params``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from tuner.config import Proto
from twin.calibrate.errors import CalibrationError
from twin.calibrate.fit import fit
from twin.compute import PhaseCost, copy_ratio, phase_speed
from twin.hardware import GpuSpec, gpu_spec, peak_tflops
from twin.model.protocols import cta_copy_gbps
from twin.params import DEFAULT_PARAMS, TwinParams

__all__ = ["KernelFit", "KernelRow", "fit_kernels", "kernel_rows"]

COPY_FIT_CTAS = (1, 2, 4, 8)
COPY_FIT_THREADS = (64, 256, 1024)
UNDER_FIT_CTAS = (1, 4, 16, 64)
COPY_OPS_PER_BYTE = 2.0
"""A plain copy loads and stores each byte once."""


@dataclass(frozen=True)
class KernelRow:
    """One timed kernel configuration: what it is, what was measured, and whether a fit uses it."""

    kind: str
    """``gemm``, ``elementwise``, ``copy``, ``copy_under`` (a copy's rate ratio beside compute) or
    ``compute_under`` (a compute kernel's speed beside a copy or a spinning kernel)."""
    label: str
    measured: float
    """ms for a kernel alone; a ratio (0-1) for the two ``_under`` kinds."""
    work: dict
    """What the model needs: flops, bytes, ctas, threads, the compute beside it."""
    fitted: bool


UNDER_COMPUTE = {"gemm": PhaseCost(1500.0, 0.0, "gemm", (8192, 8192, 8192)),
                 "elementwise": PhaseCost(760.0, 0.0, "memory", hbm_bytes=3 * (1 << 30))}
"""The computes ``benchmarks/interference.py`` runs beside the copy (its first product, 8192³ bf16,
and the 1 GiB float32 add), as the compute model sees them."""


def kernel_rows(doc: dict, earlier: dict | None = None) -> list[KernelRow]:
    """The rows of a file ``benchmarks/interference.py --measure`` wrote (``earlier``: the JSON
    of ``benchmarks/gpu_physics.py``, whose device copy is a held-out check of the HBM share)."""
    try:
        rows = doc["rows"]
        out = [KernelRow("gemm", f"bf16 {r['m']}x{r['k']}x{r['n']}", r["ms"], {"flops": r["flops"]}, i % 2 == 0)
               for i, r in enumerate(rows["gemm_alone"])]
        out += [KernelRow("elementwise", "x + y, 1 GiB float32 each", r["ms"], {"bytes": r["bytes"]}, True)
                for r in rows["elementwise_alone"]]
        out += [KernelRow("copy", f"copy {r['ctas']} CTAs x {r['threads']} threads", r["ms"],
                          {"bytes": r["bytes"], "ctas": r["ctas"], "threads": r["threads"]},
                          r["ctas"] in COPY_FIT_CTAS and r["threads"] in COPY_FIT_THREADS)
                for r in rows["copy_alone"]]
        out += [KernelRow("copy_under", f"copy {r['ctas']}x{r['threads']} beside {r['compute']}", r["copy_ratio"],
                          {"compute": r["compute"], "ctas": r["ctas"]},
                          r["compute"] == "gemm" and r["ctas"] in UNDER_FIT_CTAS)
                for r in rows["copy_under"] if r["copy_ratio"] is not None]
        out += [KernelRow("compute_under", f"{r['compute']} beside {r['by']} {r['ctas']}x{r['threads']}", r["speed"],
                          {"ctas": r["ctas"], "by": r["by"], "compute": r["compute"]}, False)
                for r in rows["compute_under"] if r["speed"] is not None]
    except (KeyError, TypeError) as err:
        raise CalibrationError(f"not a file of benchmarks/interference.py --measure (missing {err})") from None
    if earlier is not None:
        copy = next((c for c in earlier.get("ceilings", []) if c.get("what", "").startswith("device copy")), None)
        if copy is not None:
            nbytes = 2 * (1 << 30)
            out.append(KernelRow("elementwise", f"{copy['what']} (earlier run)", nbytes / copy["achieved"] / 1e6,
                                 {"bytes": nbytes}, False))
    return out


def _predict(row: KernelRow, gpu: GpuSpec, params: TwinParams) -> float:
    """The twin's value of ``row`` with ``params`` (ms, or the ratio)."""
    w = row.work
    if row.kind == "gemm":
        return w["flops"] / (peak_tflops(gpu, "bfloat16") * 1e9 * params.compute.flops_fraction)
    if row.kind == "elementwise":
        return w["bytes"] / (gpu.hbm_gbps * 1e6 * params.compute.hbm_fraction)
    if row.kind == "copy":
        gbps = w["ctas"] * cta_copy_gbps(gpu.hbm_gbps, Proto.SIMPLE, w["threads"], COPY_OPS_PER_BYTE, params=params)
        return w["bytes"] / COPY_OPS_PER_BYTE / (gbps * 1e6)
    if row.kind == "copy_under":  # beside the product: the rate fitted here; beside the add: its memory time
        if w["compute"] == "gemm":
            return params.compute.copy_rate_under_compute
        return copy_ratio([UNDER_COMPUTE[w["compute"]]], gpu, params)
    return phase_speed(UNDER_COMPUTE[w["compute"]], w["ctas"], w["by"] == "copy", gpu, params)


@dataclass(frozen=True)
class KernelFit:
    """What ``fit_kernels`` found."""

    gpu: GpuSpec
    prior: TwinParams
    params: TwinParams
    """The prior with the fitted ``compute.*`` constants (``cta.*`` are reported only)."""
    copy_cta: TwinParams
    """The prior with ``cta.*`` fitted to the plain copy."""
    rows: tuple[KernelRow, ...]
    moved: dict[str, tuple[float, float]]
    held: dict[str, str]

    def predicted(self, row: KernelRow) -> float:
        return _predict(row, self.gpu, self.copy_cta if row.kind == "copy" else self.params)

    def table(self) -> str:
        units = TwinParams.units()
        lines = [f"{'constant':<34} {'prior':>9} {'fitted':>9}  (fitted on the rows marked 'fit')"]
        lines += [f"{n:<34} {a:>9.4g} {b:>9.4g} {units[n]}" for n, (a, b) in self.moved.items()]
        lines += [f"{n:<34} held: {why}" for n, why in self.held.items()]
        lines.append("")
        lines.append(f"{'kernel':<44} {'used':>4} {'measured':>10} {'twin':>10} {'error':>7}")
        units_of = {"gemm": "ms", "elementwise": "ms", "copy": "ms", "copy_under": "ratio", "compute_under": "speed"}
        groups: dict[tuple, list[KernelRow]] = {}
        for r in self.rows:  # the copy beside each compute, each compute beside copies or spinning CTAs
            groups.setdefault((r.kind, r.work.get("compute", ""), r.work.get("by", "")), []).append(r)
        for (kind, _, _), chosen in groups.items():
            held = []
            for r in chosen:
                p = self.predicted(r)
                if not r.fitted:
                    held.append(abs(p / r.measured - 1))
                lines.append(f"{r.label:<44} {'fit' if r.fitted else '':>4} {r.measured:>10.4g} {p:>10.4g} "
                             f"{100 * (p / r.measured - 1):>+6.1f}%  {units_of[kind]}")
            if held:
                lines.append(f"{'':<44} held-out median |error| {100 * float(np.median(held)):.1f} % "
                             f"over {len(held)} rows")
        return "\n".join(lines)


def fit_kernels(rows: Sequence[KernelRow], device: str, prior: TwinParams = DEFAULT_PARAMS) -> KernelFit:
    """Fit the constants of the module docstring on the ``fitted`` rows of ``rows``."""
    gpu = gpu_spec(device)
    moved, held = {}, {}

    def fitted(kinds: tuple[str, ...], names: Sequence[str], start: TwinParams) -> TwinParams:
        train = [r for r in rows if r.kind in kinds and r.fitted]
        if not train:
            raise CalibrationError(f"no {', '.join(kinds)} rows to fit {', '.join(names)} on")
        errors: Callable[[TwinParams], np.ndarray] = lambda p: np.array(  # noqa: E731
            [math.log(_predict(r, gpu, p) / r.measured) for r in train])
        out = fit(errors, start, names)
        values, before = out.params.to_dict(), start.to_dict()
        moved.update({n: (before[n], values[n]) for n in out.free})
        held.update({h.name: h.reason for h in out.held})
        return out.params

    params = fitted(("gemm",), ["compute.flops_fraction"], prior)
    params = fitted(("elementwise",), ["compute.hbm_fraction"], params)
    params = fitted(("copy_under",), ["compute.copy_rate_under_compute"], params)
    copy_cta = fitted(("copy",), ["cta.hbm_share", "cta.threads_at_half_rate"], params)
    return KernelFit(gpu=gpu, prior=prior, params=params, copy_cta=copy_cta, rows=tuple(rows), moved=moved,
                     held=held)
