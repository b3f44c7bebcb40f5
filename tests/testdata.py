"""Where the tests find the repository and the files they read; nothing outside the clone.

``DATA`` is ``tests/data``: real inputs, each folder with a SOURCES.md naming origin and licence.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
"""The repository root."""
DATA = ROOT / "tests" / "data"
"""The test inputs (``tests/data``)."""
