"""The compute model against a measured sweep (``benchmarks/gpu_compute_sweep.py``,
``benchmarks/gpu_interference_sweep.py`` and ``benchmarks/gpu_attention_sweep.py`` files): each
measured row beside what the model says.

>>> from pathlib import Path
>>> from twin.hardware import gpu_spec
>>> data = Path(__file__).resolve().parents[2] / "benchmarks" / "data"
>>> sweep = load_sweep(data / "h200-compute.json")
>>> rows = compared(sweep, gpu_spec(sweep["device"]))
>>> sorted(rows)[:3]
['attention flash fwd', 'attention flash fwd+bwd', 'attention unfused fwd']
>>> sorted(compared(load_sweep(data / "h200-attention.json"), gpu_spec("h200")))
['attention fused-softmax bwd', 'attention fused-softmax fwd']
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

from traces.errors import CcltwinError
from twin.compute.interference import phase_speed
from twin.compute.shapes import (
    attention_us,
    fused_softmax_attention_us,
    gemm_us,
    memory_us,
    optimizer_kind,
    optimizer_us,
)
from twin.compute.timer import PhaseCost, compute_dtype
from twin.hardware import GpuSpec
from twin.params import DEFAULT_PARAMS, TwinParams

SWEEP_SECTIONS = ("gemm", "attention", "fused_softmax", "memory", "optimizer", "floor")
"""Sections a compute sweep file has (``under_spin`` may come from either sweep)."""
FLASH_BACKWARD_HOST_US = 450.0
"""Host time an eager ``backward()`` call adds to the attention fwd+bwd rows (measured: a tiny
``linear`` forward and backward takes 404 µs of host time), so the GPU time is compared."""


class SweepError(CcltwinError):
    """A file that is not a compute sweep."""


@dataclass(frozen=True)
class Compared:
    """One measured row beside the model."""

    what: str
    measured: float
    predicted: float

    @property
    def ratio(self) -> float:
        """Predicted over measured."""
        return self.predicted / self.measured


def load_sweep(path: str | Path) -> dict:
    """A sweep file's JSON; ``SweepError`` naming the file when it is not one."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise SweepError(f"{path}: not a readable JSON sweep ({err})") from err
    sections = (*SWEEP_SECTIONS, "under_spin")
    if not isinstance(data, dict) or "device" not in data or not any(k in data for k in sections):
        raise SweepError(f"{path}: not a file of benchmarks/gpu_compute_sweep.py, gpu_interference_sweep.py or "
                         "gpu_attention_sweep.py")
    return data


def compared(sweep: dict, gpu: GpuSpec, params: TwinParams = DEFAULT_PARAMS) -> dict[str, list[Compared]]:
    """Measured against predicted, grouped (``gemm bfloat16``, ``attention flash fwd``, ``memory add``...)."""
    out: dict[str, list[Compared]] = {}

    def add(group: str, what: str, measured: float, predicted: float) -> None:
        out.setdefault(group, []).append(Compared(what, measured, predicted))

    for r in sweep.get("gemm", ()):
        if "us" in r:
            group = "gemm wave" if r["what"] == "wave" else f"gemm {r['dtype']}"
            add(group, f"{r['m']}x{r['n']}x{r['k']}", r["us"],
                gemm_us(gpu, r["m"], r["n"], r["k"], compute_dtype(r["dtype"]), params=params))
    for r in sweep.get("attention", ()):
        shape = (r["batch"], r["heads"], r["seq"], r["seq"], r["head_dim"])
        fused = r["kind"] == "flash"
        what = "x".join(map(str, shape))
        add(f"attention {r['kind']} fwd", what, r["fwd_us"], attention_us(gpu, *shape, fused=fused, params=params))
        add(f"attention {r['kind']} fwd+bwd", what, r["fwd_bwd_us"],
            attention_us(gpu, *shape, fused=fused, backward=True, params=params) + FLASH_BACKWARD_HOST_US)
    for r in sweep.get("fused_softmax", ()):
        if "fwd_us" in r:
            shape = (r["micro_batch"], r["heads"], r["seq"], r["seq"], r["head_dim"])
            what, dtype = "x".join(map(str, shape)), compute_dtype(r["dtype"])
            add("attention fused-softmax fwd", what, fused_softmax_forward_us(r),
                fused_softmax_attention_us(gpu, *shape, dtype, params=params))
            add("attention fused-softmax bwd", what, fused_softmax_backward_us(r),
                fused_softmax_attention_us(gpu, *shape, dtype, backward=True, params=params))
    floor = params.compute.kernels.floor_us
    for r in sweep.get("memory", ()):
        if r["op"] in ("copy", "add"):  # streaming ops; norms and softmax run below the streaming rate
            add(f"memory {r['op']}", f"{r['bytes']} B", r["us"], max(floor, memory_us(gpu, r["bytes"], params=params)))
    for r in sweep.get("optimizer", ()):
        kind = optimizer_kind(r["what"])
        add(f"optimizer {kind}", f"{r['params']} params", r["us"], optimizer_us(gpu, r["bytes"], kind, params=params))
    for r in sweep.get("under_spin", ()):
        if r.get("nested", True) and "speed" in r:
            cost = PhaseCost(gemm_us(gpu, r["m"], r["n"], r["k"], params=params), 0.0, "gemm", (r["m"], r["n"], r["k"]),
                             "bfloat16", 0.0)
            add("gemm under held SMs", f"{r['m']}x{r['n']}x{r['k']} {r['ctas']} SMs", r["speed"],
                phase_speed(cost, r["ctas"], False, gpu, params))
    return out


def fused_softmax_forward_us(row: dict) -> float:
    """Megatron's attention forward from a ``gpu_attention_sweep`` row: the products and the
    causal softmax in one graph, and torch's dropout (the row's ``fwd_us`` also copies the
    dropout's output, which Megatron does not)."""
    return row["fwd_no_dropout_us"] + row["dropout_us"]


def fused_softmax_backward_us(row: dict) -> float:
    """Its backward: the row's ``bwd_us`` ran dropout's backward as two multiplies
    (``dropout_mul_us``), where torch runs one kernel of a dropout's bytes (``dropout_us``)."""
    return row["bwd_us"] - row["dropout_mul_us"] + row["dropout_us"]


def summary(rows: list[Compared]) -> tuple[float, float, float]:
    """(median, 90th percentile, largest) absolute relative error of ``rows``."""
    errors = sorted(abs(r.ratio - 1) for r in rows)
    return statistics.median(errors), errors[int(0.9 * (len(errors) - 1))], errors[-1]
