"""``ccltwin simulate`` and ``twin.predict.predict``: the CLI contract, NCCL's default, real measurements."""

import json
import statistics
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ccltwin import app
from traces.task import Op
from tuner.config import Algo, Proto
from twin.placement import Communicator
from twin.predict import predict
from twin.topology import load_cluster

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
runner = CliRunner()
CONTRACT = {"op", "nbytes", "nranks", "algo", "proto", "nchannels", "nthreads", "chunk_bytes", "time_us",
            "algbw_gbps", "busbw_gbps"}


def simulate(*args):
    return runner.invoke(app, ["simulate", *args])


def test_json_has_one_object_per_size_with_the_contract_fields():
    result = simulate("--topology", "dgx-a100", "--nodes", "2", "--op", "allreduce", "--nranks", "16",
                      "--sizes", "8B:1GiB", "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [r["nbytes"] for r in rows] == [8 << i for i in range(28)]
    for r in rows:
        assert r.keys() >= CONTRACT
        assert r["nranks"] == 16 and r["op"] == "allreduce"
        # nccl-tests' definitions: algbw = size / time, busbw = algbw * 2(n-1)/n for AllReduce.
        assert r["algbw_gbps"] == pytest.approx(r["nbytes"] / (r["time_us"] * 1e3), rel=1e-2, abs=2e-3)
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * 2 * 15 / 16, rel=1e-2, abs=2e-3)
    times = [r["time_us"] for r in rows]
    assert times == sorted(times), "a bigger message never finishes sooner under NCCL's own choice"
    assert rows[0]["proto"] == "ll" and rows[-1]["proto"] == "simple"


def test_table_names_the_cluster_and_says_it_is_a_prediction():
    result = simulate("--topology", "dgx-h100", "--op", "allgather", "--sizes", "1MiB:4MiB")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "dgx-h100" in lines[0] and "predicted" in lines[0]
    assert len([line for line in lines if not line.startswith("#")]) == 3


def test_forced_knobs_are_used_and_others_come_from_nccl():
    result = simulate("--topology", "l40s-pcie", "--gpus-per-node", "4", "--op", "reducescatter", "--sizes", "64MiB",
                      "--algo", "ring", "--nchannels", "3", "--chunk", "256KiB", "--json")
    row = json.loads(result.output)[0]
    assert (row["algo"], row["nchannels"], row["chunk_bytes"]) == ("ring", 3, 256 << 10)
    assert row["chosen_by"] == "user+nccl" and row["nranks"] == 4


def test_nccls_default_depends_on_the_element_type():
    """NVLink SHARP reduces only the types ``ncclNvlsSupported`` lists: an int8 sum takes the ring."""
    rows = {dtype: json.loads(simulate("--topology", "dgx-h100", "--op", "allreduce", "--sizes", "256MiB",
                                       "--dtype", dtype, "--json").output)[0] for dtype in ("float32", "int8")}
    assert rows["float32"]["algo"] == "nvls" and rows["int8"]["algo"] == "ring"


def test_fewer_channels_are_slower_on_a_big_message():
    comm = Communicator.first(load_cluster("dgx-h100"))
    one = predict(comm, Op.ALLREDUCE, 1 << 30, algo=Algo.RING, proto=Proto.SIMPLE, nchannels=1)
    many = predict(comm, Op.ALLREDUCE, 1 << 30, algo=Algo.RING, proto=Proto.SIMPLE, nchannels=16)
    assert one.time_us > 5 * many.time_us


def test_both_engines_give_the_same_answer_through_the_cli():
    args = ["--topology", "a40-nvlink-pairs", "--op", "allreduce", "--sizes", "64KiB,256MiB", "--json"]
    fast = json.loads(simulate(*args).output)
    des = json.loads(simulate(*args, "--engine", "des").output)
    for f, d in zip(fast, des, strict=True):
        assert d["time_us"] == pytest.approx(f["time_us"], rel=0.02)


@pytest.mark.parametrize("args, message", [
    (["--topology", "nope", "--op", "allreduce"], "unknown preset"),
    (["--topology", "dgx-a100", "--op", "allsum"], "unknown collective"),
    (["--topology", "dgx-a100", "--op", "allreduce", "--sizes", "1M:1K"], "MIN"),
    (["--topology", "dgx-a100", "--nodes", "2", "--op", "allreduce", "--nranks", "12"], "whole nodes"),
    (["--topology", "l40s-pcie", "--op", "allreduce", "--algo", "nvls"], "NCCL_ALGO=NVLS"),
    (["--topology", "dgx-a100", "--op", "broadcast", "--algo", "tree"], "NCCL_ALGO=Tree"),
    (["--topology", "dgx-a100", "--op", "allreduce", "--nchannels", "200"], "at most 64 channels"),
    (["--topology", "dgx-a100", "--op", "allreduce", "--proto", "ll128", "--chunk", "1000"], "grain of 1920"),
    (["--topology", "dgx-a100", "--op", "allreduce", "--proto", "ll128", "--nthreads", "64"], "96 to 640"),
    (["--topology", "dgx-a100", "--op", "allreduce", "--gpus-per-process", "3"], "whole shares"),
    (["--topology", "/tmp", "--op", "allreduce"], "is a directory"),
])
def test_bad_input_is_a_clear_error(args, message):
    result = simulate(*args)
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("stem", ["stanford-farmshare-l40s-pcie-2gpu-allreduce-ring",
                                  "vtrain-a100-8gpu-intranode-allreduce-LUT-1MiB-1GiB",
                                  "nvidia-dgxc-dgxh100-8gpu-intranode-allreduce-sample"])
def test_predictions_track_real_nccl_tests_runs(stem):
    from accuracy import DATA, predict_file

    _, points = predict_file(DATA / f"{stem}.txt")
    errors = [abs(p - m) / m for size, m, p in points if size >= 1 << 20]
    assert statistics.median(errors) <= 0.15


def test_repeated_column_is_the_nccl_tests_time_of_a_back_to_back_loop():
    # Two ABCI nodes under NCCL 2.8.4, as the dev Broadcast file ran (-n 100): at 1 MiB NCCL runs
    # 8 LL128 channels, whose calls overlap only in part (twin.model.repeat); one channel's
    # calls (64 KiB) overlap down to the chain's interval.
    base = ("--topology", "abci-a", "--nodes", "2", "--op", "broadcast", "--sizes", "64KiB,1MiB",
            "--nccl-version", "2.8.4", "--json")
    rows = json.loads(simulate(*base, "--iters", "100").output)
    small, large = rows
    assert small["nchannels"] == 1 and small["repeated_us"] < 0.5 * small["time_us"]
    assert large["nchannels"] == 8 and 0.7 * large["time_us"] < large["repeated_us"] < large["time_us"]
    once = json.loads(simulate(*base, "--iters", "1").output)  # nothing to overlap with
    assert all(r["repeated_us"] < o["repeated_us"] <= o["time_us"] for r, o in zip(rows, once, strict=True))
    text = simulate(*base[:-1], "--iters", "100").output
    assert "repeated" in text.splitlines()[1]
    # nccl-tests measured 25.25 µs per call at 64 KiB there (tests/data/nccl-tests/abci-inter_anode-
    # 16gpu-2node-broadcast.txt): the overlapped loop, not one call's 43 µs latency.  (At 1 MiB it
    # measured 121.6 µs, above both: each call's fill across the network is longer than the
    # twin's, docs/physics.md, "The ABCI Broadcasts' per-call fill".)
    assert abs(small["repeated_us"] - 25.25) < abs(small["time_us"] - 25.25)
