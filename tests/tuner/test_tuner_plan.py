"""The warm-start plan: round trips, ordering rules, lookups, and clear errors on bad files."""

import copy
import json
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from traces.task import Op, Task
from tuner.config import Algo, Config, Proto, Transport
from tuner.plan import Plan, PlanEntry, PlanError, RankedSubspace, load_plan, save_plan
from tuner.process_knobs import ProcessSettings


def ranked(algo, proto, time_us, transport=Transport.P2P, nchannels=16):
    return RankedSubspace(config=Config(algo, proto, transport, nchannels, 256, 131072), time_us=time_us)


def make_plan() -> Plan:
    allreduce = PlanEntry(
        task=Task(Op.ALLREDUCE, 64 << 20, 16, group="8x2"),
        ranked=(ranked(Algo.NVLS_TREE, Proto.SIMPLE, 330.5), ranked(Algo.RING, Proto.SIMPLE, 410.0),
                ranked(Algo.RING, Proto.LL128, 455.25), ranked(Algo.TREE, Proto.SIMPLE, 470.0, Transport.SHM)),
        default=ranked(Algo.NVLS_TREE, Proto.SIMPLE, 339.4, nchannels=16),
        calls_per_iteration=2.0)
    allgather = PlanEntry(
        task=Task(Op.ALLGATHER, 8 << 20, 8, dtype="bfloat16", group="8x1"),
        ranked=(ranked(Algo.NVLS, Proto.SIMPLE, 30.0), ranked(Algo.RING, Proto.LL128, 31.0)),
        default=ranked(Algo.RING, Proto.LL128, 35.0))
    return Plan(cluster="dgx-h100 2x8 H100-SXM5-80GB", nccl_version="2.28.9", created_by="test",
                process=ProcessSettings(nthreads=256, buffsize=1 << 20), entries=(allreduce, allgather))


def test_a_plan_survives_save_and_load(tmp_path):
    plan = make_plan()
    path = tmp_path / "plan.json"
    save_plan(plan, path)
    assert load_plan(path) == plan
    assert [p.name for p in tmp_path.iterdir()] == ["plan.json"]  # no temporary file left behind
    assert json.loads(path.read_text())["format"] == "ccltwin-plan"


def test_warm_start_lists_every_subspace_fastest_first():
    entry = make_plan().entries[0]
    start = entry.warm_start()
    assert [str(c.subspace) for c, _ in start] == ["nvls_tree/simple/p2p", "ring/simple/p2p", "ring/ll128/p2p",
                                                   "tree/simple/shm"]
    assert [t for _, t in start] == sorted(t for _, t in start)
    assert entry.speedup == pytest.approx(339.4 / 330.5)


def test_entries_are_found_by_task():
    plan = make_plan()
    task = Task(Op.ALLGATHER, 8 << 20, 8, dtype="bfloat16", group="8x1")
    assert plan.entry(task).best.subspace.algo is Algo.NVLS
    with pytest.raises(KeyError):
        plan.entry(Task(Op.ALLGATHER, 8 << 20, 8, group="8x1"))
    assert plan.find(Task(Op.ALLGATHER, 8 << 20, 8)) is plan.entries[1]  # dtype and group not known live
    assert plan.find(Task(Op.ALLGATHER, 8 << 20, 8, group="1x8")) is None
    assert plan.find(Task(Op.ALLGATHER, 4 << 20, 8)) is None
    # a plan written from a trace names its groups ("tp:0"); a tuner knows the shape ("8x1")
    named = Plan(cluster=plan.cluster, nccl_version=plan.nccl_version, created_by="test", process=plan.process,
                 entries=(replace(plan.entries[1], task=replace(plan.entries[1].task, group="tp:0")),))
    assert named.find(Task(Op.ALLGATHER, 8 << 20, 8, group="8x1")) is named.entries[0]


def test_an_entry_refuses_an_unordered_or_repeated_ranking():
    base = make_plan().entries[0]
    with pytest.raises(ValueError, match="ordered by time_us"):
        PlanEntry(task=base.task, ranked=base.ranked[::-1], default=base.default)
    with pytest.raises(ValueError, match="ranked twice"):
        PlanEntry(task=base.task, ranked=(base.ranked[0], base.ranked[0]), default=base.default)
    with pytest.raises(ValueError, match="two plan entries"):
        Plan(cluster="c", nccl_version="2.28.9", created_by="", process=ProcessSettings(),
             entries=(base, base))


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(version=2), "plan version 2 is not supported"),
    (lambda d: d.pop("format"), "not a ccltwin plan"),
    (lambda d: d["entries"][1]["ranked"][0]["config"].update(nthreads=100), "entries[1].ranked[0].config"),
    (lambda d: d["entries"][0]["ranked"].reverse(), "entries[0]: .*ordered by time_us"),
    (lambda d: d["entries"][0]["task"].update(op="alltoallv"), "entries[0].task.op: unknown collective"),
    (lambda d: d["entries"][0]["default"].update(time_us="fast"), "entries[0].default.time_us: expected a finite"),
    (lambda d: d["process"].update(nthreads=1000), "process: nthreads must be a multiple of 32"),
])
def test_bad_plans_name_the_file_and_the_field(tmp_path, edit, message):
    doc = make_plan().to_dict()
    edit(doc)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(PlanError, match=rf"^{path}: .*{message}".replace("[", r"\[").replace("]", r"\]")):
        load_plan(path)


def test_an_unreadable_plan_file_names_itself(tmp_path):
    with pytest.raises(PlanError, match=r"missing\.json: cannot read the plan"):
        load_plan(tmp_path / "missing.json")
    path = tmp_path / "truncated.json"
    path.write_text(json.dumps(make_plan().to_dict())[:200])
    with pytest.raises(PlanError, match=r"truncated\.json: not a readable JSON plan"):
        load_plan(path)


def _paths(doc, prefix=()):
    """Every (path, value) of a JSON document."""
    yield prefix, doc
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for key, value in items:
        yield from _paths(value, (*prefix, key))


JUNK = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True),
                 st.text(max_size=8), st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3),
                                                                                           st.integers(), max_size=2))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_damaged_plan_gives_a_plan_error_or_a_valid_plan(tmp_path, data):
    """Replace or delete one field anywhere: load_plan either reads a valid plan or raises PlanError
    naming the file, never anything else."""
    doc = make_plan().to_dict()
    paths = [p for p, _ in _paths(doc) if p]
    path = data.draw(st.sampled_from(paths))
    damaged = copy.deepcopy(doc)
    parent = damaged
    for key in path[:-1]:
        parent = parent[key]
    if data.draw(st.booleans()):
        parent[path[-1]] = data.draw(JUNK)
    else:
        del parent[path[-1]]
    file = tmp_path / "plan.json"
    file.write_text(json.dumps(damaged))
    try:
        plan = load_plan(file)
    except PlanError as err:
        assert str(err).startswith(f"{file}: ")
    else:
        assert isinstance(plan, Plan)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=200))
def test_any_bytes_give_a_plan_error(tmp_path, blob):
    file = tmp_path / "plan.json"
    file.write_bytes(blob)
    with pytest.raises(PlanError, match=f"^{file}: "):
        load_plan(file)
