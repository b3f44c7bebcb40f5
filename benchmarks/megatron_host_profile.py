"""Megatron-LM's host profile from ``benchmarks/data/h200-megatron-layer.json``.

    python -m benchmarks.megatron_host_profile

Reads the rounds ``benchmarks/gpu_megatron_layer.py`` measured on the H200 machine and derives
what the twin charges a Megatron trace (``compute.kernels.megatron_*`` in ``twin.params``; the
kernel counts in ``traces.generate.transformer``): the kernels of one layer's forward and
backward (the slope over 1-8 layers of a middle pipeline stage, TP 1, dropout on), its host time
per kernel (median over the rounds) scaled to the reference host by the plain pre-norm layer
measured in the same rounds (``plain_host_us_per_kernel`` there against
``compute.kernels.host_us_per_kernel``), and the micro-batch's host time outside its kernels
(the middle stage's intercept: the schedule's step, buffers and ``torch.autograd.backward``).

>>> p = megatron_profile(load())
>>> p.forward_kernels, p.backward_kernels
(18, 45)
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "h200-megatron-layer.json"
REFERENCE_PLAIN_US_PER_KERNEL = 32.0
"""``compute.kernels.host_us_per_kernel``: the plain layer on the reference host (h200-compute.json)."""


@dataclass(frozen=True)
class MegatronProfile:
    """Megatron-LM's layer and micro-batch on the host, as the twin uses them."""

    forward_kernels: int
    backward_kernels: int
    host_us_per_kernel: float
    """Measured, median over the rounds."""
    plain_host_us_per_kernel: float
    """The plain layer in the same rounds, median."""
    step_host_us: float
    """Per micro-batch outside kernels (middle stage), median."""
    checkpoint_host_us: float
    """Per recomputed layer beyond its forward's kernels, median."""

    @property
    def scale(self) -> float:
        """Measured host time → the reference host's (by the plain layer)."""
        return REFERENCE_PLAIN_US_PER_KERNEL / self.plain_host_us_per_kernel

    @property
    def reference_host_us_per_kernel(self) -> float:
        """Per kernel on the reference host: ``compute.kernels.megatron_host_us_per_kernel``."""
        return self.host_us_per_kernel * self.scale

    @property
    def reference_step_host_us(self) -> float:
        """Per schedule step (a micro-batch has a forward and a backward step) on the reference
        host: ``compute.kernels.megatron_step_host_us``."""
        return self.step_host_us / 2 * self.scale

    @property
    def reference_checkpoint_host_us(self) -> float:
        """``compute.kernels.megatron_checkpoint_host_us``."""
        return self.checkpoint_host_us * self.scale


def load(path: Path = DATA) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _variants(data: dict, name: str) -> list[dict]:
    return [v for run in data["runs"] for key, v in run["variants"].items() if key.split("#")[0] == name]


def _per_kernel(variant: dict) -> float:
    fit = variant["fit"]
    return (fit["forward_us"]["per_layer"] + fit["backward_us"]["per_layer"]) / fit["kernels"]["per_layer"]


def _layer_us(variant: dict) -> float:
    fit = variant["fit"]
    return fit["forward_us"]["per_layer"] + fit["backward_us"]["per_layer"]


def _beyond_kernels(more: dict, base: dict, per_kernel: float) -> float:
    """Host µs per layer that variant ``more`` spends beyond ``base`` and its extra kernels."""
    extra_kernels = more["fit"]["kernels"]["per_layer"] - base["fit"]["kernels"]["per_layer"]
    return _layer_us(more) - _layer_us(base) - extra_kernels * per_kernel


def _checkpoint_us(run: dict, per_kernel: float) -> float | None:
    """A run's recomputed layer beyond its forward's kernels (``None``: not measured there)."""
    variants = run["variants"]
    if "tp1-recompute-full" not in variants or "tp1" not in variants:
        return None
    return _beyond_kernels(variants["tp1-recompute-full"], variants["tp1"], per_kernel)


def torch_softmax_ratios(data: dict) -> list[tuple[float, float]]:
    """(host time, kernels) of a layer whose attention runs torch's softmax over the fused layer's,
    each fallback round against the fused round of the same TP degree just before it."""
    out, fused = [], {}
    for run in data["runs"]:
        for name, variant in run["variants"].items():
            base = name.split("#")[0]
            if variant["softmax"] == "fused" and variant["recompute"] == "none" and variant["dropout"] > 0:
                fused[base] = variant
            elif variant["softmax"] == "torch" and (twin := fused.get(base.replace("-torch-softmax", ""))):
                kernels = variant["fit"]["kernels"]["per_layer"] / twin["fit"]["kernels"]["per_layer"]
                out.append((_layer_us(variant) / _layer_us(twin), kernels))
        fused = {}
    return out


def megatron_profile(data: dict) -> MegatronProfile:
    """The profile from the benchmark's rounds (module docstring)."""
    megatron, plain = _variants(data, "tp1-middle-stage"), _variants(data, "plain-middle-stage")
    first = megatron[0]["fit"]
    forward = round(first["forward_kernels"]["per_layer"])
    per_kernel = statistics.median(map(_per_kernel, megatron))
    step = [v["fit"]["forward_us"]["per_micro_batch"] + v["fit"]["backward_us"]["per_micro_batch"] for v in megatron]
    checkpoint = [c for run in data["runs"] if (c := _checkpoint_us(run, per_kernel)) is not None]
    return MegatronProfile(forward, round(first["kernels"]["per_layer"]) - forward, per_kernel,
                           statistics.median(map(_per_kernel, plain)), statistics.median(step),
                           statistics.median(checkpoint))


def main() -> None:
    data = load()
    p = megatron_profile(data)
    print(f"layer kernels: {p.forward_kernels} forward, {p.backward_kernels} backward")
    print(f"host per kernel: Megatron {p.host_us_per_kernel:.1f} µs, plain {p.plain_host_us_per_kernel:.1f} µs "
          f"-> {p.reference_host_us_per_kernel:.1f} µs on the reference host")
    print(f"micro-batch outside kernels: {p.step_host_us:.0f} µs -> {p.reference_step_host_us:.0f} µs per step "
          "on the reference host")
    print(f"checkpointed layer beyond its kernels: {p.checkpoint_host_us:.0f} µs -> "
          f"{p.reference_checkpoint_host_us:.0f} µs on the reference host")
    ratios = torch_softmax_ratios(data)
    print(f"torch softmax fallback over the fused layer, {len(ratios)} same-round pairs: host time "
          f"{statistics.median(r for r, _ in ratios):.3f}x, kernels {statistics.median(k for _, k in ratios):.3f}x")
    print("\nround                      fwd µs/layer  bwd µs/layer  kernels  µs/kernel  step µs")
    for run in data["runs"]:
        for name, v in run["variants"].items():
            f = v["fit"]
            print(f"{name:26s} {f['forward_us']['per_layer']:12.0f} {f['backward_us']['per_layer']:13.0f} "
                  f"{f['kernels']['per_layer']:8.0f} {_per_kernel(v):10.1f} "
                  f"{f['forward_us']['per_micro_batch'] + f['backward_us']['per_micro_batch']:8.0f}")


if __name__ == "__main__":
    main()
