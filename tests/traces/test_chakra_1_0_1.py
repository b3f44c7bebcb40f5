"""Execution traces of schema 1.0.1 (PyTorch 2.0): the 8 ranks of the DLRM step, the same job as its
Kineto traces."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.traces.test_kineto_annotations import DLRM_TASKS
from traces.chakra import read_chakra
from traces.errors import TraceError
from traces.task import Task


def test_dlrm_eight_ranks(dlrm):
    files = sorted((dlrm / "dlrm_pytorch_et").glob("dlrm_eg_*.json"))
    trace = read_chakra(files)
    assert trace.metadata["schemas"] == ["1.0.1"] and trace.world_size == 8
    assert [r.rank for r in trace.ranks] == list(range(8))  # read from each file's rank input
    # the same collectives as the job's Kineto traces; the group is known only by its address here
    assert trace.tasks() == {Task(t.op, t.nbytes, t.nranks, t.dtype, "pg0"): n for t, n in DLRM_TASKS.items()}
    assert trace.group("pg0").ranks == tuple(range(8))
    (uneven,) = trace.metadata["alltoallv"]
    assert uneven["bytes"]["3"] == 13312 * 4 and uneven["bytes"]["4"] == 4736 * 4


def test_one_rank_alone_knows_the_world_from_its_splits(dlrm):
    trace = read_chakra([dlrm / "dlrm_pytorch_et" / "dlrm_eg_5.json"])
    assert (trace.world_size, [r.rank for r in trace.ranks]) == (8, [5])


def test_node_without_collective_name(dlrm, tmp_path):
    doc = json.loads((dlrm / "dlrm_pytorch_et" / "dlrm_eg_0.json").read_text())
    node = next(n for n in doc["nodes"] if n["name"] == "record_param_comms" and "allreduce" in n["inputs"])
    node["inputs"] = [v for v in node["inputs"] if v != "allreduce"]
    path = tmp_path / "eg.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TraceError, match=rf"eg\.json: record_param_comms node {node['id']}: no collective name"):
        read_chakra([path])


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_corrupt_1_0_1_nodes_raise_only_trace_error(dlrm, tmp_path, data):
    doc = json.loads((dlrm / "dlrm_pytorch_et" / "dlrm_eg_0.json").read_text())
    comms = [n for n in doc["nodes"] if n["name"] in ("record_param_comms", "c10d::alltoall_base_")]
    node = data.draw(st.sampled_from(comms))
    section = data.draw(st.sampled_from(["inputs", "input_types", "outputs", "parent", "id"]))
    node[section] = data.draw(
        st.none() | st.integers(-1, 3) | st.text(max_size=5)
        | st.lists(st.integers(-1, 9) | st.text(max_size=3) | st.lists(st.integers(-1, 9), max_size=8), max_size=8)
    )
    path = tmp_path / "eg.json"
    path.write_text(json.dumps(doc))
    try:
        trace = read_chakra([path])
    except TraceError as err:
        assert str(err).startswith(f"{path}")
    else:
        assert trace.world_size >= 1 and trace.metadata["schemas"] == ["1.0.1"]
