"""The twin's compute model: how long each compute phase takes on a GPU, and how it and NCCL
kernels on that GPU slow each other.

* ``twin.compute.shapes``: GPU time from a phase's category and shape (matrix products by tile
  waves, attention fused or not, memory-bound bytes, the optimizer step);
* ``twin.compute.timer``: ``ComputeTimer`` (a trace's phases on the cluster's GPU, the rules for
  measured, shaped and FLOP-only phases, host time) and ``PhaseCost``;
* ``twin.compute.interference``: a phase's speed under held SMs and a copy beside it, and the
  copy's rate beside the phase;
* ``twin.compute.check``: the model against a measured sweep file.

Parameters live in ``TwinParams.compute`` (``twin.params``).
"""

from twin.compute.interference import compute_speed, copy_ratio, phase_speed
from twin.compute.shapes import attention_us, gemm_us, gemm_waves, memory_us, optimizer_us
from twin.compute.timer import ComputeError, ComputeTimer, PhaseCost, compute_dtype, roofline_us, trace_gpu

__all__ = ["ComputeError", "ComputeTimer", "PhaseCost", "attention_us", "compute_dtype", "compute_speed", "copy_ratio",
           "gemm_us", "gemm_waves", "memory_us", "optimizer_us", "phase_speed", "roofline_us", "trace_gpu"]
