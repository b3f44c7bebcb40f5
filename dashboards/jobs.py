"""Long computations of the app, run beside the web server so that no page freezes.

A page's "Run" button calls ``Jobs.start(fn, *args)`` and keeps the job id; a ``dcc.Interval``
then asks ``Jobs.status(id)`` every half second and draws the progress bar until the job is
done. ``fn`` gets a ``progress(done, total)`` callback as its ``on_progress`` keyword. A user
error (``twin_api.USER_ERRORS``) ends the job with its message; any other exception is a bug and
is raised again, traceback and all, when the page collects the result.

>>> jobs = Jobs()
>>> job = jobs.start(lambda n, on_progress: on_progress(n, n) or n * 2, 21)
>>> jobs.wait(job).result
42
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from dashboards.twin_api import USER_ERRORS

MAX_RUNNING = 2
"""Jobs computing at once (each may fan out to processes itself)."""
KEEP_FINISHED = 32
"""Finished jobs whose results stay available to the pages (the oldest are forgotten first)."""


@dataclass(frozen=True)
class JobStatus:
    done: int
    total: int
    finished: bool
    result: Any = None
    error: str | None = None


class Jobs:
    """Background jobs by id, with their progress."""

    def __init__(self, max_running: int = MAX_RUNNING) -> None:
        self._pool = ThreadPoolExecutor(max_workers=max_running, thread_name_prefix="ccltwin-job")
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._futures: dict[str, Future] = {}
        self._progress: dict[str, tuple[int, int]] = {}

    def start(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> str:
        """Run ``fn(*args, on_progress=..., **kwargs)`` in the background; its job id."""
        job = f"job{next(self._ids)}"

        def progress(done: int, total: int) -> None:
            with self._lock:
                self._progress[job] = (done, total)

        def work() -> tuple[Any, str | None]:
            try:
                return fn(*args, on_progress=progress, **kwargs), None
            except USER_ERRORS as err:
                return None, str(err)

        with self._lock:
            self._drop_old()
            self._progress[job] = (0, 0)
            self._futures[job] = self._pool.submit(work)
        return job

    def status(self, job: str) -> JobStatus:
        """Where ``job`` is; once finished, its result or error message (a bug is raised here)."""
        with self._lock:
            future = self._futures.get(job)
            done, total = self._progress.get(job, (0, 0))
        if future is None:
            return JobStatus(0, 0, True, error=f"job {job!r} is no longer kept (too many since, or the server "
                                               "restarted): run it again")
        if not future.done():
            return JobStatus(done, total, False)
        result, error = future.result()
        return JobStatus(max(done, total), total, True, result, error)

    def wait(self, job: str) -> JobStatus:
        """Block until ``job`` finishes (for tests and scripts)."""
        with self._lock:
            future = self._futures[job]
        future.result()
        return self.status(job)

    def _drop_old(self) -> None:
        """Forget the oldest finished jobs beyond ``KEEP_FINISHED`` (their results hold whole reports)."""
        finished = [job for job, future in self._futures.items() if future.done()]
        for job in finished[:max(0, len(finished) - KEEP_FINISHED)]:
            del self._futures[job]
            self._progress.pop(job, None)
