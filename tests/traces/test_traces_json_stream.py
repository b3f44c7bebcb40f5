"""The streaming JSON reader's batch path: whole windows of elements decoded at once give the same elements."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.testdata import DATA
from traces import json_stream
from traces.errors import TraceError
from traces.json_stream import stream_object

# strings full of the characters the batch cut looks for
_TEXT = st.text(alphabet='ab}{],[" \\\n', max_size=8)
_SCALAR = st.none() | st.booleans() | st.integers(-(10**12), 10**12) | st.floats(allow_nan=False, allow_infinity=False)
_VALUE = st.recursive(
    _SCALAR | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=8,
)
_EVENT = st.dictionaries(_TEXT, _VALUE, max_size=4)


@given(
    events=st.lists(_EVENT | _VALUE, max_size=40),
    chunk=st.integers(1, 300),
    batch_min=st.integers(0, 200),
    indent=st.sampled_from([None, 0, 2]),
)
@settings(max_examples=60, deadline=None)
def test_batches_yield_exactly_the_elements(tmp_path_factory, events, chunk, batch_min, indent):
    path = tmp_path_factory.mktemp("s") / "t.json"
    path.write_text(json.dumps({"before": 1, "traceEvents": events, "after": {"x": "}]"}}, indent=indent))
    seen = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(json_stream, "_CHUNK", chunk)
        patch.setattr(json_stream, "_BATCH_MIN", batch_min)
        others = stream_object(str(path), "traceEvents", seen.append)
    assert seen == events
    assert others == {"before": 1, "after": {"x": "}]"}}


def test_a_malformed_element_is_still_placed_when_batches_are_on(tmp_path, monkeypatch):
    monkeypatch.setattr(json_stream, "_BATCH_MIN", 0)
    good = ",\n".join(json.dumps({"name": f"e{i}", "ts": i}) for i in range(50))
    path = tmp_path / "bad.json"
    path.write_text('{"traceEvents": [' + good + ',\n{"name": "x", "ts": 1,},\n' + good + "]}")
    with pytest.raises(TraceError, match=r"malformed JSON in traceEvents\[50\]"):
        stream_object(str(path), "traceEvents", lambda item: None)


def test_a_real_profiler_trace_streams_in_batches_to_the_same_events(monkeypatch):
    path = str(DATA / "traces" / "hta" / "a100-2rank-nccl_data.json.gz")
    one_by_one: list = []
    monkeypatch.setattr(json_stream, "_BATCH_MIN", 1 << 40)
    stream_object(path, "traceEvents", one_by_one.append)
    monkeypatch.setattr(json_stream, "_BATCH_MIN", 1 << 16)
    batches = []
    original = json_stream._Window.batch

    def counted(window):
        items = original(window)
        batches.append(items is not None)
        return items

    monkeypatch.setattr(json_stream._Window, "batch", counted)
    batched: list = []
    stream_object(path, "traceEvents", batched.append)
    assert batched == one_by_one and len(batched) == 40573
    assert sum(batches) >= 5  # the 9.8 MB of events went mostly in ~1 MiB batches
