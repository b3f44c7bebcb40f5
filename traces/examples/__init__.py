"""Small example traces that ship with ccltwin, generated from the AutoCCL paper's workloads.

Each is one training iteration of a bundled preset (``traces/generate/presets``) with
representative ranks, gzipped::

    from traces.examples import path
    trace = load_trace(path("phi2-tp8dp4"))

``python -m traces.examples`` writes them again from the generator; a test checks that the
shipped files equal what the generator makes now, so they never go stale.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from traces.errors import TraceError
from traces.generate import generate, workload
from traces.schema import Trace
from traces.trace_file import save_trace

__all__ = ["DEFAULT", "EXAMPLES", "default_trace", "names", "path", "regenerate", "write_all"]

HERE = Path(__file__).parent

EXAMPLES: dict[str, tuple[str, dict[str, Any]]] = {
    "phi2-tp8dp4": ("autoccl-phi2", {}),
    "llama8b-tp8dp4": ("autoccl-llama8b", {}),
    # the preset's 1,024 micro-batches make a 250,000-event rank; 8 keep the example small
    "yi34b-tp8pp4": ("autoccl-yi34b", {"micro_batches": 8}),
    "vgg19-dp32": ("autoccl-vgg19", {}),
}
"""Example name → (preset, plan fields changed from the preset)."""

DEFAULT = "phi2-tp8dp4"
"""The example the README's walk-through uses."""


def names() -> list[str]:
    return sorted(EXAMPLES)


def path(name: str) -> Path:
    """The file of a bundled example (``phi2-tp8dp4``...)."""
    if name not in EXAMPLES:
        raise TraceError(f"unknown example trace {name!r}; bundled ones: {', '.join(names())}")
    return HERE / f"{name}.json.gz"


def default_trace() -> tuple[Path, str]:
    """The file and the name of the example the README's walk-through uses."""
    return path(DEFAULT), DEFAULT


def regenerate(name: str) -> Trace:
    """The example's trace as the generator makes it now."""
    preset, overrides = EXAMPLES[name]
    return generate(workload(preset, overrides=overrides))


def write_all() -> None:
    for name in names():
        save_trace(regenerate(name), path(name))
        print(f"wrote {path(name)} ({path(name).stat().st_size:,} bytes)")
