"""How long each compute phase of a trace takes on the cluster's GPU (``ComputeTimer``).

A phase says what it computes (``category``, ``shape``, ``dtype``, ``kernels``, ``host_us`` of
``traces.schema.ComputeEvent``) or only how much (``flops``, ``mem_bytes``) or only how long it
took (``duration_us``).  The rules, in order:

1. it has a category and shape the model knows (or ``mem_bytes`` for ``memory``/``optimizer``):
   the shape model (``twin.compute.shapes``), at least ``kernels`` × the kernel floor.  When it
   was also measured on a GPU the trace names, the measured time scaled by the two GPUs' model
   times (keeps what the measurement knows about the kernel, moves it to the new hardware); one
   measured on a GPU the trace does not name is timed by the model;
2. it has ``flops`` or ``mem_bytes`` only: the roofline at ``compute.flops_fraction`` and
   ``compute.hbm_fraction`` of peak, at least the kernel floor, scaled like rule 1 when measured;
3. it has only a measured duration (or start and end): that duration, as measured.  When the
   trace was taken on another GPU model, or says on none, this is counted in ``kept_as_measured``.

A phase also has a host time: ``host_us`` when the trace knows it, else, for a phase the model
timed (rules 1-2), ``kernels`` × ``compute.kernels.host_us_per_kernel`` ÷ ``host_speed`` (the
framework issues kernels no faster than that, whatever the GPU does: why small models run far
slower than their FLOPs say; ``host_speed`` is the single-thread speed of the cluster's host CPU,
``twin.host_cpu``).  Alone, a phase takes the longer of the two (``PhaseCost.us``); in a replay
the rank's host thread pays the host time and the GPU the GPU time (``twin.replay``).  ``host`` phases have
host time only: ``host_us`` or their measured duration.

A Megatron trace's host also pays ``megatron_collective_host_us`` (÷ ``host_speed``) for each
collective call it issues (``ComputeTimer.collective_host_us``; the replay's host thread charges it).

A trace whose metadata says ``framework: megatron-lm`` (``traces.generate`` writes it) runs
Megatron-LM's layers, whose host time per kernel is ``compute.kernels.megatron_host_us_per_kernel``
(measured on that layer, ``benchmarks/gpu_megatron_layer.py``); its ``host`` phases that say
neither host time nor duration are the framework's own work: a schedule step
(``megatron_step_host_us``) or, named ``checkpoint``, a recomputed layer's checkpoint Function
(``megatron_checkpoint_host_us``), each ÷ ``host_speed``.

An attention phase whose name says ``backward`` or ``bwd`` is timed as the backward kernel; an
optimizer phase whose name says ``clip`` as gradient clipping, ``scale`` or
``inf`` as loss scaling, else as the step.

>>> from traces.schema import ComputeEvent
>>> from twin.hardware import gpu_spec
>>> timer = ComputeTimer(gpu_spec("h200"), None)
>>> up = ComputeEvent(0, "mlp_up", category="gemm", shape=(8192, 2048, 4096), dtype="bfloat16")
>>> round(timer.time_us(up), 1)
184.7
>>> tiny = ComputeEvent(1, "mlp_up", category="gemm", shape=(16, 128, 64), kernels=1)
>>> timer.time_us(tiny)  # host-bound: the framework's time per kernel
32.0
"""

from __future__ import annotations

from dataclasses import dataclass

from traces.errors import CcltwinError
from traces.schema import ComputeEvent, Trace
from twin.compute.shapes import (
    BYTES,
    DTYPE_ALIASES,
    attention_us,
    fused_softmax_attention_us,
    gemm_bytes,
    gemm_us,
    memory_us,
    optimizer_kind,
    optimizer_us,
)
from twin.hardware import GpuSpec, TopologyError, gpu_spec, peak_tflops
from twin.params import DEFAULT_PARAMS, TwinParams

DEFAULT_COMPUTE_DTYPE = "bfloat16"
MEGATRON = "megatron-lm"
"""The ``framework`` a trace of Megatron-LM's layers names in its metadata."""


class ComputeError(CcltwinError):
    """A compute phase the model cannot time as written (an element type it does not know)."""


def compute_dtype(name: str, where: str = "compute phase") -> str:
    """The compute model's name for element type ``name`` (``bf16`` → ``bfloat16``), or ``ComputeError``.

    >>> compute_dtype("bf16"), compute_dtype("fp8")
    ('bfloat16', 'fp8_e4m3')
    """
    dtype = DTYPE_ALIASES.get(name, name)
    if dtype not in BYTES:
        raise ComputeError(f"{where}: unknown element type {name!r}; expected one of {', '.join(BYTES)}")
    return dtype


@dataclass(frozen=True, slots=True)
class PhaseCost:
    """What one compute phase costs on the GPU alone: the twin's unit of compute timing."""

    gpu_us: float
    """GPU time alone, at full speed."""
    host_us: float
    """Host time issuing it (the replay's host thread pays it before the GPU may start the phase)."""
    category: str | None = None
    shape: tuple[int, ...] = ()
    dtype: str = DEFAULT_COMPUTE_DTYPE
    hbm_bytes: float | None = None
    """Device-memory traffic while it runs (``None``: unknown), for how much it slows a copy."""
    backward: bool = False

    @property
    def us(self) -> float:
        """Its time alone: the GPU's or the host's, whichever is longer."""
        return max(self.gpu_us, self.host_us)


def roofline_us(gpu: GpuSpec, flops: float, mem_bytes: float, dtype: str = DEFAULT_COMPUTE_DTYPE, *,
                params: TwinParams = DEFAULT_PARAMS) -> float:
    """Roofline time (µs) of ``flops`` and ``mem_bytes`` of device-memory traffic on ``gpu``."""
    math_us = flops / (peak_tflops(gpu, dtype) * 1e6 * params.compute.flops_fraction)
    return max(math_us, memory_us(gpu, mem_bytes, params=params))


def shape_us(gpu: GpuSpec, cost: PhaseCost, *, busy_sms: int = 0, params: TwinParams = DEFAULT_PARAMS) -> float | None:
    """GPU µs of a phase from its category and shape with ``busy_sms`` SMs held (``None``: not
    a shape the model knows)."""
    c, s = cost.category, cost.shape
    if c == "gemm" and len(s) in (3, 4):
        batch, m, n, k = s if len(s) == 4 else (1, *s)
        return gemm_us(gpu, m, n, k, cost.dtype, batch, busy_sms=busy_sms, params=params)
    if c in ("attention", "attention-unfused") and len(s) == 5:
        return attention_us(gpu, *s, fused=c == "attention", backward=cost.backward, busy_sms=busy_sms, params=params)
    if c == "attention-fused-softmax" and len(s) == 5:
        return fused_softmax_attention_us(gpu, *s, cost.dtype, backward=cost.backward, busy_sms=busy_sms,
                                          params=params)
    return None


def _costed(base: PhaseCost, gpu_us: float, host_us: float, hbm_bytes: float | None) -> PhaseCost:
    """``base`` with these times and memory traffic: ``dataclasses.replace`` without its look at
    the fields on every call (a replay costs every compute phase of its trace)."""
    return PhaseCost(gpu_us=gpu_us, host_us=host_us, category=base.category, shape=base.shape, dtype=base.dtype,
                     hbm_bytes=hbm_bytes, backward=base.backward)


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
    host_speed: float = 1.0
    """The host CPU's single-thread speed relative to where ``host_us_per_kernel`` was measured
    (``twin.host_cpu``): the framework's modelled host time is divided by it."""
    framework: str | None = None
    """The trace's ``framework`` metadata: ``megatron-lm`` takes Megatron's host profile."""

    @classmethod
    def for_trace(cls, trace: Trace, gpu: GpuSpec, params: TwinParams = DEFAULT_PARAMS,
                  host_speed: float = 1.0) -> ComputeTimer:
        dtype = trace.metadata.get("compute_dtype") or trace.metadata.get("dtype") or DEFAULT_COMPUTE_DTYPE
        framework = trace.metadata.get("framework")
        return cls(gpu, trace_gpu(trace), str(dtype), params, host_speed=host_speed,
                   framework=framework if isinstance(framework, str) else None)

    @property
    def _megatron(self) -> bool:
        return self.framework == MEGATRON

    def _framework_host_us(self, event: ComputeEvent) -> float:
        """A ``host`` phase that says no time: the framework's own work (module docstring)."""
        if not self._megatron:
            return 0.0
        kernels = self.params.compute.kernels
        mine = kernels.megatron_checkpoint_host_us if "checkpoint" in event.name else kernels.megatron_step_host_us
        return mine / self.host_speed

    def collective_host_us(self) -> float:
        """Host µs the framework spends issuing one collective call: a Megatron trace's
        ``compute.kernels.megatron_collective_host_us`` ÷ ``host_speed``; 0 for any other trace
        (a profile's collectives come with the gaps it measured)."""
        if not self._megatron:
            return 0.0
        return self.params.compute.kernels.megatron_collective_host_us / self.host_speed

    def time_us(self, event: ComputeEvent) -> float:
        """The phase's time alone on ``gpu``, µs."""
        return self.cost(event).us

    def cost(self, event: ComputeEvent) -> PhaseCost:
        """What the phase costs on ``gpu`` (rules in the module docstring)."""
        measured = event.duration_us
        if measured is None and event.start_us is not None and event.end_us is not None:
            measured = event.end_us - event.start_us
        kernels = self.params.compute.kernels
        name = event.name.lower()
        dtype = compute_dtype(event.dtype or self.dtype, f"compute phase {event.name!r} (id {event.id})")
        base = PhaseCost(0.0, event.host_us or 0.0, event.category, tuple(event.shape), dtype,
                         backward="backward" in name or "bwd" in name)
        if event.category == "host":
            host = event.host_us if event.host_us is not None else measured
            return _costed(base, 0.0, self._framework_host_us(event) if host is None else host, 0.0)
        modelled = self._model(base, event, self.gpu)
        if modelled is None:
            if measured is None:
                self.untimed += 1
            elif self.source is None or self.source.model != self.gpu.model:
                self.kept_as_measured += 1
            return _costed(base, measured or 0.0, base.host_us, None)
        gpu_us, hbm = modelled
        gpu_us = max(gpu_us, event.kernels * kernels.floor_us)
        host = event.host_us
        if measured is not None and self.source is not None:  # a measurement on an unnamed GPU says nothing here
            there = self._model(base, event, self.source)
            gpu_us = measured * gpu_us / max(there[0], event.kernels * kernels.floor_us)
        elif measured is None and host is None:
            per_kernel = kernels.megatron_host_us_per_kernel if self._megatron else kernels.host_us_per_kernel
            host = event.kernels * per_kernel / self.host_speed
        return _costed(base, gpu_us, host or 0.0, hbm)

    def _model(self, base: PhaseCost, event: ComputeEvent, gpu: GpuSpec) -> tuple[float, float | None] | None:
        """(GPU µs, memory traffic) of the phase on ``gpu`` from rules 1-2, or ``None``."""
        p = self.params
        by_shape = shape_us(gpu, base, params=p)
        if by_shape is not None:
            if base.category == "gemm":
                batch, m, n, k = base.shape if len(base.shape) == 4 else (1, *base.shape)
                return by_shape, gemm_bytes(m, n, k, base.dtype, batch) * p.compute.interference.gemm_dram_traffic
            return by_shape, None
        if event.category == "memory" and event.mem_bytes is not None:
            return memory_us(gpu, event.mem_bytes, params=p), float(event.mem_bytes)
        if event.category == "optimizer" and event.mem_bytes is not None:
            return optimizer_us(gpu, event.mem_bytes, optimizer_kind(event.name), params=p), float(event.mem_bytes)
        if event.flops is not None or event.mem_bytes is not None:
            return roofline_us(gpu, event.flops or 0.0, float(event.mem_bytes or 0), base.dtype, params=p), None
        return None
