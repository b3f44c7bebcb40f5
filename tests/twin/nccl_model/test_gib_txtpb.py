"""Google's gIB tuner configs in the text format Google ships (twin/nccl_model/gib_txtpb.py)."""

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traces.task import Op
from tuner.config import Algo, Proto
from twin.nccl_model import NcclCommInfo, default_resources, nccl_choice
from twin.nccl_model.gib_tuner import TUNER_CONFIGS, GibBlock, GibRule, GibTunerConfig, tuner_config
from twin.nccl_model.gib_txtpb import TunerConfigError, config_table, format_txtpb, parse_txtpb, read_txtpb

OPS = (Op.ALLREDUCE, Op.ALLGATHER, Op.REDUCESCATTER, Op.BROADCAST, Op.REDUCE)
A3_MEGA_STYLE = """# proto-file: config_proto/tuner_config.proto
# proto-message: TunerConfigs
#
# NOTE all max values are exclusive
communicator_configs {
  node_range: {
    min: 2
    max: 3 # exclusive
  }
  rank_per_node_range: {
    min: 8 # only 8 gpus per node case
  }
  coll_configs: {
    coll_type: COLL_ALL_REDUCE
    msg_size_tuning_rules {
      per_rank_message_size: {
        min: 0
        max: 2097152
      }
      coll_tuning_spec: { algorithm: ALGO_TREE protocol: PROTO_SIMPLE }
    }
  }
  # Configures the rest of collective types.
  coll_configs: {
    coll_type: COLL_DEFAULT
    msg_size_tuning_rules {
      per_rank_message_size: {
        min: 0
      }
      coll_tuning_spec: { algorithm: ALGO_RING protocol: PROTO_LL128 num_channel: 4 }
    }
  }
}
"""
"""Written as Google writes them (a3-mega's file in apple/axlearn: ``field: {`` and ``field {``,
trailing comments, a range with no max, a spec with no channel count)."""


@pytest.mark.parametrize("name", sorted(TUNER_CONFIGS))
def test_bundled_tables_in_googles_text_format_read_back_with_the_same_choices(name):
    """The yaml tables written as ``.txtpb`` and parsed again pick the same rule for every shape,
    collective and size (powers of two and their neighbours, 1 B to 64 GiB per rank)."""
    bundled = tuner_config(name)
    parsed = parse_txtpb(format_txtpb(bundled), name)
    assert parsed == bundled and len(parsed.blocks) >= 10
    for nodes in (1, 2, 3, 4, 5, 8, 9, 16, 17, 32, 33, 64, 65, 128):
        for ppn in (1, 2, 4, 8):
            for op in OPS:
                for e in range(0, 37, 3):
                    for per_rank in (1 << e, (1 << e) + 1):
                        n = nodes * ppn
                        assert (parsed.rule(nodes, ppn, op, per_rank * n, nranks=n)
                                == bundled.rule(nodes, ppn, op, per_rank * n, nranks=n))


def test_googles_layout_reads_with_open_ranges_and_nccls_own_channels():
    config = parse_txtpb(A3_MEGA_STYLE, "a3m.txtpb")
    (block,) = config.blocks
    assert block.nodes == (2, 3) and block.ranks_per_node == (8, None)
    assert block.rules == {Op.ALLREDUCE: (GibRule(0, 2097152, Algo.TREE, Proto.SIMPLE, None),),
                           None: (GibRule(0, None, Algo.RING, Proto.LL128, 4),)}
    assert config.rule(2, 8, Op.ALLREDUCE, 16 << 20, nranks=16).algo is Algo.TREE  # 1 MiB per rank
    assert config.rule(2, 8, Op.ALLREDUCE, 64 << 20, nranks=16) is None  # 4 MiB per rank: past the rule
    assert config.rule(2, 16, Op.BROADCAST, 1 << 40, nranks=32).nchannels == 4  # no max: every size, ppn ≥ 8
    assert config.rule(3, 8, Op.ALLGATHER, 1 << 20, nranks=24) is None  # 3 nodes: no block
    assert config.rule(2, 4, Op.REDUCE, 1, nranks=8) is None  # 4 per node: no block


def test_a_rule_without_a_channel_count_keeps_nccls(tmp_path):
    """The tuner's pick is free in the cost table; the channels stay what NCCL works out for it."""
    path = tmp_path / "mine.txtpb"
    path.write_text(A3_MEGA_STYLE)
    info = NcclCommInfo(16, 2, 90, True, 40.0, 24.0, 16, 40.0, 24.0, tuner_config=str(path))
    tuned = nccl_choice(info, Op.ALLREDUCE, 16 << 20)  # 1 MiB per rank: Tree/Simple, no channel count
    assert (tuned.algo, tuned.proto) == (Algo.TREE, Proto.SIMPLE)
    assert tuned.nchannels == default_resources(replace(info, tuner_config=None), Op.ALLREDUCE, Algo.TREE,
                                                Proto.SIMPLE, 16 << 20)[0]
    assert nccl_choice(info, Op.ALLGATHER, 16 << 20).nchannels == 4  # COLL_DEFAULT's rule names 4
    assert config_table(str(path)) is read_txtpb(path)  # read once while the file stays as it is


@pytest.mark.parametrize(("text", "problem"), [
    ("communicator_configs { node_rang: { min: 2 } }", r"x\.txtpb:1: CommunicatorConfig has no field 'node_rang'"),
    ("communicator_configs {\n node_range: { min: 3 max: 3 } }",
     r"x\.txtpb:2: node_range max 3 is not above its min 3"),
    ("communicator_configs { coll_configs { coll_type: COLL_SEND } }", r"coll_type 'COLL_SEND' is not one of"),
    ("communicator_configs { coll_configs { coll_type: COLL_DEFAULT", r"ends inside a CollConfig"),
    ('communicator_configs { name: "a3u" }', r"unexpected '\"' \(strings are not part"),
    ("communicator_configs { node_range: { min: two } }", r"min takes a whole number, got 'two'"),
    ("communicator_configs { node_range { min: 1 min: 2 } }", r"Range sets min twice"),
    ("}", r"unexpected '}': no message is open here"),
    ("communicator_configs { coll_configs { coll_type: COLL_DEFAULT msg_size_tuning_rules { "
     "coll_tuning_spec: { protocol: PROTO_LL } } } }", r"coll_tuning_spec names no algorithm"),
    ("communicator_configs { coll_configs { coll_type: COLL_DEFAULT msg_size_tuning_rules { coll_tuning_spec: "
     "{ algorithm: ALGO_RING protocol: PROTO_LL num_channel: 0 } } } }", r"num_channel 0 is below 1"),
    ("communicator_configs { coll_configs { coll_type: COLL_REDUCE } coll_configs { coll_type: COLL_REDUCE } }",
     r"lists COLL_REDUCE twice"),
])
def test_a_bad_config_names_the_file_the_line_and_the_problem(text, problem):
    with pytest.raises(TunerConfigError, match=problem) as caught:
        parse_txtpb(text, "x.txtpb")
    assert "\n" not in str(caught.value) and str(caught.value).startswith("x.txtpb:")


def test_an_unknown_name_that_is_no_file_is_refused(tmp_path):
    with pytest.raises(TunerConfigError, match=r"unknown tuner config 'gib-a5' \(known: gib-a3u, gib-a4\)"):
        config_table("gib-a5")
    with pytest.raises(TunerConfigError, match=r"cannot read the gIB tuner config"):
        read_txtpb(tmp_path / "missing.txtpb")


@st.composite
def _range(draw, low=0):
    start = draw(st.integers(low, 1 << 20))
    return start, draw(st.none() | st.integers(start + 1, start + (1 << 20)))


@st.composite
def _rule(draw):
    low, high = draw(_range())
    return GibRule(low, high, draw(st.sampled_from(list(Algo))), draw(st.sampled_from(list(Proto))),
                   draw(st.none() | st.integers(1, 64)))


@st.composite
def _config(draw):
    blocks = []
    for _ in range(draw(st.integers(0, 4))):
        keys = draw(st.lists(st.sampled_from([None, *OPS]), unique=True, max_size=6))
        rules = {k: tuple(draw(st.lists(_rule(), max_size=4))) for k in keys}
        blocks.append(GibBlock(draw(_range()), draw(_range()), rules))
    return GibTunerConfig("gen.txtpb", tuple(blocks))


@settings(max_examples=200, deadline=None)
@given(_config())
def test_any_config_written_in_the_text_format_reads_back_equal(config):
    assert parse_txtpb(format_txtpb(config), "gen.txtpb") == config


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([*"{}<>:;,#\n\"-", "0", "12", "min", "max", "node_range", "communicator_configs",
                                  "coll_configs", "coll_type", "COLL_DEFAULT", "x"]), max_size=80).map(" ".join)
       | st.text(max_size=100))
def test_any_text_is_a_config_or_one_line_naming_the_file(text):
    try:
        parse_txtpb(text, "fuzz.txtpb")
    except TunerConfigError as err:
        assert str(err).startswith("fuzz.txtpb:") and "\n" not in str(err)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(TUNER_CONFIGS)), st.integers(0, 20000), st.integers(1, 40))
def test_a_bundled_table_cut_anywhere_is_a_config_or_one_line(name, start, length):
    text = format_txtpb(tuner_config(name))
    start %= len(text)
    try:
        config = parse_txtpb(text[:start] + text[start + length:], name)
    except TunerConfigError as err:
        assert str(err).startswith(f"{name}:")
    else:
        assert all(r.max_bytes is None or r.min_bytes < r.max_bytes
                   for b in config.blocks for rules in b.rules.values() for r in rules)
