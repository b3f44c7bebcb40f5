"""Fixtures of the trace-reader tests: real archives unpacked once per session."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from tests.testdata import DATA

DLRM = DATA / "traces" / "param-dlrm"


def unpack(archive: Path, into: Path) -> Path:
    """Every file of a tar archive under ``into`` (no extractall(filter=): Python < 3.11.4 lacks it)."""
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            if member.isfile():
                target = into / member.name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(tar.extractfile(member).read())
    return into


@pytest.fixture(scope="session")
def dlrm(tmp_path_factory) -> Path:
    """tests/data/traces/param-dlrm unpacked: dlrm_kineto/ (8 Kineto traces of one step) and
    dlrm_pytorch_et/ (their 8 execution traces, schema 1.0.1)."""
    into = tmp_path_factory.mktemp("dlrm")
    unpack(DLRM / "dlrm_kineto.tar.gz", into)
    return unpack(DLRM / "dlrm_pytorch_et.tar.gz", into)
