"""The trace schema: round trips, tasks, and clear errors for every kind of bad trace."""

from __future__ import annotations

import copy
import gzip
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from traces.errors import TraceError
from traces.schema import COMPUTE_CATEGORIES, CollectiveEvent, ComputeEvent, ProcessGroup, RankTrace, Trace
from traces.task import DTYPE_BYTES, Op, Task
from traces.trace_file import load_trace, save_trace, trace_from_dict, trace_to_dict

times = st.floats(0, 1e9, allow_nan=False, allow_infinity=False)
maybe_time = st.none() | times


@st.composite
def traces(draw) -> Trace:
    """Valid traces: every present rank issues the same collectives on each of its groups."""
    world = draw(st.integers(1, 6))
    subsets = draw(st.lists(st.sets(st.integers(0, world - 1), min_size=1), max_size=3))
    groups = [ProcessGroup("world", tuple(range(world)), name=draw(st.none() | st.just("default_pg")))]
    groups += [
        ProcessGroup(f"g{i}", tuple(sorted(s)), comm=draw(st.none() | st.text(max_size=4)))
        for i, s in enumerate(subsets)
    ]
    collective = st.tuples(
        st.just("collective"),
        st.sampled_from(groups),
        st.sampled_from(list(Op)),
        st.none() | st.integers(0, 2**40),
        st.sampled_from(sorted(DTYPE_BYTES)),
        st.integers(0, 3),
    )
    compute = st.tuples(st.just("compute"), st.text(min_size=1, max_size=8), st.integers(0, 3))
    program = draw(st.lists(collective | compute, max_size=10))
    present = sorted(draw(st.sets(st.integers(0, world - 1), min_size=1)))
    ranks = []
    for rank in present:
        events, next_id = [], draw(st.integers(0, 5))
        for item in program:
            after = tuple(
                draw(st.lists(st.sampled_from([e.id for e in events]), max_size=2, unique=True))
                if events
                else ()
            )
            start = draw(maybe_time)
            end = None if start is None else start + draw(times)
            if item[0] == "compute":
                _, name, iteration = item
                events.append(
                    ComputeEvent(
                        next_id,
                        name,
                        draw(st.sampled_from(["compute", "side"])),
                        iteration,
                        draw(maybe_time),
                        draw(st.none() | times),
                        draw(st.none() | st.integers(0)),
                        start,
                        end,
                        after,
                        category=draw(st.none() | st.sampled_from(COMPUTE_CATEGORIES)),
                        shape=tuple(draw(st.lists(st.integers(1, 2**20), max_size=5))),
                        dtype=draw(st.none() | st.sampled_from(["bfloat16", "float32"])),
                        kernels=draw(st.integers(0, 40)),
                        host_us=draw(st.none() | times),
                    )
                )
            else:
                _, group, op, nbytes, dtype, iteration = item
                if rank not in group.ranks or (op is Op.SENDRECV and len(group.ranks) < 2):
                    continue
                peer = root = None
                if op is Op.SENDRECV:
                    peer = group.ranks[(group.ranks.index(rank) + 1) % len(group.ranks)]
                if op in (Op.BROADCAST, Op.REDUCE):
                    root = group.ranks[0]
                events.append(
                    CollectiveEvent(
                        next_id,
                        op,
                        nbytes,
                        group.id,
                        dtype,
                        "nccl",
                        iteration,
                        start,
                        end,
                        after,
                        draw(st.none() | st.just("nccl:x")),
                        root,
                        peer,
                        draw(maybe_time),
                    )
                )
            next_id += draw(st.integers(1, 3))
        ranks.append(RankTrace(rank, tuple(events), draw(st.none() | st.sampled_from(["a", "b"]))))
    return Trace(
        world,
        tuple(groups),
        tuple(ranks),
        draw(st.none() | st.just("test")),
        draw(st.sampled_from([{}, {"gpu": "H100", "n": [1, 2]}])),
    )


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(trace=traces(), suffix=st.sampled_from([".json", ".json.gz"]))
def test_file_round_trip(tmp_path, trace, suffix):
    path = tmp_path / f"t{suffix}"
    save_trace(trace, path)
    assert load_trace(path) == trace
    assert trace_from_dict(json.loads(json.dumps(trace_to_dict(trace)))) == trace


@settings(max_examples=20, suppress_health_check=[HealthCheck.too_slow])
@given(trace=traces())
def test_tasks_count_each_call_once(trace):
    tasks = trace.tasks()
    calls = sum(count for count in tasks.values()) * trace.iterations
    present = {r.rank for r in trace.ranks}
    expected = 0
    for rank, event in trace.collectives():
        group = trace.group(event.group)
        if event.nbytes is None:
            continue
        if event.op is Op.SENDRECV:
            expected += event.peer not in present or rank < event.peer
        else:
            expected += rank == min(present.intersection(group.ranks))
    assert calls == pytest.approx(expected)


def two_node_trace(iterations: int = 2) -> Trace:
    groups = (ProcessGroup("0", (0, 1, 2, 3)), ProcessGroup("tp0", (0, 1)), ProcessGroup("tp1", (2, 3)))
    ranks = []
    for rank in range(4):
        tp = "tp0" if rank < 2 else "tp1"
        events = []
        for it in range(iterations):
            base = len(events)
            events += [
                ComputeEvent(base, "forward", iteration=it, duration_us=500.0, flops=1e12),
                CollectiveEvent(base + 1, Op.ALLGATHER, 8 << 20, tp, "bfloat16", iteration=it, after=(base,)),
                CollectiveEvent(base + 2, Op.ALLGATHER, 8 << 20, tp, "bfloat16", iteration=it),
                CollectiveEvent(base + 3, Op.ALLREDUCE, 64 << 20, "0", "bfloat16", iteration=it),
                ComputeEvent(base + 4, "optimizer", iteration=it, after=(base + 3,)),
            ]
        ranks.append(RankTrace(rank, tuple(events), node=f"node{rank // 2}"))
    return Trace(4, groups, tuple(ranks))


def test_tasks_shapes_and_counts():
    tasks = two_node_trace().tasks()
    assert tasks == {
        Task(Op.ALLGATHER, 8 << 20, 2, "bfloat16", "2x1"): 4.0,  # 2 calls × 2 TP groups per iteration
        Task(Op.ALLREDUCE, 64 << 20, 4, "bfloat16", "2x2"): 1.0,
    }
    anonymous = Trace(
        4, two_node_trace().groups, tuple(RankTrace(r.rank, r.events) for r in two_node_trace().ranks)
    )
    assert {t.group for t in anonymous.tasks()} == {"tp0", "tp1", "0"}


def good_doc() -> dict:
    return trace_to_dict(two_node_trace(1))


def mutate(doc: dict, where: str, value) -> dict:
    doc = copy.deepcopy(doc)
    *keys, last = where.split(".")
    node = doc
    for key in keys:
        node = node[int(key)] if key.isdigit() else node[key]
    if value is KeyError:
        del node[last]
    else:
        node[int(last) if last.isdigit() else last] = value
    return doc


@pytest.mark.parametrize(
    ("where", "value", "problem"),
    [
        ("format", "chrome-trace", "not a ccltwin trace"),
        ("version", 2, "unsupported trace version 2"),
        ("world_size", "4", "'world_size' must be an integer"),
        ("world_size", 3, r"group '0' has ranks \[3\] outside world_size 3"),
        ("groups.1.id", "0", "group '0' is defined twice"),
        ("groups.0.ranks", [0, 0, 1], "lists a rank twice"),
        ("ranks.1.rank", 0, "rank 0: listed twice"),
        ("ranks.0.events.1.op", "all_reduce", "rank 0, event 1: unknown op 'all_reduce'"),
        ("ranks.0.events.1.dtype", "float128", "rank 0, event 1: unknown dtype 'float128'"),
        ("ranks.0.events.1.nbytes", -1, "rank 0, event 1: negative nbytes"),
        ("ranks.0.events.1.nbytes", 1.5, "rank 0, event 1: the event: 'nbytes' must be an integer"),
        ("ranks.0.events.1.group", "tp1", "rank 0, event 1: rank 0 is not a member of group 'tp1'"),
        ("ranks.0.events.1.group", "pp", "rank 0, event 1: unknown group 'pp'"),
        ("ranks.0.events.1.id", 0, "rank 0, event 0: id used twice"),
        ("ranks.0.events.1.after", [4], r"rank 0, event 1: 'after' names \[4\]"),
        ("ranks.0.events.1.kind", "memcpy", "unknown event kind 'memcpy'"),
        ("ranks.0.events.1.kind", KeyError, "rank 0, event 1: the event has no 'kind'"),
        ("ranks.0.events.0.duration_us", -3.0, "duration must be finite and >= 0"),
        ("ranks.0.events.0.category", "teleport", "rank 0, event 0: unknown compute category 'teleport'"),
        ("ranks.0.events.0.shape", [4096, 0, 64], r"rank 0, event 0: shape must list sizes ≥ 1, not \[4096, 0, 64\]"),
        ("ranks.0.events.0.kernels", -1, "rank 0, event 0: kernels must be ≥ 0"),
        ("ranks.0.events.0.host_us", -2.0, "rank 0, event 0: host_us must be a finite number ≥ 0"),
        ("ranks.0.events.0.start_us", 10.0, "rank 0, event 0: .*"),
        ("ranks.0.events.1.peer", 1, "only sendrecv has a peer"),
        ("ranks.0.events.1.root", 3, "root 3 is not in group 'tp0'"),
        (
            "ranks.2.events.3.nbytes",
            1 << 20,
            "rank 2, event 3: collective #0 on group '0' is allreduce of 1048576 B",
        ),
        ("ranks.3.events", [], "rank 3: issues 0 collectives on group '0', rank 0 issues 1"),
        ("ranks.2.events.3.op", "broadcast", "on group '0' is broadcast"),
        ("ranks", {}, "'ranks' must be a list"),
    ],
)
def test_bad_trace(tmp_path, where, value, problem):
    doc = mutate(good_doc(), where, value)
    if where.endswith("start_us"):
        doc = mutate(doc, "ranks.0.events.0.end_us", 5.0)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TraceError, match=rf"^\S*bad\.json(, )?.*{problem}"):
        load_trace(path)


@pytest.mark.parametrize(
    "content", [b"", b'{"format": "ccltwin-trace", "version": 1, "groups": [', b"\xff\xfe"]
)
def test_unreadable_files(tmp_path, content):
    path = tmp_path / "t.json"
    path.write_bytes(content)
    with pytest.raises(TraceError, match=r"t\.json: not a readable trace JSON file"):
        load_trace(path)
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(content)[:-4] if content else b"not gzip")
    with pytest.raises(TraceError, match=r"t\.json\.gz: not a readable trace JSON file"):
        load_trace(gz)


def test_failed_save_leaves_the_old_file(tmp_path):
    path = tmp_path / "t.json"
    save_trace(two_node_trace(), path)
    before = path.read_bytes()
    bad = Trace(1, (), (RankTrace(0, (CollectiveEvent(0, Op.ALLREDUCE, 8, "nope"),)),))
    with pytest.raises(TraceError, match="unknown group 'nope'"):
        save_trace(bad, path)
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["t.json"]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 2**41) | st.floats(allow_nan=False) | st.text(max_size=6),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=60)
@given(doc=st.just(good_doc()), edits=st.lists(st.tuples(st.integers(0, 10**6), json_values), max_size=3))
def test_corrupted_documents_raise_trace_error(doc, edits):
    """Replace random nodes of a valid document by random JSON: the reader fails cleanly or accepts."""
    doc = copy.deepcopy(doc)
    for seed, value in edits:
        parents = list(_containers(doc))
        parent = parents[seed % len(parents)]
        keys = list(parent.keys()) if isinstance(parent, dict) else list(range(len(parent)))
        if keys:
            parent[keys[seed % len(keys)]] = value
    try:
        trace = trace_from_dict(doc, "x.json")
        trace.validate("x.json")
    except TraceError as err:
        assert str(err).startswith("x.json")


def _containers(node):
    if isinstance(node, dict | list):
        yield node
        for child in node.values() if isinstance(node, dict) else node:
            yield from _containers(child)


def test_an_event_checked_on_one_rank_is_checked_again_on_another():
    """Validation checks each distinct event once per rank (a pipeline repeats a few hundred): the
    same call is fine where the rank is a member of its group and named where it is not."""
    call = CollectiveEvent(0, Op.ALLREDUCE, 8, "g")
    good = RankTrace(0, (call, CollectiveEvent(1, Op.ALLREDUCE, 8, "g")))
    bad = RankTrace(1, (ComputeEvent(0, "f"), CollectiveEvent(1, Op.ALLREDUCE, 8, "g")))
    trace = Trace(2, (ProcessGroup("g", (0,)),), (good, bad))
    with pytest.raises(TraceError, match=r"^x\.json, rank 1, event 1: rank 1 is not a member of group 'g'$"):
        trace.validate("x.json")


def test_a_repeated_event_with_a_bad_id_or_dependency_is_named():
    """Fields equal to an event checked before do not skip the id and ``after`` checks."""
    f = ComputeEvent(0, "f")
    for events, problem in (((f, ComputeEvent(1, "g"), ComputeEvent(0, "f")), "event 0: id used twice"),
                            ((f, ComputeEvent(1, "f", after=(7,))), r"event 1: 'after' names \[7\]")):
        with pytest.raises(TraceError, match=problem):
            Trace(1, (), (RankTrace(0, events),)).validate()


def test_a_disagreement_deep_in_a_long_sequence_is_named():
    n = 3000
    calls = tuple(CollectiveEvent(i, Op.ALLREDUCE, 8, "g") for i in range(n))
    other = (*calls[:2500], CollectiveEvent(2500, Op.ALLREDUCE, 16, "g"), *calls[2501:])
    trace = Trace(2, (ProcessGroup("g", (0, 1)),), (RankTrace(0, calls), RankTrace(1, other)))
    with pytest.raises(TraceError, match=r"rank 1, event 2500: collective #2500 on group 'g' is allreduce of 16 B "
                                         r"float32 here but allreduce of 8 B float32 on rank 0 \(event 2500\)"):
        trace.validate()
