"""Profile version 2: changes, held parameters, held-out errors and the stack round-trip; version 1
files still load; ``show_profile`` says what a profile knows."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from twin.calibrate import show_profile
from twin.params import DEFAULT_PARAMS, TwinParams
from twin.profile import HeldOutError, HeldParam, ParamChange, ProfileMeta, load_profile, save_profile

NAMES = sorted(TwinParams.bounds())
text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
number = st.floats(0.001, 1e4, allow_nan=False)


@st.composite
def metas(draw, depth: int = 1) -> ProfileMeta:
    changes = tuple(ParamChange(n, draw(number), draw(number)) for n in draw(st.lists(st.sampled_from(NAMES),
                                                                                     unique=True, max_size=4)))
    held = tuple(HeldParam(n, draw(text)) for n in draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=4)))
    heldout = tuple(HeldOutError(draw(text), draw(st.integers(0, 999)), draw(number), draw(number),
                                 draw(st.none() | number)) for _ in range(draw(st.integers(0, 3))))
    stack = tuple(draw(metas(depth - 1)) for _ in range(draw(st.integers(0, 2)))) if depth else ()
    return ProfileMeta(hardware=draw(text), nccl_version=draw(text), sources=tuple(draw(st.lists(text, max_size=3))),
                       created=draw(text), points=draw(st.none() | st.integers(0, 10**6)),
                       moved=tuple(c.name for c in changes), notes=draw(text), changes=changes, held=held,
                       holdout=draw(text), heldout=heldout, stack=stack)


@settings(max_examples=40)
@given(meta=metas())
def test_version_2_metadata_round_trips(tmp_path_factory, meta):
    path = tmp_path_factory.mktemp("p") / "p.json"
    residual = {"model": "knn-log2-size", "neighbours": 2, "rows": [["allreduce 8r 1g ring/ll", 10.0, 0.1]]}
    save_profile(DEFAULT_PARAMS, path, meta=meta, residual=residual)
    profile = load_profile(path)
    assert profile.meta == meta and profile.residual == residual
    assert profile.meta.stacked()[-1].stack == () and len(profile.meta.stacked()) == len(meta.stack) + 1


def test_a_version_1_profile_loads_and_shows(tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"format": "ccltwin-profile", "version": 1,
                                "meta": {"hardware": "dgx-h100:8x1", "points": 12, "moved": ["cta.hbm_share"]},
                                "params": {"cta.hbm_share": 0.02}}))
    profile = load_profile(path)
    assert profile.residual is None and profile.meta.changes == () and profile.meta.stack == ()
    text = show_profile(profile, str(path))
    assert "moved (values not recorded): cta.hbm_share" in text and "residual model: none" in text
    assert "dgx-h100:8x1, 12 points, NCCL ?" in text
