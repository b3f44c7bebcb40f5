"""Every writer's output path: FIFOs, symlinks, folders, kernel file systems and full disks are
one line naming the path and the reason; nothing is replaced or half-written."""

import os
import threading

import pytest
from typer.testing import CliRunner

from ccltwin import app
from tests.mounts import tmpfs
from tests.testdata import DATA
from traces.flight_recorder import read_flight_recorder
from traces.trace_file import save_trace
from tuner.measurement import Measurement
from tuner.store import Store

runner = CliRunner()
LOG = DATA / "nccl-tests" / "stanford-farmshare-l40s-pcie-2gpu-allreduce-auto_simple.txt"
SMI = DATA / "topology" / "nvidia-smi" / "warpem-106-l40s.txt"


@pytest.fixture
def inputs(tmp_path):
    trace = tmp_path / "job.json"
    save_trace(read_flight_recorder(sorted((DATA / "traces" / "flight-recorder").glob("*.json"))), trace)
    db = tmp_path / "t.db"
    with Store(db) as store:
        m = Measurement.from_dict({"task": {"op": "allreduce", "nbytes": 1048576, "nranks": 2, "group": "2x1"},
                                   "config": {"algo": "ring", "proto": "simple", "transport": "p2p",
                                              "nchannels": 8, "nthreads": 256, "chunk_bytes": 131072},
                                   "time_us": 100.0, "source": "live", "hardware": "l40s"})
        store.add(m)
    return {"trace": trace, "db": db}


def commands(inputs, out):
    """(name, argv) of every command with an output path, writing to ``out``."""
    return [
        ("trace import", ["trace", "import", str(LOG), "--format", "nccl-tests", "-o", str(out)]),
        ("rank -o", ["rank", "--trace", str(inputs["trace"]), "--topology", "l40s-pcie", "-o", str(out)]),
        ("store export --csv", ["store", "export", str(inputs["db"]), "--csv", str(out)]),
        ("topology import", ["topology", "import", str(SMI), "--gpu-model", "l40s", "--nic-gbps", "100",
                             "-o", str(out)]),
    ]


def one_error_line(result):
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "Traceback" not in result.output
    return lines[0]


def test_a_fifo_is_refused_and_left_a_fifo(tmp_path, inputs):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for name, argv in commands(inputs, fifo):
        line = one_error_line(runner.invoke(app, argv))
        assert f"{fifo}: is a FIFO (named pipe), not a regular file" in line, name
        assert fifo.is_fifo()


def test_a_symlink_is_refused_and_neither_it_nor_its_target_changes(tmp_path, inputs):
    target, link = tmp_path / "target.txt", tmp_path / "link"
    target.write_text("keep me\n")
    link.symlink_to(target)
    for name, argv in commands(inputs, link):
        line = one_error_line(runner.invoke(app, argv))
        assert f"{link}: is a symbolic link" in line and "target.txt" in line, name
        assert link.is_symlink() and target.read_text() == "keep me\n"


@pytest.mark.parametrize("where", ["dir", "proc"])
def test_a_folder_or_a_kernel_file_is_refused_by_name(tmp_path, inputs, where):
    out = tmp_path if where == "dir" else __import__("pathlib").Path("/proc/self/ccltwin-out.json")
    for name, argv in commands(inputs, out):
        line = one_error_line(runner.invoke(app, argv))
        assert str(out) in line, name
        assert ("is a directory" if where == "dir" else "kernel file system") in line, name


@pytest.fixture
def full_disk(tmp_path):
    """A 64 KiB tmpfs, filled to the last byte (skipped where mounting is not allowed)."""
    with tmpfs(tmp_path / "small", "64k") as point:
        yield point


def test_a_full_disk_is_named_and_leaves_nothing_half_written(inputs, full_disk):
    out = full_disk / "out.json"
    old = full_disk / "old.json"
    (full_disk / "filler").write_bytes(b"\0" * (60 * 1024))
    old.write_text("previous\n")
    filler = os.open(full_disk / "filler", os.O_WRONLY | os.O_APPEND)
    try:  # fill what is left, to the last byte
        while os.write(filler, b"\0" * 512):
            pass
    except OSError:
        pass
    os.close(filler)
    for name, argv in [*commands(inputs, out), ("trace import over a file", commands(inputs, old)[0][1])]:
        line = one_error_line(runner.invoke(app, argv))
        assert "No space left on device" in line and "nothing was written" in line, (name, line)
        assert not out.exists() and old.read_text() == "previous\n", name
        assert sorted(p.name for p in full_disk.iterdir()) == ["filler", "old.json"], name


def test_writing_to_a_fifo_does_not_block_forever(tmp_path, inputs):
    """No reader on the FIFO: the command refuses at once instead of hanging on open."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    done = threading.Event()

    def run():
        runner.invoke(app, commands(inputs, fifo)[0][1])
        done.set()

    threading.Thread(target=run, daemon=True).start()
    assert done.wait(20)


def test_a_killed_writers_temporary_is_removed_by_the_next_write_and_a_live_ones_kept(tmp_path):
    import subprocess
    import sys

    from traces.trace_file import write_atomic

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(gone.stdout)
    dead, alive = tmp_path / f".out.json.ccltwin-{pid}-x1", tmp_path / f".out.json.ccltwin-{os.getpid()}-y2"
    other = tmp_path / f".other.json.ccltwin-{pid}-z3"
    for path in (dead, alive, other):
        path.write_text("{half")
    write_atomic(tmp_path / "out.json", ['{"whole": true}'])
    assert (tmp_path / "out.json").read_text() == '{"whole": true}'
    assert not dead.exists() and alive.exists() and other.exists()  # only this path's, only the dead writer's
