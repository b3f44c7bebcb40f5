"""A small tmpfs of a test's own, for full-disk and read-only file system cases."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def tmpfs(point: Path, size: str) -> Iterator[Path]:
    """Mount a ``size`` tmpfs at ``point`` (created) for the block; skip the test where mounting is
    not allowed."""
    point.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point)],
                      capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], check=True)
