"""Calibration: the fit recovers known constants, held-out errors are held out, refusals write
nothing, profiles keep their provenance and stack, bad input is named, a real log improves."""

from __future__ import annotations

import doctest
import itertools
import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import twin.calibrate.holdout as holdout_module
import twin.calibrate.model as model_module
from traces.errors import CcltwinError
from traces.task import Op, Task
from tuner.config import Algo, Config, Proto, Transport
from tuner.measurement import Measurement
from tuner.store import Store
from twin.calibrate import (
    CalibrationError,
    CalibrationRefused,
    Holdout,
    Point,
    Recalibrator,
    TwinModel,
    calibrate,
    points_of,
    read_points,
    show_profile,
)
from twin.calibrate.fit import fit
from twin.calibrate.residual import ResidualModel
from twin.calibrate.space import SPREAD, FitSpace
from twin.executor import TwinExecutor
from twin.params import DEFAULT_PARAMS, TwinParams
from twin.profile import load_profile
from twin.topology import load_cluster

DATA = Path(__file__).resolve().parents[1] / "data" / "nccl-tests"
AZURE8 = DATA / "echo-azure-ndA100v4-allreduce-8gpu.txt"
AZURE16 = DATA / "echo-azure-ndA100v4-allreduce-16gpu.txt"
A100 = "dgx-a100"

TRUTH = {"cta.hbm_share": 0.0245, "cta.threads_at_half_rate": 210.0, "protocol.simple_slice_sync_us": 3.9,
         "link.nvlink.efficiency": 0.78, "protocol.launch_us.ll": 7.6, "protocol.ll128_copy_factor": 0.82}
"""Hidden constants of the synthetic cluster, each well inside its plausible range."""


def synthetic(params: TwinParams, cluster, *, noise: float = 0.0, seed: int = 0) -> list[Measurement]:
    """What live tuning would measure on ``cluster`` if ``params`` were the truth: Ring and Tree,
    every protocol, several channel, thread and chunk counts, sizes 4 KiB to 256 MiB."""
    executor = TwinExecutor(cluster, params=params, noise=noise, spike_prob=0.0, seed=seed)
    out = []
    for k, (algo, proto, nc, nt, chunk) in enumerate(itertools.product(
            (Algo.RING, Algo.TREE), (Proto.LL, Proto.LL128, Proto.SIMPLE), (2, 8, 16), (128, 512),
            (128 << 10, 1 << 20))):
        for size in (4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20)[k % 2::2]:
            task = Task(Op.ALLREDUCE, size, 8, group="8x1")
            config = Config(algo, proto, Transport.P2P, nc, nt, chunk)
            out.append(Measurement(task=task, config=config, time_us=executor.measure(task, config), source="live",
                                   hardware=cluster.identity, nccl_version="2.28.9"))
    return out


@pytest.fixture(scope="module")
def cluster():
    return load_cluster(A100)


@pytest.fixture(scope="module")
def azure8():
    return calibrate(read_points([AZURE8]), load_cluster(A100), sources=[AZURE8.name])


# ---- the fit ----------------------------------------------------------------------------------


def test_the_fit_recovers_known_constants_from_the_twins_own_measurements(cluster):
    truth = DEFAULT_PARAMS.replace(**TRUTH)
    result = calibrate(synthetic(truth, cluster), cluster)
    assert result.accepted
    fitted, prior = result.params.to_dict(), DEFAULT_PARAMS.to_dict()
    for name, value in TRUTH.items():
        assert name in result.profile_meta.moved
        assert fitted[name] == pytest.approx(value, rel=0.03), name
        assert abs(fitted[name] / value - 1) < abs(prior[name] / value - 1) / 3
    held = {h.name: h.reason for h in result.profile_meta.held}
    assert "the measurements do not depend on it" in held["net.efficiency"]  # one node: no network
    after = {r.regime: r for r in result.heldout}
    assert after["all sizes"].after_pct < 1.0 < after["all sizes"].before_pct


def test_noise_does_not_move_what_the_data_cannot_see_and_keeps_the_fit_close(cluster):
    truth = DEFAULT_PARAMS.replace(**TRUTH)
    fitted = calibrate(synthetic(truth, cluster, noise=0.02, seed=4), cluster).params.to_dict()
    assert fitted["net.nic_rdma_write_us"] == DEFAULT_PARAMS.net.nic_rdma_write_us
    for name in ("cta.hbm_share", "link.nvlink.efficiency", "protocol.simple_slice_sync_us"):
        assert fitted[name] == pytest.approx(TRUTH[name], rel=0.08), name


def test_collinear_constants_are_held_and_say_which_constant_explains_them(cluster):
    """Ring Simple at one thread count only: the CTA's peak rate and its half-rate thread count
    move the predictions the same way, so only one of them may move.  (A tree splits its threads
    between two groups, so tree calls would tell them apart.)"""
    points = [Point(measurement=m, where=f"m{i}") for i, m in enumerate(synthetic(DEFAULT_PARAMS, cluster))
              if m.config.nthreads == 512 and m.config.proto is Proto.SIMPLE and m.config.algo is Algo.RING]
    model = TwinModel(cluster, points)
    out = fit(lambda p: model.log_errors(p), DEFAULT_PARAMS.replace(**{"cta.hbm_share": 0.026}),
              ["cta.hbm_share", "cta.threads_at_half_rate"])
    assert len(out.free) == 1
    (held,) = out.held
    assert "cannot tell them apart" in held.reason and out.free[0] in held.reason


def test_a_fit_never_leaves_the_plausible_ranges(azure8):
    prior, fitted = DEFAULT_PARAMS.to_dict(), azure8.params.to_dict()
    units = TwinParams.units()
    for change in azure8.profile_meta.changes:
        low, high = SPREAD[units[change.name]]
        assert prior[change.name] * low * (1 - 1e-9) <= fitted[change.name] <= prior[change.name] * high * (1 + 1e-9)
        assert fitted[change.name] <= TwinParams.bounds()[change.name][1]
    assert all(fitted[n] <= 1.0 for n in fitted if n.endswith("efficiency"))


def test_the_walls_follow_the_units():
    space = FitSpace.of(DEFAULT_PARAMS, ["link.nvlink.efficiency", "link.nvlink.step_us.ll"])
    high = space.bounds()[1]
    at_walls = space.params(np.array([5.0, -5.0])).to_dict()
    assert at_walls["link.nvlink.efficiency"] == 1.0  # 0.84 × 1.3 is above 1: efficiencies stop at 1
    assert at_walls["link.nvlink.step_us.ll"] == pytest.approx(0.6 * SPREAD["µs"][0])
    assert space.at_bounds(np.array([high[0], 0.0])) == ("link.nvlink.efficiency",)


# ---- held-out evaluation ------------------------------------------------------------------------


def test_held_out_points_never_reach_the_fit_that_scores_them(cluster):
    """Make the points of one size fold wildly wrong: the fit that holds that fold out must
    predict them exactly as it does when they are right (it never saw them), while the fits that
    trained on them change.  A fit and score that shared points would fail this."""
    measurements = synthetic(DEFAULT_PARAMS.replace(**TRUTH), cluster)
    points = points_of(measurements, "m")
    splits = Holdout().splits(points)
    held_out = set(splits[0].test)
    poisoned = [replace(p, measurement=replace(p.measurement, time_us=p.time_us * (1.6 if i in held_out else 1.0)))
                for i, p in enumerate(points)]
    clean, dirty = (calibrate(ps, cluster, residual=False) for ps in (points, poisoned))
    for name, changed in ((splits[0].name, False), (splits[1].name, True)):
        a = [p.predicted_us for p in clean.predictions if p.split == name]
        b = [p.predicted_us for p in dirty.predictions if p.split == name]
        assert (a != b) is changed, name


def test_splits_cover_every_point_once_as_held_out_and_keep_a_size_together(cluster):
    points = points_of(synthetic(DEFAULT_PARAMS, cluster), "m")
    splits = Holdout(folds=3).splits(points)
    tested = [i for s in splits for i in s.test]
    assert sorted(tested) == list(range(len(points)))
    for s in splits:
        assert not set(s.train) & set(s.test)
        assert not {points[i].task.nbytes for i in s.train} & {points[i].task.nbytes for i in s.test}
    thirds = Holdout(train_on="fold").splits(points)
    assert all(len(s.train) < len(s.test) for s in thirds)


def test_leave_one_gpu_count_out_fits_on_one_log_and_scores_the_other():
    cluster = load_cluster(A100, nodes=2)
    result = calibrate(read_points([AZURE8, AZURE16]), cluster, holdout=Holdout(by="gpus", train_on="fold"))
    assert {p.split for p in result.predictions} == {"fit on 8 GPUs", "fit on 16 GPUs"}
    trained_on_8 = {p.where.split(":")[0] for p in result.predictions if p.split == "fit on 8 GPUs"}
    assert trained_on_8 == {str(AZURE16)}


# ---- refusal, profiles, stacking ------------------------------------------------------------------


def test_a_fit_that_cannot_improve_is_refused_and_writes_nothing(cluster, tmp_path):
    """Measurements that are the prior's own predictions: nothing can be lower than zero error."""
    model = TwinModel(cluster, points_of(synthetic(DEFAULT_PARAMS, cluster), "m"))
    exact = [replace(p.measurement, time_us=float(t)) for p, t in zip(model.points, model.times(DEFAULT_PARAMS),
                                                                       strict=True)]
    result = calibrate(exact, cluster)
    assert not result.accepted and "does not lower the held-out error" in result.refused
    assert result.params == DEFAULT_PARAMS and result.outcome is None
    target = tmp_path / "profile.json"
    target.write_text("an older profile")
    with pytest.raises(CalibrationRefused, match="not written: the fit does not lower"):
        result.save(target)
    assert target.read_text() == "an older profile"
    with pytest.raises(CalibrationRefused):
        result.save(tmp_path / "new.json")
    assert not (tmp_path / "new.json").exists()
    assert "REFUSED" in result.report()


def test_a_real_log_calibrates_and_its_held_out_error_falls(azure8):
    assert azure8.accepted
    rows = {r.regime: r for r in azure8.heldout}
    assert rows["all sizes"].after_pct < rows["all sizes"].before_pct
    assert rows[">= 1 MiB"].after_pct < rows[">= 1 MiB"].before_pct
    meta = azure8.profile_meta
    assert meta.hardware == "dgx-a100:8x1" and meta.points == 28 and meta.sources == (AZURE8.name,)
    assert "Azure ND A100 v4 (ND96asr_v4)" in meta.notes
    assert {c.name for c in meta.changes} == set(meta.moved) and meta.moved
    assert "3-fold over message sizes" in meta.holdout


def test_profiles_keep_their_provenance_and_stack(azure8, tmp_path):
    first = tmp_path / "a100-type.json"
    azure8.save(first)
    loaded = load_profile(first)
    assert loaded.params == azure8.params and loaded.meta == azure8.profile_meta
    assert json.loads(first.read_text())["version"] == 2
    second = calibrate(read_points([AZURE16]), load_cluster(A100, nodes=2), prior=loaded, sources=[AZURE16.name])
    assert second.accepted and second.prior == loaded.params
    (layer,) = second.profile_meta.stack
    assert layer == replace(azure8.profile_meta, stack=())
    path = tmp_path / "a100-2node.json"
    second.save(path)
    again = load_profile(path)
    assert again.meta.stack == second.profile_meta.stack and again.meta.hardware == "dgx-a100:8x2"
    text = show_profile(again, str(path))
    assert "stacked on (oldest first):" in text and "1. dgx-a100:8x1, 28 points" in text
    assert "cluster: dgx-a100:8x2" in text and "held-out median |busbw error|" in text
    for change in again.meta.changes:
        assert change.name in text


def test_a_residual_model_corrects_only_inside_what_it_saw(azure8, tmp_path):
    points = read_points([AZURE8])
    model = TwinModel(load_cluster(A100), [p for p in points if p.task.nbytes])
    residual = ResidualModel.of(model.points, model.configs, model.log_errors(DEFAULT_PARAMS))
    inside = model.points[5]
    assert residual.correction(inside, model.configs[5]) == pytest.approx(inside.time_us / model.times(
        DEFAULT_PARAMS)[5])
    bigger = replace(inside, measurement=replace(inside.measurement, task=replace(inside.task, nbytes=1 << 40)))
    other = replace(inside, measurement=replace(inside.measurement, task=replace(inside.task, nranks=4)))
    assert residual.correction(bigger, model.configs[5]) is None
    assert residual.correction(other, model.configs[5]) is None
    loaded = ResidualModel.from_dict(json.loads(json.dumps(residual.to_dict())))
    assert [r[0] for r in loaded.rows] == [r[0] for r in residual.rows]
    assert [r[1:] for r in loaded.rows] == [pytest.approx(r[1:], abs=1e-6) for r in residual.rows]
    assert loaded.correction(inside, model.configs[5]) == pytest.approx(residual.correction(inside, model.configs[5]))
    if azure8.residual is not None:
        azure8.save(tmp_path / "p.json")
        assert "applied only inside what it saw" in show_profile(load_profile(tmp_path / "p.json"))


# ---- bad input ------------------------------------------------------------------------------------


def test_a_log_of_another_cluster_is_refused_naming_it():
    with pytest.raises(CalibrationError, match=r"their hardware names A100, cluster dgx-h100:8x1 has H100-SXM5-80GB "
                                               r"GPUs: .*echo-azure-ndA100v4-allreduce-8gpu.txt: 8 B float, "):
        calibrate(read_points([AZURE8]), load_cluster("dgx-h100"))


def test_an_identity_of_another_cluster_is_refused(cluster):
    ms = [replace(m, hardware="dgx-h100:8x1") for m in synthetic(DEFAULT_PARAMS, cluster)]
    with pytest.raises(CalibrationError, match=r"measurements of another cluster \(dgx-h100:8x1\), not dgx-a100:8x1"):
        calibrate(ms, cluster)


def test_calls_on_more_gpus_than_the_cluster_has_say_how_many_nodes(cluster):
    with pytest.raises(CalibrationError, match=r"calls on up to 16 GPUs, cluster dgx-a100:8x1 has 8 .*--nodes 2"):
        calibrate(read_points([AZURE16]), cluster)


def test_busbw_above_what_the_links_carry_is_named(cluster):
    points = read_points([AZURE8])
    wrong = [replace(p, measurement=replace(p.measurement, time_us=p.time_us / 1000)) for p in points]
    with pytest.raises(CalibrationError, match=r"above 2x the 324 GB/s a GPU's links carry one way on dgx-a100:8x1: "
                                               r"are the times in µs\? .*8gpu.txt: 16384 B float, "):
        calibrate(wrong, cluster)


def test_times_a_thousand_times_too_slow_are_named(cluster):
    points = read_points([AZURE8])
    wrong = [replace(p, measurement=replace(p.measurement, time_us=p.time_us * 1000)) for p in points]
    with pytest.raises(CalibrationError, match=r"times are [\d,]+x slower than the twin predicts .*ms or ns"):
        calibrate(wrong, cluster)


def test_too_few_points_are_an_error(cluster):
    with pytest.raises(CalibrationError, match="too few points: 4 measurement"):
        calibrate(read_points([AZURE8])[10:14], cluster)
    with pytest.raises(CalibrationError, match="too few message sizes for 3-fold"):
        ms = synthetic(DEFAULT_PARAMS, cluster)
        calibrate([m for m in ms if m.task.nbytes in (1 << 20, 16 << 20)], cluster)
    with pytest.raises(CalibrationError, match="leave-one-GPU-count-out needs measurements on 2 or more GPU counts"):
        calibrate(read_points([AZURE8]), cluster, holdout=Holdout(by="gpus"))


def test_contradicting_measurements_are_warned_naming_both_records(cluster):
    ms = synthetic(DEFAULT_PARAMS.replace(**TRUTH), cluster)
    twice = [*ms, replace(ms[3], time_us=ms[3].time_us * 2.5)]
    result = calibrate(twice, cluster)
    (warning,) = [w for w in result.warnings if "contradicting" in w]
    assert f"measurements: record 4 took {ms[3].time_us:.4g} µs, measurements: record {len(twice)} " in warning
    assert "(2.5x)" in warning


def test_an_unknown_parameter_name_is_named(cluster):
    with pytest.raises(CalibrationError, match=r"unknown parameter\(s\) 'cta\.speed'"):
        calibrate(synthetic(DEFAULT_PARAMS, cluster), cluster, parameters=["cta.speed"])


def test_a_config_the_cluster_cannot_run_names_the_record(cluster):
    ms = synthetic(DEFAULT_PARAMS, cluster)
    simple = next(i for i, m in enumerate(ms) if m.config.proto is Proto.SIMPLE)
    nvls = replace(ms[simple], config=replace(ms[simple].config, algo=Algo.NVLS))
    with pytest.raises(CalibrationError, match=rf"measurements: record {simple + 1}: allreduce with nvls/simple/p2p "
                                               r".* cannot run on cluster dgx-a100:8x1 .*nvls needs Hopper"):
        calibrate([*ms[:simple], nvls, *ms[simple + 1:]], cluster)


def test_errors_derive_from_the_error_root():
    assert issubclass(CalibrationError, CcltwinError) and issubclass(CalibrationRefused, CalibrationError)


# ---- sources: files, measurement records, stores, incremental refits ------------------------------


def test_read_points_takes_logs_records_and_stores(cluster, tmp_path):
    log = read_points([AZURE8])
    assert len(log) == 28 and {p.gpus_per_process for p in log} == {8}  # the header's nGpus 8
    assert log[0].back_to_back and "Azure ND A100 v4" in log[0].described
    ms = synthetic(DEFAULT_PARAMS, cluster)[:5]
    records = tmp_path / "bench.jsonl"
    records.write_text("".join(json.dumps(m.to_dict()) + "\n" for m in ms))
    listed = tmp_path / "bench.json"
    listed.write_text(json.dumps([m.to_dict() for m in ms]))
    with Store(tmp_path / "tuning.db") as store:
        store.add_many(ms)
        store.add(replace(ms[0], source="twin"))  # a prediction: never fitted
    for path in (records, listed, tmp_path / "tuning.db"):
        points = read_points([path])
        assert [p.measurement for p in points] == ms, path
        assert not points[0].back_to_back
    second = read_points([tmp_path / "tuning.db"])[1]
    assert second.where.endswith(f"history row 2 (live allreduce {ms[1].task.nbytes} B)")


def test_bad_sources_are_named(tmp_path):
    with pytest.raises(CalibrationError, match=r"nope\.log: no such file"):
        read_points([tmp_path / "nope.log"])
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"task": {"op": "allreduce", "nbytes": 8, "nranks": 2}, "time_us": -1}\n')
    with pytest.raises(CalibrationError, match=r"bad.jsonl:1"):
        read_points([bad])
    log = tmp_path / "empty.txt"
    log.write_text("# nothing here\n")
    with pytest.raises(CalibrationError, match=r"empty\.txt: no data rows"):
        read_points([log])
    with Store(tmp_path / "two.db") as store:
        store.add(Measurement(task=Task(Op.ALLREDUCE, 8, 2), config=None, time_us=1.0, source="live", hardware="a:1x1"))
        store.add(Measurement(task=Task(Op.ALLREDUCE, 8, 2), config=None, time_us=1.0, source="live", hardware="b:1x1"))
    with pytest.raises(CalibrationError, match=r"two.db: the store holds measurements of 'a:1x1', 'b:1x1'; say which"):
        read_points([tmp_path / "two.db"])


def test_a_recalibrator_refits_as_live_tuning_fills_the_store_and_reranks_what_is_left(cluster, tmp_path):
    truth = DEFAULT_PARAMS.replace(**TRUTH)
    trials = synthetic(truth, cluster, noise=0.02, seed=1)
    store_path = tmp_path / "tuning.db"
    recal = Recalibrator(store_path, cluster, min_new=40)
    with Store(store_path) as store:
        store.add_many(trials[:30])
        assert recal.refit() is None and recal.params == DEFAULT_PARAMS  # too few new trials yet
        store.add_many(trials[30:])
    first = recal.refit()
    assert first.accepted and recal.params == first.params and recal.fitted_points == len(trials)
    assert recal.refit() is None  # nothing new
    task = Task(Op.ALLREDUCE, 64 << 20, 8, group="8x1")
    plan = recal.warm_start(task)
    assert plan == sorted(plan, key=lambda ct: ct[1]) and len({c.subspace for c, _ in plan}) == len(plan)
    configs = [Config(Algo.RING, Proto.SIMPLE, Transport.P2P, nc, 512, 1 << 20) for nc in (1, 4, 16)]
    ranked = recal.rerank(task, configs)
    assert [c.nchannels for c, _ in ranked] == [16, 4, 1]
    executor = TwinExecutor(cluster, params=first.params, noise=0.0, spike_prob=0.0)
    assert [t for _, t in ranked] == pytest.approx(sorted(executor.true_time(task, c) for c in configs))


def test_interference_measurements_fit_the_copy_rate_under_compute(cluster):
    truth = DEFAULT_PARAMS.replace(**{"compute.copy_rate_under_compute": 0.55})
    ms = synthetic(truth, cluster)
    shared = [replace(m, interference=0.3) for m in ms]
    model = TwinModel(cluster, points_of(shared, "m"))
    times = model.times(truth)
    measured = [replace(m, time_us=float(t)) for m, t in zip(shared, times, strict=True)]
    result = calibrate([*ms, *measured], cluster, parameters=["compute.copy_rate_under_compute", "cta.hbm_share"])
    assert result.params.compute.copy_rate_under_compute == pytest.approx(0.56, abs=0.02)


def test_module_examples_run():
    for module in (holdout_module, model_module):
        assert doctest.testmod(module).failed == 0


def test_fitting_is_quick_enough_for_a_file(cluster):
    """Not a timing test: the number of model evaluations a fit of a real log needs stays small."""
    points = [p for p in read_points([AZURE8]) if p.task.nbytes]
    model = TwinModel(cluster, points)
    out = fit(lambda p: model.log_errors(p), DEFAULT_PARAMS)
    assert out.evaluations < 400 and math.isfinite(out.rms_after) and out.rms_after < out.rms_before


def test_a_kineto_trace_gives_its_nccl_kernels_with_their_algorithm_and_protocol():
    trace = Path(__file__).resolve().parents[1] / "data/traces/capture-h200/ddp-iteration-rank0.kineto.json.gz"
    (point,) = read_points([trace])
    m = point.measurement
    assert m.task == Task(Op.ALLREDUCE, 46163968, 2, "float32") and m.env == {"NCCL_ALGO": "RING", "NCCL_PROTO": "LL"}
    assert m.source == "live" and m.hardware == "NVIDIA H200" and m.nccl_version == "2.28.9"
    assert m.time_us == pytest.approx(20579.03, abs=0.01) and m.interference == 0.0
    model = TwinModel(load_cluster("hgx-h200"), [point])
    assert (model.configs[0].algo, model.configs[0].proto) == (Algo.RING, Proto.LL)
    with pytest.raises(CalibrationError, match="their hardware names H200, cluster dgx-a100:8x1 has A100"):
        calibrate([point] * 6, load_cluster(A100))


def test_a_prior_outside_the_plausible_range_is_pulled_inside_it(cluster):
    """The walls are drawn around the sourced constants, not the prior: a prior profile whose CTA
    rate is twice the sourced one cannot keep it."""
    truth = DEFAULT_PARAMS.replace(**TRUTH)
    far = DEFAULT_PARAMS.replace(**{"cta.hbm_share": 0.043})
    fitted = calibrate(synthetic(truth, cluster), cluster, prior=far).params
    assert fitted.cta.hbm_share <= DEFAULT_PARAMS.cta.hbm_share * SPREAD["fraction"][1] * (1 + 1e-9)
    assert fitted.cta.hbm_share == pytest.approx(TRUTH["cta.hbm_share"], rel=0.05)
