"""A progress bar with an ETA for long CLI runs, silent under ``--json``.

``ccltwin whatif`` replaying four clusters::

    with progress_bar("replaying clusters", quiet=as_json) as update:
        report = compare(workload, candidates, on_progress=update)

``update(done, total)`` is the ``on_progress`` callback every study here takes. The bar goes to
stderr (stdout stays the report) and appears only once the run has taken ``SHOW_AFTER_S``, so a
quick run prints nothing but its result.

>>> with progress_bar("nothing", quiet=True) as update:
...     update(1, 2)
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

SHOW_AFTER_S = 2.0
"""A run that ends sooner shows no bar."""


@contextmanager
def progress_bar(description: str, *, quiet: bool = False, console: Console | None = None
                 ) -> Iterator[Callable[[int, int], None]]:
    """A context whose value is ``update(done, total)``; nothing is drawn when ``quiet``."""
    if quiet:
        yield lambda done, total: None
        return
    started = time.monotonic()
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TextColumn("ETA"), TimeRemainingColumn(), console=console or Console(file=sys.stderr),
                   transient=True)
    task = bar.add_task(description, total=None)
    shown = False

    def update(done: int, total: int) -> None:
        nonlocal shown
        bar.update(task, completed=done, total=total or None)
        if not shown and time.monotonic() - started >= SHOW_AFTER_S:
            bar.start()
            shown = True

    try:
        yield update
    finally:
        if shown:
            bar.stop()
