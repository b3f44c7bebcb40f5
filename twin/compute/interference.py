"""How a compute phase and NCCL kernels on the same GPU slow each other (measured on H200).

Both ways, from ``benchmarks/interference.py`` and ``benchmarks/gpu_interference_sweep.py``:

* **SMs.** Each NCCL channel holds one SM for its kernel's whole life.  A matrix product or
  attention was tiled for the whole GPU, so held SMs stretch its waves (``gemm_waves``): a
  product of exactly one wave takes two with one SM held (measured 0.51 of its speed), one of 54
  waves barely notices (0.99).  Memory-bound phases do not care (an elementwise add with 64 SMs
  held: 1.02 of its speed).  A phase the model cannot tile runs at ``1 - held / SMs``.
* **Memory and L2.** A channel that moves data slows a product beside it by
  ``interference.gemm_beside_copy`` more than its SM alone does (0.74-0.83 against a spinning
  CTA's 0.99).  The copy in turn loses the share of device memory the compute keeps busy, down to
  ``interference.copy_floor`` beside a kernel that saturates it (0.13-0.18 beside an add, 0.79-0.86
  beside products); beside a phase whose traffic is unknown it keeps ``copy_rate_under_compute``.

>>> from twin.hardware import gpu_spec
>>> from twin.compute.timer import PhaseCost
>>> h200 = gpu_spec("h200")
>>> one_wave = PhaseCost(89.0, 0.0, "gemm", (1408, 3072, 8192))
>>> round(phase_speed(one_wave, 1, False, h200), 2), round(phase_speed(one_wave, 1, True, h200), 2)
(0.5, 0.4)
>>> add = PhaseCost(250.0, 0.0, "memory", hbm_bytes=1e9)
>>> phase_speed(add, 64, True, h200), copy_ratio([add], h200)
(1.0, 0.14)
"""

from __future__ import annotations

from collections.abc import Iterable

from twin.compute.timer import PhaseCost, shape_us
from twin.hardware import GpuSpec
from twin.params import DEFAULT_PARAMS, TwinParams

MEMORY_BOUND = ("memory", "optimizer")
"""Categories whose speed is set by device memory, not by how many SMs they have."""


def compute_speed(busy_sms: int, gpu: GpuSpec, params: TwinParams = DEFAULT_PARAMS) -> float:
    """Speed of a phase the model cannot tile (1 alone) while NCCL kernels hold ``busy_sms`` SMs."""
    return max(params.compute.min_speed, 1.0 - busy_sms / gpu.sm_count)


def phase_speed(cost: PhaseCost, busy_sms: int, copying: bool, gpu: GpuSpec,
                params: TwinParams = DEFAULT_PARAMS) -> float:
    """Speed (1 alone) of a phase's GPU work while NCCL kernels hold ``busy_sms`` SMs, ``copying``
    when one of them moves data (its host time is the host thread's: ``twin.replay``)."""
    if cost.category == "host" or cost.gpu_us <= 0:
        return 1.0
    if cost.category in MEMORY_BOUND:
        return 1.0
    alone = shape_us(gpu, cost, params=params)
    if alone is None:
        gpu_speed = compute_speed(busy_sms, gpu, params)
    else:
        gpu_speed = alone / shape_us(gpu, cost, busy_sms=busy_sms, params=params) if busy_sms else 1.0
    if copying:
        gpu_speed *= params.compute.interference.gemm_beside_copy
    return max(params.compute.min_speed, gpu_speed)


def copy_ratio(costs: Iterable[PhaseCost], gpu: GpuSpec, params: TwinParams = DEFAULT_PARAMS) -> float:
    """A channel's copy rate (1 alone) while ``costs`` run on its GPU: the least any of them leaves."""
    ratio = 1.0
    for cost in costs:
        if cost.category == "host" or cost.gpu_us <= 0:
            continue
        if cost.hbm_bytes is None:
            ratio = min(ratio, params.compute.copy_rate_under_compute)
            continue
        busy = cost.hbm_bytes / (cost.gpu_us * gpu.hbm_gbps * 1e3 * params.compute.hbm_fraction)
        ratio = min(ratio, max(params.compute.interference.copy_floor, 1.0 - busy))
    return ratio
