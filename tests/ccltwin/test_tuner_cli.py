"""``--tuner`` and ``--tuner-config`` on the commands that predict (ccltwin/tuners.py), through CliRunner."""

import json

import pytest
import yaml
from typer.testing import CliRunner

from ccltwin import app
from tests.ccltwin.test_fuzz_commands import job_trace
from twin.nccl_model.gib_tuner import tuner_config
from twin.nccl_model.gib_txtpb import format_txtpb
from twin.topology import load_cluster
from twin.topology.loader import PRESET_DIR

runner = CliRunner()
A3U_2VM = ["simulate", "--topology", "gcp-a3-ultra", "--nodes", "2", "--op", "allgather", "--sizes", "1MiB", "--json"]


def _choice(*extra: str) -> tuple[str, str, int]:
    result = runner.invoke(app, [*A3U_2VM, *extra])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)
    return row["algo"], row["proto"], row["nchannels"]


def test_a_preset_runs_with_its_tuner_off_named_or_from_a_file(tmp_path):
    """Two a3-ultra VMs of 8 GPUs, AllGather of 1 MiB: the kind's gIB table says Ring/LL on 8 channels;
    stock NCCL takes Ring/LL128 on 16; the same table named, or read from Google's text format, as the kind's."""
    mine = tmp_path / "tuner_config_a3u.txtpb"
    mine.write_text(format_txtpb(tuner_config("gib-a3u")))
    assert _choice() == ("ring", "ll", 8)
    assert _choice("--tuner", "none") == ("ring", "ll128", 16)
    assert _choice("--tuner", "gib-a3u") == _choice("--tuner-config", str(mine)) == ("ring", "ll", 8)
    assert _choice("--tuner", "aws-ofi-nccl") == ("ring", "ll128", 16)  # no EC2 instance: NCCL's choice


def test_the_simulate_header_and_topology_show_name_the_tuner(tmp_path):
    header = runner.invoke(app, [*A3U_2VM[:-1], "--tuner", "none"]).stdout.splitlines()[0]
    assert "tuner none (NCCL's own choice)" in header
    default = runner.invoke(app, A3U_2VM[:-1]).stdout.splitlines()[0]
    assert "tuner gIB tuner config /usr/local/gib/configs/tuner_config_a3u.txtpb (the fabric kind's profile, " \
           "between nodes)" in default
    shown = runner.invoke(app, ["topology", "show", "aws-p5", "--tuner", "gib-a4"]).stdout
    assert "  tuner      gIB tuner config gib-a4" in shown
    facts = json.loads(runner.invoke(app, ["topology", "show", "gcp-a4", "--tuner", "none", "--json"]).stdout)
    assert facts["nccl_tuner"] == {"plugin": "none", "instance": None, "config": None, "config_between_nodes": False}


@pytest.mark.parametrize(("extra", "message"), [
    (["--tuner", "gib-a5"], "error: --tuner gib-a5: unknown tuner (known: none, aws-ofi-nccl, gib-a3u, gib-a4)"),
    (["--tuner", "none", "--tuner-config", "x.txtpb"], "error: --tuner none and --tuner-config x.txtpb: NCCL loads "
                                                       "one tuner; give one"),
])
def test_an_unknown_tuner_or_two_tuners_is_one_line_and_exit_2(extra, message):
    result = runner.invoke(app, [*A3U_2VM, *extra])
    assert result.exit_code == 2 and result.output.strip() == message


def test_a_bad_tuner_config_names_the_file_and_the_problem(tmp_path):
    bad = tmp_path / "bad.txtpb"
    bad.write_text("communicator_configs {\n  node_range: { min: 2 max: 3 }\n  coll_configs { coll_type: ALL }\n}\n")
    result = runner.invoke(app, [*A3U_2VM, "--tuner-config", str(bad)])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"error: {bad.resolve()}:3: coll_type 'ALL' is not one of COLL_ALL_REDUCE, COLL_ALL_GATHER, "
        "COLL_REDUCE_SCATTER, COLL_BROADCAST, COLL_REDUCE, COLL_DEFAULT"]
    missing = runner.invoke(app, [*A3U_2VM, "--tuner-config", str(tmp_path / "none.txtpb")])
    assert missing.exit_code == 2 and "cannot read the gIB tuner config" in missing.output


def test_a_description_names_its_tuner_config_beside_it(tmp_path):
    """``fabric.tuner_config``: a file relative to the description, read on every communicator."""
    spec = yaml.safe_load((PRESET_DIR / "gcp-a3-ultra.yaml").read_text())
    spec["fabric"] = {**spec["fabric"], "kind": "roce", "tuner_config": "mine.txtpb"}
    (tmp_path / "mine.txtpb").write_text(format_txtpb(tuner_config("gib-a3u")))
    (tmp_path / "a3u.yaml").write_text(yaml.safe_dump(spec))
    cluster = load_cluster(tmp_path / "a3u.yaml", nodes=2)
    assert cluster.nccl_tuner_config == str((tmp_path / "mine.txtpb").resolve())
    assert _choice() == tuple(json.loads(runner.invoke(app, [*A3U_2VM[:2], str(tmp_path / "a3u.yaml"),
                                                             *A3U_2VM[3:]]).stdout)[0][k]
                              for k in ("algo", "proto", "nchannels"))
    (tmp_path / "mine.txtpb").write_text("communicator_configs { node_range: { min: 2 max: 2 } }")
    bad = runner.invoke(app, [*A3U_2VM[:2], str(tmp_path / "a3u.yaml"), *A3U_2VM[3:]])
    assert bad.exit_code == 2 and bad.output.strip() == (
        f"error: {tmp_path / 'a3u.yaml'}: fabric.tuner_config: {(tmp_path / 'mine.txtpb').resolve()}:1: node_range "
        "max 2 is not above its min 2 (max is exclusive)")
    spec["fabric"]["tuner"] = "none"
    (tmp_path / "both.yaml").write_text(yaml.safe_dump(spec))
    both = runner.invoke(app, [*A3U_2VM[:2], str(tmp_path / "both.yaml"), *A3U_2VM[3:]])
    assert both.exit_code == 2 and "NCCL loads one tuner" in both.output and "tuner_config" in both.output


def test_rank_tune_and_whatif_take_the_tuner(tmp_path):
    trace = job_trace(tmp_path)
    runs = [["rank", "--trace", str(trace), "--topology", "l40s-pcie", "-o", str(tmp_path / "plan.json")],
            ["tune", "--topology", "l40s-pcie", "--op", "allreduce", "--nbytes", "1MiB", "--nranks", "2",
             "--max-trials", "3"],
            ["whatif", "--trace", str(trace), "--topology", "l40s-pcie", "--no-tuned", "--json"]]
    for argv in runs:
        assert runner.invoke(app, [*argv, "--tuner", "none"]).exit_code == 0
        refused = runner.invoke(app, [*argv, "--tuner", "ofi"])
        assert refused.exit_code == 2 and refused.output.startswith("error: --tuner ofi: unknown tuner")
    header = runner.invoke(app, [*runs[0], "--tuner", "gib-a4"]).stdout.splitlines()[0]
    assert "tuner gIB tuner config gib-a4" in header
