"""How long a compute phase takes on the cluster's GPU, and how it and communication interfere.

A phase of 2 TFLOP that moves 3 GB on an H100 takes at least 2e12 / (989e12 × 0.7) s of
tensor time and 3e9 / (3,350e9 × 0.8) s of memory time (the shares of peak real kernels reach,
``TwinParams.compute``); the roofline says the larger, 1.1 ms here.  The rules, in order:

1. the phase has ``flops`` or ``mem_bytes`` and a measured duration on a GPU the trace names:
   the measured time scaled by the two GPUs' roofline times (keeps what the measurement knows
   about the kernel's efficiency, moves it to the new hardware);
2. it has ``flops`` or ``mem_bytes`` only: the roofline time on the cluster's GPU;
3. it has only a measured duration (or start and end): that duration, as measured.  When the
   trace was taken on another GPU model, or says on none, this is counted in ``kept_as_measured``
   so reports can say so.

Interference, while a phase and a communication kernel run on the same GPU at once:

* each channel of an NCCL kernel holds one SM for the kernel's whole life (it spins while it
  waits for peers), so the phase runs at ``1 - busy SMs / SMs`` of its speed;
* the phase takes memory bandwidth from the kernel's copy loop, so the channel's copy rate
  drops to ``compute.copy_rate_under_compute`` of what it is alone.  Only copy-bound collectives feel
  it: one limited by NVLink or the NIC keeps its rate.
"""

from __future__ import annotations

from dataclasses import dataclass

from traces.schema import ComputeEvent, Trace
from twin.hardware import GpuSpec, TopologyError, gpu_spec, peak_tflops
from twin.params import DEFAULT_PARAMS, TwinParams

DEFAULT_COMPUTE_DTYPE = "bfloat16"


def roofline_us(gpu: GpuSpec, flops: float, mem_bytes: float, dtype: str = DEFAULT_COMPUTE_DTYPE, *,
                params: TwinParams = DEFAULT_PARAMS) -> float:
    """Roofline time (µs) of ``flops`` and ``mem_bytes`` of device-memory traffic on ``gpu``."""
    math_us = flops / (peak_tflops(gpu, dtype) * 1e6 * params.compute.flops_fraction)
    memory_us = mem_bytes / (gpu.hbm_gbps * 1e3 * params.compute.hbm_fraction)
    return max(math_us, memory_us)


def compute_speed(busy_sms: int, gpu: GpuSpec, params: TwinParams = DEFAULT_PARAMS) -> float:
    """Speed of a compute phase (1 alone) while communication kernels hold ``busy_sms`` SMs."""
    return max(params.compute.min_speed, 1.0 - busy_sms / gpu.sm_count)


def trace_gpu(trace: Trace) -> GpuSpec | None:
    """The GPU model the trace was measured on, when its metadata names a known one."""
    meta = trace.metadata
    names = [meta.get("gpu"), *(meta.get("devices") or [])]
    for name in names:
        if isinstance(name, str):
            try:
                return gpu_spec(name)
            except TopologyError:
                continue
    return None


@dataclass
class ComputeTimer:
    """Times compute phases of one trace on one GPU model (rules in the module docstring)."""

    gpu: GpuSpec
    source: GpuSpec | None
    dtype: str = DEFAULT_COMPUTE_DTYPE
    params: TwinParams = DEFAULT_PARAMS
    kept_as_measured: int = 0
    """Phases timed as measured on another (or an unnamed) GPU model."""
    untimed: int = 0
    """Phases with neither a duration nor FLOPs/bytes: they take no time."""

    @classmethod
    def for_trace(cls, trace: Trace, gpu: GpuSpec, params: TwinParams = DEFAULT_PARAMS) -> ComputeTimer:
        dtype = trace.metadata.get("compute_dtype") or trace.metadata.get("dtype") or DEFAULT_COMPUTE_DTYPE
        return cls(gpu, trace_gpu(trace), str(dtype), params)

    def time_us(self, event: ComputeEvent) -> float:
        measured = event.duration_us
        if measured is None and event.start_us is not None and event.end_us is not None:
            measured = event.end_us - event.start_us
        if event.flops is not None or event.mem_bytes is not None:
            flops, mem = event.flops or 0.0, float(event.mem_bytes or 0)
            here = roofline_us(self.gpu, flops, mem, self.dtype, params=self.params)
            if measured is None or self.source is None:
                return here
            there = roofline_us(self.source, flops, mem, self.dtype, params=self.params)
            return measured * here / there if there > 0 else measured
        if measured is None:
            self.untimed += 1
            return 0.0
        if self.source is None or self.source.model != self.gpu.model:
            self.kept_as_measured += 1
        return measured
