"""One cluster identity on plans, measurements and the store, and files older versions wrote."""

import json
import sqlite3

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from ccltwin import app
from tests.testdata import DATA
from traces.errors import TraceError
from traces.task import Op, Task
from tuner.identity import ClusterIdentity, cluster_identity, normalise_identity, parse_identity
from tuner.measurement import Measurement, read_nccl_tests_measurements
from tuner.plan import load_plan
from tuner.store import Store
from twin.executor import TwinExecutor
from twin.rank import rank_tasks
from twin.topology import list_presets, load_cluster

NCCL_TESTS = DATA / "nccl-tests"
ONE_TASK = ["--topology", "a40-pcie", "--nodes", "1", "--gpus-per-node", "4", "--op", "allreduce",
            "--nbytes", "8MiB", "--nranks", "4", "--search", "ours"]
runner = CliRunner()

names = st.text(min_size=1, max_size=30).filter(lambda s: s == s.strip() and s.isprintable())


@given(names, st.integers(1, 4096), st.integers(1, 72))
def test_an_identity_reads_back_as_the_cluster_it_names(name, nodes, gpus):
    text = cluster_identity(name, nodes=nodes, gpus_per_node=gpus)
    assert parse_identity(text) == ClusterIdentity(name, gpus_per_node=gpus, nodes=nodes)
    assert normalise_identity(text) == text  # what this version writes is read as it is


@given(names, st.integers(1, 4096), st.integers(1, 72), st.sampled_from(["H100-SXM5-80GB", "A40", "L40S"]))
def test_an_old_plan_label_reads_as_the_identity(name, nodes, gpus, model):
    assert normalise_identity(f"{name} ({nodes} node(s) x {gpus} {model})") == cluster_identity(
        name, nodes=nodes, gpus_per_node=gpus)


def test_every_preset_cluster_names_itself_by_its_description_and_shape():
    for name, _ in list_presets():
        for nodes, gpus in ((1, None), (3, 2)):
            cluster = load_cluster(name, nodes=nodes, gpus_per_node=gpus)
            assert parse_identity(cluster.identity) == ClusterIdentity(name, gpus_per_node=cluster.gpus_per_node,
                                                                       nodes=nodes)
            assert normalise_identity(cluster.label) == cluster.identity  # the old plan's name for it


def test_hardware_ids_of_real_nccl_tests_logs_are_not_cluster_identities_and_stay_as_they_are():
    for log in sorted(NCCL_TESTS.glob("*.txt")):
        try:
            measurements = read_nccl_tests_measurements(log)
        except TraceError:  # a log without a HARDWARE line
            continue
        hardware = measurements[0].hardware
        assert parse_identity(hardware) is None and normalise_identity(hardware) == hardware, log.name


def test_bad_names_and_shapes_are_refused():
    for name, nodes, gpus in (("", 1, 1), (" dgx", 1, 1), ("two\nlines", 1, 1), ("dgx", 0, 8), ("dgx", 2, -1),
                              ("dgx", True, 8)):
        with pytest.raises(ValueError):
            cluster_identity(name, nodes=nodes, gpus_per_node=gpus)
    assert parse_identity("dgx-h100:0x2") is None and parse_identity("dgx-h100") is None


def test_plans_measurements_and_the_store_use_the_same_identity(tmp_path):
    cluster = load_cluster("a40-pcie", nodes=1, gpus_per_node=4)
    plan = rank_tasks({Task(Op.ALLREDUCE, 8 << 20, 4, group="4x1"): 1.0}, cluster).plan
    assert plan.cluster == TwinExecutor(cluster).hardware == cluster.identity == "a40-pcie:4x1"
    db = tmp_path / "tuning.db"
    result = runner.invoke(app, ["tune", *ONE_TASK, "--max-trials", "3", "--store", str(db)])
    assert result.exit_code == 0, result.output
    with Store(db) as store:
        assert store.hardware_ids() == [cluster.identity]


def test_a_plan_file_of_the_previous_version_loads_and_warm_starts_on_its_cluster(tmp_path):
    """The previous version wrote ``Cluster.label`` as the plan's cluster; tune then compared labels."""
    cluster = load_cluster("a40-pcie", nodes=1, gpus_per_node=4)
    plan = rank_tasks({Task(Op.ALLREDUCE, 8 << 20, 4, group="4x1"): 1.0}, cluster).plan
    doc = plan.to_dict() | {"cluster": "a40-pcie (1 node(s) x 4 A40)"}
    old = tmp_path / "old-plan.json"
    old.write_text(json.dumps(doc, indent=1))
    assert load_plan(old).cluster == "a40-pcie:4x1"
    result = runner.invoke(app, ["tune", *ONE_TASK, "--max-trials", "3", "--warm-start", str(old)])
    assert result.exit_code == 0, result.output
    assert "warm start from the plan" in result.output and "was ranked on" not in result.output


def test_a_store_of_the_previous_version_loads_its_twin_trials_under_the_cluster_name(tmp_path):
    """The previous twin executor recorded ``twin:NAME`` (no node count); the file stays as it was."""
    db = tmp_path / "old.db"
    assert runner.invoke(app, ["tune", *ONE_TASK, "--max-trials", "4", "--store", str(db)]).exit_code == 0
    with Store(db) as store:
        store.add(Measurement(task=Task(Op.ALLREDUCE, 1 << 20, 2, group="2x1"), config=None, time_us=20.0,
                              source="nccl-tests", hardware="l40s-node"))
    raw = sqlite3.connect(db)
    raw.execute("UPDATE history SET hardware = 'twin:a40-pcie' WHERE source = 'twin'")  # as the old version wrote
    raw.commit()
    raw.close()
    with Store(db) as store:
        assert store.hardware_ids() == ["a40-pcie", "l40s-node"]
        old = store.history(hardware="a40-pcie")
        assert len(old) == 4 and {(m.source, m.hardware) for m in old} == {("twin", "a40-pcie")}
        assert store.history(hardware="twin:a40-pcie") == []
        assert [m.hardware for m in store.history()] == ["a40-pcie"] * 4 + ["l40s-node"]
    raw = sqlite3.connect(db)
    assert raw.execute("SELECT DISTINCT hardware FROM history ORDER BY 1").fetchall() == [("l40s-node",),
                                                                                          ("twin:a40-pcie",)]
    raw.close()
    shown = runner.invoke(app, ["store", "show", str(db), "--history", "--hardware", "a40-pcie", "--json"])
    assert shown.exit_code == 0, shown.output
    assert {row["hardware"] for row in json.loads(shown.output)} == {"a40-pcie"}


def test_a_measurement_record_of_the_previous_version_reads_with_the_cluster_name():
    m = Measurement(task=Task(Op.ALLREDUCE, 1 << 20, 8, group="8x1"), config=None, time_us=50.0, source="twin",
                    hardware="twin:dgx-h100")
    assert Measurement.from_dict(m.to_dict()).hardware == "dgx-h100"
