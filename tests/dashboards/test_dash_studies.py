"""The computations behind the pages: bad input is a one-line message naming the field, sweeps give
the same numbers on every engine, the knee is where a curve stops paying back, jobs report
progress and keep bugs loud."""

from __future__ import annotations

import base64
import gzip
import json

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from dashboards.clusters import CandidateCluster, preset_for
from dashboards.inputs import InputError
from dashboards.jobs import KEEP_FINISHED, Jobs
from dashboards.parallel import run_parallel
from dashboards.studies import bend, compare, knee, metric_of, sweep, whatif_report
from dashboards.workloads import WorkloadChoice, read_upload
from traces.examples import path as example_path
from traces.trace_file import load_trace
from twin.topology import TopologyError
from twin.whatif import Candidate, what_if


@pytest.mark.parametrize(("row", "message"), [
    ({"preset": "dgx-h100", "nodes": "0"}, "dgx-h100: nodes must be at least 1, got 0"),
    ({"preset": "dgx-h100", "name": "big", "nic_gbps": "-1"}, "big: NIC rate (Gb/s) must be positive, got -1"),
    ({"preset": "dgx-a100", "gpus_per_node": "16"}, "dgx-a100 16gpn: GPUs per node 16, but a dgx-a100 node has 8"),
    ({"preset": "dgx-a100", "gpu": "Z9000"}, "dgx-a100: unknown GPU model 'Z9000'"),
    ({"preset": "l40s-pcie", "intra_node": "nvswitch"}, "a L40S has no NVLink; choose PCIe"),
    ({"preset": "dgx-h100", "oversubscription": "0.5"}, "oversubscription must be at least 1"),
    ({"preset": "nope"}, "unknown preset 'nope'"),
])
def test_a_bad_candidate_row_names_the_candidate_and_the_field(row, message):
    with pytest.raises(InputError) as err:
        CandidateCluster.from_row(row)
    assert message in str(err.value)


def test_an_edited_candidate_builds_what_it_says():
    """GPU model, NIC rate, NICs, oversubscription and SHARP reach the twin's graph."""
    c = CandidateCluster.from_row({"preset": "dgx-h100", "gpu": "h200", "nic_gbps": "200", "nics_per_node": "4",
                                   "oversubscription": "2", "sharp": "yes", "price_per_gpu_hour": "3.5"})
    cluster = c.build(nodes=64)
    assert (cluster.gpu.model, cluster.nics_per_node, cluster.nodes) == ("H200-SXM-141GB", 4, 64)
    assert {d["gbps"] for _, d in cluster.graph.nodes(data=True) if d["kind"] == "nic"} == {200.0}
    assert all(d["sharp"] for _, d in cluster.graph.nodes(data=True) if d["kind"] == "switch")
    assert CandidateCluster.from_row(c.to_row()) == c


def test_preset_for_reads_the_gpu_off_a_hardware_description():
    assert preset_for("single node of 'NVIDIA H100-DGX' class") == "dgx-h100"
    assert preset_for("Stanford FarmShare 'oat' GPU node: NVIDIA L40S 48GB PCIe") == "l40s-pcie"
    assert preset_for("ABCI 2.0 Compute Node (A)") is None


def test_a_cluster_too_small_for_the_trace_is_a_message_beside_the_others():
    """One candidate with fewer GPUs than the trace's world gets its message; the others still run."""
    result = compare(WorkloadChoice.example("vgg19-dp32"), [CandidateCluster(preset="dgx-h100", nodes=2),
                                                            CandidateCluster(preset="dgx-a100")],
                     tuned=False, engine="serial")
    assert [c.cluster for c in result.report.clusters] == ["dgx-a100:8x4"]
    assert result.errors == ("dgx-h100: the trace needs 32 GPUs; dgx-h100 has 16 (2 node(s) x 8): use at least "
                             "4 nodes",)


def test_candidates_need_distinct_names():
    with pytest.raises(InputError, match="same name"):
        compare(WorkloadChoice.example("vgg19-dp32"), [CandidateCluster(preset="dgx-h100")] * 2, engine="serial")


def _data_url(content: bytes) -> str:
    return "data:application/octet-stream;base64," + base64.b64encode(content).decode()


@pytest.mark.parametrize(("content", "message"), [
    (b"", "upload 'job.json': the file is empty"),
    (b"\x1f\x8b\x08garbage", "upload 'job.json': not a readable trace JSON file"),
    (b'{"format": "chrome-trace"}', "upload 'job.json': not a ccltwin trace"),
    (b"not json", "upload 'job.json': not a readable trace JSON file"),
])
def test_an_unreadable_upload_is_a_message_naming_it(content, message):
    with pytest.raises(InputError) as err:
        read_upload("job.json", _data_url(content))
    assert str(err.value).startswith(message)


def test_an_uploaded_trace_replays_like_the_file():
    """A gzipped trace uploaded is the bundled file's trace; it cannot be scaled to other GPU counts."""
    raw = example_path("vgg19-dp32").read_bytes()
    choice = read_upload("vgg19.json.gz", _data_url(raw))
    assert choice.name == "vgg19" and choice.world_size == 32
    assert json.loads(gzip.decompress(raw))["format"] == "ccltwin-trace"
    with pytest.raises(InputError, match="fixed world size"):
        choice.scaled(64)


def test_a_nodes_sweep_grows_a_planned_job_with_the_cluster():
    """Bundled workloads carry their plan: more nodes, more data-parallel replicas, same per-GPU work."""
    result = sweep(WorkloadChoice.example("vgg19-dp32"), CandidateCluster(preset="dgx-h100"), "nodes", [2, 4, 8],
                   tuned=False, engine="serial")
    assert [p.report.gpus for p in result.points] == [16, 32, 64]
    assert result.notes and all(p.error is None for p in result.points)


def test_a_price_sweep_prices_one_replay():
    result = sweep(WorkloadChoice.example("vgg19-dp32"), CandidateCluster(preset="dgx-a100"), "price_per_gpu_hour",
                   [1, 2, 4], tuned=False, engine="serial")
    costs = [metric_of(p.report, "usd_per_iteration") for p in result.points]
    assert costs[1] == pytest.approx(2 * costs[0]) and costs[2] == pytest.approx(4 * costs[0])


@pytest.mark.parametrize("values", [[0, 2], [1.5]])
def test_sweep_values_must_fit_the_parameter(values):
    with pytest.raises(InputError, match="sweep values must be whole numbers of at least 1"):
        sweep(WorkloadChoice.example("vgg19-dp32"), CandidateCluster(preset="dgx-h100"), "nodes", values)


def test_local_processes_give_the_serial_numbers():
    """A sweep fanned out to processes returns, in order, what one after another gives."""
    args = (WorkloadChoice.example("vgg19-dp32"), CandidateCluster(preset="dgx-a100"), "nic_gbps", [100, 200, 400])
    seen = []
    local = sweep(*args, tuned=False, engine="local", on_progress=lambda d, t: seen.append((d, t)))
    serial = sweep(*args, tuned=False, engine="serial")
    assert [p.report.default.as_dict() for p in local.points] == [p.report.default.as_dict() for p in serial.points]
    assert seen[0] == (0, 3) and seen[-1] == (3, 3)


def test_ray_gives_the_local_numbers():
    """The same sweep on a local Ray cluster (started here) and on local processes."""
    ray = pytest.importorskip("ray", reason="Ray is an optional extra (pip install 'ccltwin[ray]'); not installed")
    args = (WorkloadChoice.example("vgg19-dp32"), CandidateCluster(preset="dgx-h100"), "nic_gbps", [100, 400])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        on_ray = sweep(*args, tuned=False, engine="ray")
    finally:
        ray.shutdown()
    local = sweep(*args, tuned=False, engine="local")
    assert [p.report.default.as_dict() for p in on_ray.points] == [p.report.default.as_dict() for p in local.points]


def test_an_unknown_engine_is_refused():
    with pytest.raises(InputError, match="unknown engine 'spark'"):
        run_parallel(abs, [1], engine="spark")


@given(st.lists(st.floats(0.1, 1e3), min_size=3, max_size=12, unique=True), st.floats(0.01, 100), st.floats(-50, 50))
def test_knee_is_interior_and_ignores_units(ys, scale, shift):
    """A knee is never an end point, and rescaling the metric (ms or µs, a shift) does not move it."""
    xs = list(range(len(ys)))
    distance = np.sort(bend(xs, ys))
    assume(distance[-1] - distance[-2] > 1e-9)  # one farthest point (a tie may go either way)
    i = knee(xs, ys)
    assert i is None or 0 < i < len(ys) - 1
    assert knee(xs, [scale * y + shift for y in ys]) == i


def test_knee_of_diminishing_returns():
    """Iteration time against NIC rate: the last big step is the knee; a straight line has none."""
    assert knee([50, 100, 200, 400, 800], [45.3, 42.1, 41.3, 41.3, 41.3]) == 2
    assert knee([1, 2, 3, 4], [10, 8, 6, 4]) is None


def test_a_job_reports_progress_and_a_user_error_as_its_message():
    jobs = Jobs()
    done = jobs.wait(jobs.start(lambda on_progress: [on_progress(i, 3) for i in range(4)][-1] or "ok"))
    assert (done.finished, done.done, done.total, done.result) == (True, 3, 3, "ok")

    def bad(on_progress):
        raise InputError("nodes must be at least 1, got 0")

    assert jobs.wait(jobs.start(bad)).error == "nodes must be at least 1, got 0"


def test_a_bug_in_a_job_is_raised_with_its_traceback():
    def broken(on_progress):
        return {}["missing"]

    jobs = Jobs()
    job = jobs.start(broken)
    with pytest.raises(KeyError):
        jobs.wait(job)


def test_old_finished_jobs_are_forgotten_with_a_message():
    """Only the latest ``KEEP_FINISHED`` finished jobs keep their results; an older one says so."""
    jobs = Jobs()
    first = jobs.start(lambda on_progress: "first")
    jobs.wait(first)
    for _ in range(KEEP_FINISHED):
        jobs.wait(jobs.start(lambda on_progress: "later"))
    jobs.start(lambda on_progress: "last")
    assert "is no longer kept" in jobs.status(first).error


def test_the_cli_whatif_in_parallel_is_twin_whatif():
    """``whatif_report`` on local processes gives ``twin.whatif.what_if``'s report, in the order
    asked, and reports each cluster replayed; a YAML-less bad preset still raises."""
    trace = load_trace(example_path("vgg19-dp32"))
    candidates = [Candidate("dgx-a100"), Candidate("dgx-h100", nodes=4, price_per_gpu_hour=2.0)]
    seen = []
    parallel = whatif_report(trace, candidates, tuned=False, name="vgg", on_progress=lambda d, t: seen.append(d))
    serial = what_if(trace, candidates, tuned=False, name="vgg")
    assert parallel.as_dict() == serial.as_dict() and seen[-1] == 2
    with pytest.raises(TopologyError, match="unknown preset 'dgx-z9'"):
        whatif_report(trace, [Candidate("dgx-z9")], tuned=False, engine="serial")
