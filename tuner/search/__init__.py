"""Search algorithms over a :class:`~tuner.space.ConfigSpace`, all resumable between any two steps.

Every search follows one protocol (``tuner.search.base.Search``): ``propose() -> Config | None``
(``None``: done), ``observe(config, time_us)``, ``best``, ``trials``, ``state_dict()`` and
``from_state(space, state)``.  ``make_search`` builds one by name; ``resume`` rebuilds whichever
search a saved state belongs to; ``run`` drives one against a measuring function.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tuner.config import Config
from tuner.search.afnfa import Afnfa
from tuner.search.autoccl import AutoCCL
from tuner.search.base import Search, SearchStateError
from tuner.search.baselines import Default, Exhaustive, RandomSearch
from tuner.search.ours import Ours
from tuner.space import ConfigSpace

__all__ = ["SEARCHES", "Afnfa", "AutoCCL", "Default", "Exhaustive", "Ours", "RandomSearch", "Search",
           "SearchStateError", "make_search", "resume", "run"]

SEARCHES: dict[str, type[Search]] = {cls.name: cls for cls in (AutoCCL, Ours, Exhaustive, RandomSearch, Afnfa,
                                                                 Default)}
"""Every search by the name the CLI uses."""

USES_DEFAULT = ("autoccl", "ours", "default")
USES_WARM_START = ("autoccl", "ours")


def make_search(name: str, space: ConfigSpace, *, seed: int = 0, default: Config | None = None,
                warm_start: list[tuple[Config, float]] | None = None, **params: Any) -> Search:
    """The search called ``name``; ``default`` (NCCL's config) and ``warm_start`` (a plan entry's
    ranked subspaces) go to the searches that use them."""
    if name not in SEARCHES:
        raise ValueError(f"unknown search {name!r}; expected one of {', '.join(SEARCHES)}")
    if warm_start is not None and name not in USES_WARM_START:
        raise ValueError(f"search {name!r} takes no warm start (only {', '.join(USES_WARM_START)})")
    if name in USES_DEFAULT:
        params["default"] = default
    if name in USES_WARM_START:
        params["warm_start"] = warm_start
    return SEARCHES[name](space, seed=seed, **params)


def resume(space: ConfigSpace, state: dict[str, Any]) -> Search:
    """The search a ``state_dict`` came from, ready to continue."""
    name = state.get("search") if isinstance(state, dict) else None
    if name not in SEARCHES:
        raise SearchStateError(f"not a saved search state (search {name!r})")
    return SEARCHES[name].from_state(space, state)


def run(search: Search, measure: Callable[[Config], float], *, max_trials: int | None = None
        ) -> list[tuple[Config, float]]:
    """Propose, measure and observe until the search is done (or ``max_trials`` more trials);
    the (config, time) pairs of this run."""
    out = []
    while max_trials is None or len(out) < max_trials:
        config = search.propose()
        if config is None:
            break
        time_us = measure(config)
        search.observe(config, time_us)
        out.append((config, time_us))
    return out
