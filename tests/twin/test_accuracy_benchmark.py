"""``benchmarks/accuracy.py``: its RUNS table, the held-out folder, and the table's logic on real logs."""

import doctest
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from traces.nccl_tests import read_nccl_tests
from twin.topology import load_cluster

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import accuracy  # noqa: E402
from accuracy import (  # noqa: E402
    DATA,
    HELDOUT,
    RUNS,
    TIME_NOISE,
    format_table,
    largest_fall,
    measured_busbw,
    time_curves,
    worst,
    write_index,
    write_plot,
)
from accuracy import accuracy as table_line  # noqa: E402

HELDOUT_LOGS = sorted(HELDOUT.glob("*.txt"))
DEV_LOGS = sorted(DATA.glob("*.txt"))


def measured(path):
    """A real log's points with the measurement standing in for both sides."""
    log = read_nccl_tests(path)
    return [(r.nbytes, measured_busbw(log, r), measured_busbw(log, r)) for r in log.rows if r.nbytes and r.busbw]


def test_docstring_examples_run():
    assert doctest.testmod(accuracy).failed == 0


def test_every_log_of_both_folders_is_described_and_the_two_sets_do_not_overlap():
    assert len(HELDOUT_LOGS) >= 10
    assert {p.stem for p in HELDOUT_LOGS + DEV_LOGS} <= RUNS.keys()
    assert not {p.stem for p in HELDOUT_LOGS} & {p.stem for p in DEV_LOGS}
    assert set(RUNS) == {p.stem for p in HELDOUT_LOGS + DEV_LOGS}, "a RUNS entry without its file"


@pytest.mark.parametrize("path", HELDOUT_LOGS, ids=lambda p: p.stem)
def test_heldout_logs_say_where_they_come_from_and_fit_their_cluster(path):
    log = read_nccl_tests(path)
    assert {"SOURCE", "HARDWARE", "NCCL"} <= log.header.keys() and log.header.keys() & {"COMMAND", "FORMAT"}
    assert any(licence in log.header["SOURCE"] for licence in ("MIT", "Apache-2.0"))
    assert path.name in (HELDOUT / "SOURCES.md").read_text()
    assert log.op is not None and log.nranks is not None and len(log.rows) >= 5
    run = RUNS[path.stem]
    cluster = load_cluster(run.topology, nodes=run.nodes, gpus_per_node=run.gpus_per_node)
    # A multi-node run fills every node the entry names; a one-node run fits in its node.
    assert len(cluster.gpus()) == log.nranks if run.nodes > 1 else log.nranks <= len(cluster.gpus())
    assert (run.fabric is None) == (run.nodes == 1)
    assert run.fabric in (None, cluster.fabric.name)  # the twin models the fabric the header names


def test_measured_busbw_comes_from_the_time_where_the_printed_busbw_is_rounding():
    log = read_nccl_tests(HELDOUT / "abci-intra_anode-4gpu-1node-allreduce.txt")
    tiny, big = log.rows[0], log.rows[-1]
    assert tiny.busbw == 0.0 and measured_busbw(log, tiny) > 0  # 4 B in 17.24 µs
    assert measured_busbw(log, big) == pytest.approx(big.busbw, rel=5e-3)
    summary = read_nccl_tests(HELDOUT / "azure-ndH200v5-8gpu-intranode-allreduce-NVLS-busbw-summary.txt")
    assert measured_busbw(summary, summary.rows[-1]) == summary.rows[-1].busbw == 479.98  # no time column


def test_a_real_dip_is_found_where_the_log_has_it():
    # Echo's 64-GPU log: 128 KiB takes 75.6 µs, 256 KiB 39.5 µs (busbw 3.25 -> 12.41 GB/s).
    measured_curve, _ = time_curves(measured(DATA / "echo-azure-ndA100v4-allreduce-64gpu.txt"))
    size, fall = largest_fall(measured_curve, TIME_NOISE)
    assert size == 256 << 10 and fall == pytest.approx(47.7, abs=0.2)
    # The DGX H100 sample rises everywhere beyond timing noise.
    dgx_curve, _ = time_curves(measured(DATA / "nvidia-dgxc-dgxh100-8gpu-intranode-allreduce-sample.txt"))
    assert largest_fall(dgx_curve, TIME_NOISE) is None


def test_repeated_runs_of_one_machine_agree_and_their_jitter_is_noise_for_measured_curves_only():
    """Two real runs of the same L40S pair: the second in the place of a prediction."""
    first = measured(DATA / "stanford-farmshare-l40s-pcie-2gpu-allreduce-iteration_1.txt")
    second = measured(DATA / "stanford-farmshare-l40s-pcie-2gpu-allreduce-iteration_2.txt")
    assert [s for s, _, _ in first] == [s for s, _, _ in second]
    points = [(s, m, p) for (s, m, _), (_, p, _) in zip(first, second, strict=True)]
    line = table_line("iteration_1-vs-2", points)
    assert line.n_big == 8 and line.n_small == 14
    assert line.err_big < 0.5 and line.err_small < 1.0
    assert worst(points) == line.worst and line.worst[0] == 64 and line.worst[1] == pytest.approx(2.49, abs=0.01)
    assert line.measured_fall is None  # iteration_1 within 3 % noise
    size, fall = line.predicted_fall  # a prediction may not fall at all: iteration_2 dips 3.1 % at 8 KiB
    assert size == 8 << 10 and fall == pytest.approx(3.1, abs=0.05)


def test_table_summary_is_the_median_over_files_on_real_predictions():
    paths = [HELDOUT / "echo-azure-ndA100v4-allreduce-4gpu.txt", HELDOUT / "gcp-a4-b200-2gpu-intranode-allgather.txt",
             HELDOUT / "nebius-h200-16gpu-2node-allreduce-ib-1G-16G.txt"]
    lines = [accuracy.file_accuracy(p)[0] for p in paths]
    text = format_table(lines).splitlines()
    assert len(text) == 1 + len(paths) + 2 and text[-1].startswith("median over 3 files")
    big = statistics.median(line.err_big for line in lines)
    assert f"{big:.1f}%" in text[-1].split()
    assert lines[1].n_small == 0 and lines[1].err_small is None  # the B200 log has no size < 64 MiB
    assert lines[2].releases == "2.23.4/" + ".".join(map(str, accuracy.nccl_release("2.23.4")[:2]))


def test_plots_and_index_are_written_for_real_points(tmp_path):
    points = measured(HELDOUT / "aws-p5-h100-16gpu-2node-allreduce-efa.txt")
    page = write_plot(tmp_path, "aws-p5", points)
    text = page.read_text()
    assert '"type":"log"' in text.replace(" ", "") and "measured" in text and "predicted" in text
    assert (tmp_path / "plotly.min.js").stat().st_size > 100_000
    index = write_index(tmp_path, [("held out", [table_line("aws-p5", points)])])
    assert "<a href='aws-p5.html'>aws-p5</a>" in index.read_text()


def test_script_prints_the_table_and_writes_plots_and_refuses_a_folder_it_cannot_describe(tmp_path):
    data = tmp_path / "logs"
    data.mkdir()
    for name in ("gcp-a3ultra-h200-2gpu-2node-allreduce-roce.txt", "abci-intra_anode-8gpu-1node-broadcast.txt"):
        (data / name).write_bytes((HELDOUT / name).read_bytes())
    (data / "unknown-machine.txt").write_bytes((HELDOUT / "abci-intra_anode-8gpu-1node-broadcast.txt").read_bytes())
    script = [sys.executable, str(ROOT / "benchmarks" / "accuracy.py")]
    run = subprocess.run([*script, "--data", str(data), "--plots", str(tmp_path / "plots")],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "median over 2 files" in run.stdout and "gib-a3u" in run.stdout
    assert "skipped unknown-machine.txt" in run.stderr
    assert {p.name for p in (tmp_path / "plots").glob("*.html")} == {
        "index.html", "gcp-a3ultra-h200-2gpu-2node-allreduce-roce.html", "abci-intra_anode-8gpu-1node-broadcast.html"}
    (data / "gcp-a3ultra-h200-2gpu-2node-allreduce-roce.txt").unlink()
    (data / "abci-intra_anode-8gpu-1node-broadcast.txt").unlink()
    refused = subprocess.run([*script, "--data", str(data)], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.strip().splitlines()[-1] == (
        f"accuracy.py: {data}: none of its 1 nccl-tests logs (*.txt) is described in RUNS")


@pytest.mark.parametrize("path", DEV_LOGS + HELDOUT_LOGS, ids=lambda p: p.stem)
def test_runs_agree_with_what_each_log_says_of_its_launch(path):
    log, run = read_nccl_tests(path), RUNS[path.stem]
    if log.gpus_per_thread is not None:  # nccl-tests' nGpus (-g), or the COMMAND header's
        assert run.gpus_per_process == log.gpus_per_thread
    assert run.nccl is None or log.nccl_version is None, "a RUNS release where the log prints its own"
    for knob, value in accuracy.knobs_from_env(log.env).items():
        assert run.knobs.get(knob, value) == value, "RUNS contradicts the file's NCCL_ALGO/NCCL_PROTO"


ECHO_LOGS = [p for p in DEV_LOGS + HELDOUT_LOGS if p.stem.startswith("echo-azure-ndA100v4")]


@pytest.mark.parametrize("path", ECHO_LOGS, ids=lambda p: p.stem)
def test_echo_logs_run_the_release_their_nccl_tests_dates(path):
    """Their nccl-tests header has no ``agg iters`` field (nccl-tests 51af557, 2022-08-19) and their
    device lines no ``Group`` (d313d20, 2022-09-20), so the run is the 2022 image's NCCL, not 2.28."""
    text = path.read_text()
    header = next(line for line in text.splitlines() if "nThread" in line)
    assert "agg iters" not in header and "graph:" not in header and "validation:" in header
    assert " Pid " in text and " Group " not in text
    assert read_nccl_tests(path).nccl_version is None and RUNS[path.stem].nccl == accuracy.ECHO_NCCL
    assert accuracy.nccl_release(accuracy.ECHO_NCCL) == (2, 12, 12)
