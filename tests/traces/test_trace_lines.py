"""``load_trace`` reads ``save_trace``'s layout line by line, decoding each distinct event once:
it loads what decoding the whole document loads, and names a bad field as it always did."""

from __future__ import annotations

import gzip
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traces.errors import TraceError
from traces.generate import generate
from traces.generate.gpt import gpt_workload
from traces.schema import Signatures, event_signatures
from traces.trace_file import load_trace, save_trace, trace_from_dict


def _whole(path) -> object:
    """The trace decoded as one JSON document (the layout-independent path)."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as file:
        trace = trace_from_dict(json.load(file), str(path))
    trace.validate(str(path))
    return trace


@settings(max_examples=6, deadline=None)
@given(st.sampled_from([1, 2]), st.sampled_from([1, 2]), st.integers(1, 6), st.booleans())
def test_a_saved_trace_loads_line_by_line_as_it_decodes_whole(tmp_path_factory, tp, pp, micro_batches, gz):
    trace = generate(gpt_workload(hidden=64, heads=4, layers=2 * pp, seq=32, tp=tp, pp=pp,
                                  global_batch=micro_batches, dtype="bfloat16"))
    path = tmp_path_factory.mktemp("t") / ("trace.json.gz" if gz else "trace.json")
    save_trace(trace, path)
    loaded = load_trace(path)
    assert loaded == trace == _whole(path)
    assert [[e.after for e in r.events] for r in loaded.ranks] == [[e.after for e in r.events] for r in trace.ranks]


def _saved(tmp_path):
    trace = generate(gpt_workload(hidden=64, heads=4, layers=2, seq=32, global_batch=2, dtype="bfloat16"))
    path = tmp_path / "trace.json"
    save_trace(trace, path)
    return trace, path, path.read_text().splitlines(keepends=True)


def test_a_bad_field_in_a_repeated_event_is_named_as_decoding_whole_names_it(tmp_path):
    _, path, lines = _saved(tmp_path)
    phases = [i for i, line in enumerate(lines)
              if line.startswith('{"id":') and '"kind":"compute"' in line and '"kernels"' not in line]
    target = phases[len(phases) // 2]
    lines[target] = lines[target].replace('"kind":"compute"', '"kind":"compute","kernels":-3', 1)
    path.write_text("".join(lines))
    with pytest.raises(TraceError) as lines_error:
        load_trace(path)
    with pytest.raises(TraceError) as whole_error:
        _whole(path)
    assert str(lines_error.value) == str(whole_error.value)
    assert "rank 0" in str(lines_error.value)


def test_events_in_another_layout_load_the_same(tmp_path):
    """One line for the whole document, or every field on a line of its own: decoded whole."""
    trace, path, _ = _saved(tmp_path)
    doc = json.loads(path.read_text())
    for text in (json.dumps(doc), json.dumps(doc, indent=1)):
        path.write_text(text)
        assert load_trace(path) == trace


def _partition(signature) -> list[int]:
    """Each event's number as the position of the first event with the same number."""
    first: dict[int, int] = {}
    return [first.setdefault(s, i) for i, s in enumerate(signature)]


@settings(max_examples=4, deadline=None)
@given(st.sampled_from([1, 2]), st.integers(2, 5))
def test_signatures_numbered_while_reading_are_those_worked_out_afresh(tmp_path_factory, pp, micro_batches):
    """``load_trace`` numbers each distinct event as it reads it; the numbers group the events as
    ``Signatures`` does on the loaded events (equal but for id and ``after``)."""
    trace = generate(gpt_workload(hidden=64, heads=4, layers=2 * pp, seq=32, pp=pp, global_batch=micro_batches,
                                  dtype="bfloat16"))
    path = tmp_path_factory.mktemp("t") / "trace.json"
    save_trace(trace, path)
    loaded = load_trace(path)
    read = [_partition(s) for s in event_signatures(loaded)]
    fresh = Signatures()
    assert read == [_partition(fresh.all(rank.events)) for rank in loaded.ranks]
    assert any(p != list(range(len(p))) for p in read)  # the events repeat
