"""Figure functions on real data: the numbers a figure draws are the numbers of the report, sweep,
prediction or measurement it was given, and every subtitle says what it was computed on."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dashboards.clusters import CandidateCluster
from dashboards.explore import landscape, parse_sizes, predict_curve
from dashboards.figures.calibration import error_figure, parity_figure
from dashboards.figures.collectives import busbw_figure
from dashboards.figures.landscape import default_threads, heatmap_figure, ranking_figure
from dashboards.figures.sweep import sweep_figure
from dashboards.figures.timeline import timeline_figure
from dashboards.figures.whatif import breakdown_figure, cost_figure, iteration_figure, op_times, summary_table
from dashboards.measured import (
    calibration_points,
    converged_at,
    measured_curves,
    read_store,
    regime_errors,
    tuned_tasks,
    tuning_runs,
)
from dashboards.studies import compare, knee, metric_of, sweep
from dashboards.workloads import WorkloadChoice
from tests.dashboards.conftest import LOGS
from tuner.measurement import read_nccl_tests_measurements

H100_LOG = LOGS / "nvidia-dgxc-dgxh100-8gpu-intranode-allreduce-sample.txt"


@pytest.fixture(scope="module")
def vgg():
    """VGG19 DP32 on four DGX H100 and four DGX A100, NCCL default and tuned."""
    result = compare(WorkloadChoice.example("vgg19-dp32"), [CandidateCluster(preset="dgx-h100"),
                                                            CandidateCluster(preset="dgx-a100")], engine="serial")
    assert result.errors == ()
    return result.report


@pytest.fixture(scope="module")
def phi():
    """A small generated Phi-2 job (TP8 x DP2), whose trace says how many tokens an iteration trains."""
    work = WorkloadChoice.generated("phi-2", tp=8, dp=2, micro_batches=2, micro_batch_size=1)
    return compare(work, [CandidateCluster(preset="hgx-h200")], tuned=False, engine="serial").report


def subtitle(fig) -> str:
    return fig.layout.title.subtitle.text


def test_iteration_bars_add_up_to_each_replayed_iteration(vgg):
    """Exposed communication plus the rest is the replay's iteration time, per cluster and config."""
    fig = iteration_figure(vgg)
    rest, exposed = fig.data
    expected = [run.mean_iteration_us / 1e3 for c in vgg.clusters for run in (c.default, c.tuned)]
    assert np.allclose(np.add(rest.y, exposed.y), expected)
    assert list(exposed.y) == [run.exposed_comm_us / 1e3 for c in vgg.clusters for run in (c.default, c.tuned)]
    assert list(rest.x[0]) == ["dgx-h100:8x4"] * 2 + ["dgx-a100:8x4"] * 2
    assert subtitle(fig) == ("predicted on dgx-h100:8x4, dgx-a100:8x4 · NCCL 2.28.9 · default constants · "
                             "workload vgg19-dp32")


def test_op_breakdown_is_calls_times_time_per_op(vgg):
    """Per cluster and op, the bar is the sum over its tasks of calls per iteration × time per call."""
    fig = breakdown_figure(vgg, constants="profile h100.json")
    default, tuned = fig.data
    h100 = vgg.clusters[0]
    total = sum(t.default.calls_per_iteration * t.default.time_us for t in h100.tasks) / 1e3
    bars = dict(zip(zip(*default.x, strict=True), default.y, strict=True))
    assert math.isclose(sum(v for (c, _), v in bars.items() if c == "dgx-h100:8x4"), total)
    assert set(op_times(h100, tuned=True)) == {str(t.task.op) for t in h100.tasks}
    assert tuned.name == "tuned" and "profile h100.json" in subtitle(fig)


def test_cost_is_per_iteration_without_tokens_and_per_million_tokens_with(vgg, phi):
    """A CNN trace says no token count: USD per iteration; a generated transformer: per million tokens."""
    fig = cost_figure(vgg)
    assert fig.layout.yaxis.title.text == "USD per iteration"
    assert list(fig.data[0].y) == [c.cost_per_iteration(c.default) for c in vgg.clusters]
    fig = cost_figure(phi)
    c = phi.clusters[0]
    assert fig.layout.yaxis.title.text == "USD per million tokens"
    assert c.tokens_per_iteration and list(fig.data[0].y) == [c.cost_per_million_tokens(c.default)]
    assert "list prices unless given" in subtitle(fig)


def test_summary_table_holds_each_cluster_row(vgg):
    """The table figure lists every cluster with its default and tuned iteration times."""
    cells = summary_table(vgg).data[0].cells.values
    assert list(cells[0]) == ["dgx-h100:8x4", "dgx-a100:8x4"]
    assert cells[2][0] == f"{vgg.clusters[0].default.mean_iteration_us / 1e3:,.1f}"
    assert cells[3][1] == f"{vgg.clusters[1].tuned.mean_iteration_us / 1e3:,.1f}"


def test_nic_sweep_curve_marks_its_knee():
    """The curve is the sweep's metric per value; the star sits on ``knee``'s point."""
    result = sweep(WorkloadChoice.example("vgg19-dp32"), CandidateCluster(preset="dgx-a100"), "nic_gbps",
                   [25, 50, 100, 200, 400], tuned=False, engine="serial")
    fig = sweep_figure(result, "iteration_ms")
    curve, star = fig.data
    assert list(curve.x) == [25, 50, 100, 200, 400]
    assert list(curve.y) == [metric_of(p.report, "iteration_ms") for p in result.points]
    assert curve.y[0] > curve.y[-1]  # a slower network, a longer iteration
    i = knee(list(curve.x), list(curve.y))
    assert i is not None and (star.x[0], star.y[0]) == (curve.x[i], curve.y[i])
    assert fig.layout.annotations[0].text == f"knee at {curve.x[i]:g}"
    assert subtitle(fig).startswith("predicted on dgx-a100 with NIC rate (Gb/s) varied · NCCL 2.28.9")


def test_busbw_figure_overlays_the_real_log_on_the_prediction():
    """Measured busbw from the DGX H100 log (time → busbw by nccl-tests' factor) matches the log's own
    busbw column; the prediction is a line on log-log axes over the sizes asked."""
    measured = measured_curves(read_nccl_tests_measurements(H100_LOG))
    assert len(measured) == 1
    predicted = predict_curve(CandidateCluster(preset="dgx-h100"), "allreduce", parse_sizes("1KiB:1GiB:4"))
    fig = busbw_figure([predicted], measured)
    line, points = fig.data
    assert fig.layout.xaxis.type == fig.layout.yaxis.type == "log"
    assert list(line.x) == [1 << k for k in range(10, 31, 2)] and line.mode == "lines+markers"
    column = {int(r.split()[0]): float(r.split()[7]) for r in H100_LOG.read_text().splitlines()
              if r.strip() and r.split()[0].isdigit()}
    for size, busbw in zip(points.x, points.y, strict=True):
        assert busbw == pytest.approx(column[size], abs=0.01, rel=0.01)
    assert "predicted on dgx-h100 (1 node(s) x 8 H100-SXM5-80GB) · NCCL 2.28.9 · default constants" in subtitle(fig)
    assert "measured on single node of 'NVIDIA H100-DGX'" in subtitle(fig)


@pytest.fixture(scope="module")
def land():
    return landscape(CandidateCluster(preset="dgx-a100"), "allgather", 16 << 20, 8, search="ours", seed=1)


def test_ranking_is_fastest_first_beside_nccl_default(land):
    """Bars are the ranked subspaces' best times, fastest first; a line marks NCCL's default."""
    fig = ranking_figure(land)
    bars = fig.data[0]
    assert list(bars.x) == sorted(bars.x) == [r.time_us for r in land.entry.ranked]
    assert fig.layout.shapes[0].x0 == land.entry.default.time_us


def test_heatmap_is_the_subspace_grid_with_the_trials_on_it(land):
    """The heatmap's colour is log10 of the grid's times at the thread count shown; the trial markers
    are exactly the trials run in that subspace at those threads, in order."""
    nt = default_threads(land)
    fig = heatmap_figure(land)
    heat = fig.data[0]
    assert np.allclose(np.asarray(heat.z, float), np.log10(land.grid.times[nt]), equal_nan=True)
    assert list(heat.y) == list(land.grid.grid.nchannels)
    assert f"at {nt} threads" in fig.layout.title.text
    trials = [(i, c) for i, (c, _) in enumerate(land.trials, 1) if c.subspace == land.subspace and c.nthreads == nt]
    if trials:
        marks = fig.data[1]
        assert list(marks.text) == [str(i) for i, _ in trials]
        assert list(marks.y) == [c.nchannels for _, c in trials]


def test_timeline_draws_each_run_and_where_it_converged(store_path):
    """From the real store: per run, trial times and their running minimum, and a line at the trial
    where it came within 1% of its best."""
    every = read_store(store_path)
    hardware, task = tuned_tasks(every)[0]
    runs = tuning_runs(every, hardware, task)
    assert [len(r) for r in runs] and len(runs) == 2
    fig = timeline_figure(runs, default_us=300.0, default_label="NCCL default (predicted)")
    first_trials, first_best = fig.data[0], fig.data[1]
    times = [m.time_us for m in runs[0]]
    assert list(first_trials.y) == times
    assert list(first_best.y) == list(np.minimum.accumulate(times))
    assert fig.layout.shapes[0].x0 == converged_at(times)
    assert fig.layout.shapes[-1].y0 == 300.0
    assert subtitle(fig) == "predicted (twin executor) on dgx-h100:8x1 · NCCL 2.28.9 · 2 run(s) from the store"


def test_calibration_figures_plot_each_measured_call_against_its_prediction(store_path):
    """Parity points are (measured, predicted) per call; the error figure their relative error in %,
    with each regime's mean |error| written on it."""
    measured = [m for m in read_store(store_path) if m.hardware.startswith("single node of 'NVIDIA H100-DGX'")]
    points, notes = calibration_points(measured, CandidateCluster(preset="dgx-h100"))
    assert len(points) == len(measured) == 32 and notes == []
    parity = parity_figure(points, cluster="dgx-h100")
    dots = parity.data[1]
    assert list(dots.x) == [p.measurement.time_us for p in points]
    assert list(dots.y) == [p.predicted_us for p in points]
    errors = error_figure(points, cluster="dgx-h100")
    assert list(errors.data[0].y) == [100 * (p.predicted_us / p.measurement.time_us - 1) for p in points]
    summary = errors.layout.annotations[0].text
    for label, (n, mean) in regime_errors(points).items():
        assert f"{label}: {100 * mean:.1f}% mean |error| ({n} points)" in summary
    assert "measured on single node of 'NVIDIA H100-DGX'" in subtitle(parity)
