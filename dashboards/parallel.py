"""Run one function over many inputs in parallel: local processes by default, or a Ray cluster.

A sweep of twelve candidate clusters is twelve independent replays; ``run_parallel(fn, items)``
hands them to a ``ProcessPoolExecutor`` (``engine="local"``) or to Ray tasks (``engine="ray"``:
the cluster ``address`` names, or a local Ray started on the spot), reports each completion to
``on_progress(done, total)`` and returns the results in the order of ``items``, whichever finished
first. ``fn`` and the items must pickle (a module-level function and plain data). An exception
raised by ``fn`` is raised here, with its traceback, as soon as its result is collected.

>>> run_parallel(abs, [-3, 2, -1], engine="serial")
[3, 2, 1]
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

from dashboards.inputs import InputError

ENGINES = ("local", "ray", "serial")
"""``local``: processes on this machine; ``ray``: Ray tasks; ``serial``: one after another, here."""

Progress = Callable[[int, int], None]


def default_workers() -> int:
    """Processes for a local sweep: the CPUs this process may use."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def run_parallel(fn: Callable[[Any], Any], items: Sequence[Any], *, engine: str = "local", workers: int | None = None,
                 address: str | None = None, on_progress: Progress | None = None) -> list[Any]:
    """``[fn(x) for x in items]``, computed on ``engine`` (one of ``ENGINES``)."""
    if engine not in ENGINES:
        raise InputError(f"unknown engine {engine!r}; expected one of {', '.join(ENGINES)}")
    items = list(items)
    report = on_progress or (lambda done, total: None)
    report(0, len(items))
    if engine == "ray":
        return _run_ray(fn, items, address, report)
    if engine == "serial" or len(items) <= 1:
        results = []
        for x in items:
            results.append(fn(x))
            report(len(results), len(items))
        return results
    results: list[Any] = [None] * len(items)
    # forkserver: a clean process to fork workers from (forking the threaded web server is unsafe),
    # with fn's module imported once there rather than in every worker
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([fn.__module__])
    with ProcessPoolExecutor(max_workers=min(workers or default_workers(), len(items)), mp_context=context) as pool:
        futures = {pool.submit(fn, x): i for i, x in enumerate(items)}
        for done, future in enumerate(as_completed(futures), 1):
            results[futures[future]] = future.result()
            report(done, len(items))
    return results


def _run_ray(fn: Callable[[Any], Any], items: list[Any], address: str | None, report: Progress) -> list[Any]:
    try:
        import ray
    except ImportError:
        raise InputError("engine 'ray' needs Ray: pip install 'ccltwin[ray]'") from None
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    remote = ray.remote(fn)
    refs = [remote.remote(x) for x in items]
    index = {ref: i for i, ref in enumerate(refs)}
    results: list[Any] = [None] * len(items)
    pending = list(refs)
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        results[index[ready[0]]] = ray.get(ready[0])
        report(len(items) - len(pending), len(items))
    return results
