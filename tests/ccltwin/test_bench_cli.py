"""``ccltwin bench`` under torchrun: 2 gloo ranks, the twin's executor as time source (as CI has no
GPU; ``tests/live/twin_run.py`` sets it), nccl-tests' table at NCCL's default and tuned, and the
rows in the store under the time source's cluster identity beside every trial."""

from __future__ import annotations

import json
import subprocess
import sys

from typer.testing import CliRunner

from ccltwin import app
from tests.live.launch import JOB_TIMEOUT_S, ROOT, job_env
from traces.task import Op
from tuner.store import Store
from twin.executor import TwinExecutor
from twin.topology import load_cluster

SIZES = (4096, 1 << 20)


def torchrun_bench(folder, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           str(ROOT / "tests" / "live" / "twin_run.py"), str(ROOT / "ccltwin" / "__main__.py"),
                           "bench", "--ops", "allreduce,alltoall", "--sizes", ",".join(map(str, SIZES)),
                           "--iterations", "40", *args], capture_output=True, text=True, timeout=JOB_TIMEOUT_S,
                          cwd=folder, env=job_env())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return done


def test_bench_prints_the_table_and_adds_its_rows_to_the_store(tmp_path):
    db = tmp_path / "bench.db"
    done = torchrun_bench(tmp_path, "--store", str(db))
    hardware = TwinExecutor(load_cluster("dgx-h100", nodes=1)).hardware
    lines = done.stdout.splitlines()
    assert lines.count(f"#  allreduce on 2 ranks ({hardware}, NCCL 2.28.9)") == 1  # rank 0 alone prints
    assert f"#  alltoall on 2 ranks ({hardware}, NCCL 2.28.9)" in lines
    assert len([line for line in lines if line.split()[:1] in (["4096"], ["1048576"])]) == 2 * len(SIZES)
    allreduce = [line.split() for line in lines[lines.index(f"#  allreduce on 2 ranks ({hardware}, NCCL 2.28.9)"):]
                 if line.strip().startswith(("4096 ", "1048576 "))][: len(SIZES)]
    for size, count, dtype, default_us, _, _, tuned_us, *_ in allreduce:
        assert int(count) * 4 == int(size) and dtype == "float32" and float(tuned_us) <= float(default_us)
    assert f"added {3 * len(SIZES)} rows" in done.stdout
    with Store(db, create=False) as store:
        history = list(store.history())
    assert {m.hardware for m in history} == {hardware} and {m.source for m in history} == {"live"}
    trials = [m for m in history if m.task.op is Op.ALLREDUCE and m.config is not None]
    assert len(trials) > 2 * 20  # every trial, then each size's winner
    assert sorted(m.task.nbytes for m in history if m.task.op is Op.ALLTOALL) == list(SIZES)


def test_bench_json_has_one_object_per_row(tmp_path):
    done = torchrun_bench(tmp_path, "--store", str(tmp_path / "t.db"), "--json")
    rows = json.loads(done.stdout)
    assert [(r["op"], r["nbytes"]) for r in rows] == [(op, n) for op in ("allreduce", "alltoall") for n in SIZES]
    for r in rows:
        if r["op"] == "alltoall":
            assert r["winner"] is None and r["tuned_us"] is None
        else:
            assert r["tuned_us"] <= r["default_us"] and r["speedup"] >= 1 and r["trials"] > 20
            assert {"algo", "proto", "nchannels"} <= set(r["winner"])


def test_bench_outside_torchrun_says_how_to_launch_it(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    result = CliRunner().invoke(app, ["bench"])
    assert result.exit_code == 2
    assert result.stderr == "error: ccltwin bench runs on every rank of a torchrun job: " \
                            "torchrun --nproc-per-node N -m ccltwin bench ...\n"
