"""Live tuning of a running job's NCCL collectives, with one added line (docs/live.md).

>>> import live                                  # imports neither torch nor the twin
>>> live.current() is None
True

In the training script, on every rank::

    live.enable()                                 # tune; or live.enable(mode="apply")
    for batch in loader:
        ...
        optimizer.step()                          # each optimizer step ends an iteration

``live.enable`` returns the process's :class:`live.session.Live`, also a context manager;
``live.step()`` ends an iteration where there is no optimizer. A launcher sets defaults for the
script's ``enable()`` with ``live.defaults(...)`` or the environment: ``CCLTWIN_LIVE_STORE``,
``CCLTWIN_LIVE_PLAN``, ``CCLTWIN_LIVE_MODE``; ``CCLTWIN_LIVE=0`` turns ``enable`` off.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["current", "defaults", "enable", "step"]

BUILTIN: dict[str, Any] = {
    "plan": None, "store": "ccltwin.db", "search": "ours", "budget": None, "mode": "tune", "clock": None,
    "hardware": None, "seed": 0, "min_bytes": 0, "deadline_s": 10.0, "max_misses": 3, "fail_factor": 10.0,
    "max_wait": 5, "decision_log": None, "quiet": False, "interference": 0.0,
    "keep_open": False,
}
"""Every option of ``enable`` and its value when nobody sets it."""
ENVIRONMENT = {"plan": "CCLTWIN_LIVE_PLAN", "store": "CCLTWIN_LIVE_STORE", "mode": "CCLTWIN_LIVE_MODE"}

_current: Any = None
_enabled = 0
_defaults: dict[str, Any] = {}


def defaults(**options: Any) -> None:
    """Set what the next ``enable()`` uses for options it is not given (a launcher's time source,
    a site's store), e.g. ``live.defaults(clock=TwinExecutor(cluster))`` in CI."""
    unknown = sorted(set(options) - set(BUILTIN))
    if unknown:
        from live.errors import LiveError

        raise LiveError(f"unknown option(s) {', '.join(unknown)}; enable takes {', '.join(BUILTIN)}")
    _defaults.update(options)


def enable(plan: Any = None, store: Any = None, search: str | None = None, budget: int | None = None,
           mode: str | None = None, **options: Any) -> Any:
    """Tune (or, ``mode="apply"``, apply the store's winners to) every NCCL collective the job
    issues, from the next iteration boundary on; call it on every rank, before or after
    ``init_process_group``. An option left ``None`` takes ``defaults()``'s, the environment's or
    the built-in value (``BUILTIN``).

    Parameters
    ----------
    plan : str, PathLike or tuner.plan.Plan
        A warm-start plan (``ccltwin rank``'s output): searches start from its ranking.
    store : str or PathLike
        The tuning store (``ccltwin.db``): every trial is recorded there as it comes, the winners
        end there, and the searches' states beside it (``<store>.live/``), so that a restarted
        job resumes; the recommendation for the next launch is written next to it.
    search : {"ours", "autoccl", "default"}
        The search per task; ``budget`` caps its trials.
    mode : {"tune", "apply"}
        ``apply`` tunes nothing and runs the store's winners.
    **options
        ``clock``: the time source (on NCCL the plugin's profiler events; CI passes a
        :class:`tuner.executor.Executor`, the twin's, whose ``measure`` times each call);
        ``hardware``: the cluster identity of the measurements (else the time source's, the
        plan's, the GPU's); ``seed``; ``min_bytes``: smaller collectives are left to NCCL;
        ``deadline_s``, ``max_misses``: how long a round waits for acknowledgements and how many
        rounds may be missed before tuning stops; ``fail_factor``, ``max_wait``: a trial slower
        than that many times NCCL's default, or without a time after that many boundaries,
        fails; ``decision_log``: ``path{rank}.jsonl`` where every rank appends each call's plugin
        decision; ``quiet``: no messages, no summary; ``interference``: the share of the GPU's SMs
        the job's compute holds while collectives run, recorded with each measurement;
        ``keep_open``: rounds go on after every task has a winner, for tasks that come later (the
        benchmark's sizes, one after the other).
    """
    global _current, _enabled
    from live.errors import LiveError
    from live.session import Live, settings_from

    if _current is not None and not _current.finished:
        raise LiveError("live.enable() was already called in this process; close that one first")
    given = {"plan": plan, "store": store, "search": search, "budget": budget, "mode": mode, **options}
    unknown = sorted(set(given) - set(BUILTIN))
    if unknown:
        raise LiveError(f"unknown option(s) {', '.join(unknown)}; enable takes {', '.join(BUILTIN)}")
    chosen = {k: _choose(k, given.get(k)) for k in BUILTIN}
    clock = chosen.pop("clock")
    _current = Live(settings_from(**chosen), clock=clock)
    _enabled += 1
    if os.environ.get("CCLTWIN_LIVE", "1") == "0":
        _current.finished = True
        return _current
    return _current.start(_enabled)


def _choose(name: str, given: Any) -> Any:
    if given is not None:
        return given
    if _defaults.get(name) is not None:
        return _defaults[name]
    if name in ENVIRONMENT and os.environ.get(ENVIRONMENT[name]):
        return os.environ[ENVIRONMENT[name]]
    return BUILTIN[name]


def step() -> None:
    """End an iteration (every rank at the same point); nothing without ``enable``."""
    if _current is not None:
        _current.step()


def current() -> Any:
    """This process's live tuning, or ``None`` before ``enable``."""
    return _current
