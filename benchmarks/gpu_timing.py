"""Timing on a CUDA GPU with events, shared by the GPU benchmarks (``gpu_compute_sweep``,
``gpu_interference_sweep``, ``interference``): median times on a stream, and two pieces of work
side by side on two streams with a check that one ran inside the other."""

from __future__ import annotations

import statistics

import torch


def events(n: int = 2) -> list[torch.cuda.Event]:
    return [torch.cuda.Event(enable_timing=True) for _ in range(n)]


def timed_ms(stream: torch.cuda.Stream | None, work, repeats: int = 5) -> float:
    """Median ms of ``work()`` on ``stream`` (the current one if ``None``), by events, after one warm-up."""
    with torch.cuda.stream(stream or torch.cuda.current_stream()):
        work()
        torch.cuda.synchronize()
        times = []
        for _ in range(repeats):
            a, b = events()
            a.record()
            work()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
    return statistics.median(times)


def overlap(first_stream, first, second_stream, second) -> tuple[float, float, bool]:
    """Start ``first``, then ``second`` beside it: (first ms, second ms, whether second ran inside first)."""
    f0, f1, s0, s1 = events(4)
    torch.cuda.synchronize()
    with torch.cuda.stream(first_stream):
        f0.record()
        first()
        f1.record()
    with torch.cuda.stream(second_stream):
        second_stream.wait_event(f0)
        s0.record()
        second()
        s1.record()
    torch.cuda.synchronize()
    return f0.elapsed_time(f1), s0.elapsed_time(s1), f0.elapsed_time(s0) >= 0 and s1.elapsed_time(f1) > 0
