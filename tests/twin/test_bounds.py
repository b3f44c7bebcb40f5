"""Impossible numbers are refused with the limit in the message; implausible ones get a note;
the largest real clusters (16,384 GPUs, Llama 3) still work."""

import yaml
from typer.testing import CliRunner

from ccltwin import app
from tests.testdata import DATA
from traces.flight_recorder import read_flight_recorder
from traces.trace_file import save_trace
from twin.topology.loader import PRESET_DIR
from twin.topology.spec import MAX_GPUS

runner = CliRunner()


def refused(argv, *needles):
    result = runner.invoke(app, argv)
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (argv, result.output)
    for needle in needles:
        assert needle in lines[0], (argv, lines[0])
    return lines[0]


def test_node_counts_beyond_any_cluster_are_refused_and_16k_gpus_work(tmp_path):
    limit = f"at most {MAX_GPUS:,}"
    refused(["topology", "show", "dgx-h100", "--nodes", "10000000000"], "80,000,000,000 GPUs", limit)
    refused(["simulate", "--topology", "dgx-h100", "--nodes", "10000000000", "--op", "allreduce", "--nranks", "8",
             "--sizes", "1MiB"], limit)
    spec = yaml.safe_load((PRESET_DIR / "dgx-h100.yaml").read_text())
    spec["nodes"] = 10 ** 12
    big = tmp_path / "big.yaml"
    big.write_text(yaml.safe_dump(spec))
    refused(["topology", "show", str(big)], f"{big}: nodes: ", limit)
    trace = tmp_path / "job.json"
    save_trace(read_flight_recorder(sorted((DATA / "traces" / "flight-recorder").glob("*.json"))), trace)
    refused(["whatif", "--trace", str(trace), "--topology", "dgx-a100", "--nodes", "100000"], "800,000 GPUs", limit)
    result = runner.invoke(app, ["topology", "show", "dgx-h100", "--nodes", "2048"])  # 16,384 GPUs
    assert result.exit_code == 0 and "16384" in result.output.replace(",", ""), result.output


def test_infinite_or_absurd_line_rates_are_refused_and_never_written(tmp_path):
    for rate in ("inf", "1e308", "nan", "0"):
        refused(["topology", "show", "dgx-h100", "--nic-gbps", rate], "nic_gbps must be above 0 and at most 10000")
        out = tmp_path / "t.yaml"
        refused(["topology", "import", str(DATA / "topology" / "nvidia-smi" / "warpem-106-l40s.txt"),
                 "--gpu-model", "l40s", "--nic-gbps", rate, "-o", str(out)],
                f"--nic-gbps {float(rate):g}", "at most 10000")
        assert not out.exists()
    spec = yaml.safe_load((PRESET_DIR / "dgx-h100.yaml").read_text())
    spec["node"]["nics"]["gbps"] = 1e308
    fast = tmp_path / "fast.yaml"
    fast.write_text(yaml.safe_dump(spec))
    refused(["topology", "show", str(fast)], f"{fast}: node.nics.gbps: must be at most 10000")


def test_price_chunk_and_nccl_version_are_checked(tmp_path):
    trace = tmp_path / "job.json"
    save_trace(read_flight_recorder(sorted((DATA / "traces" / "flight-recorder").glob("*.json"))), trace)
    refused(["whatif", "--trace", str(trace), "--topology", "l40s-pcie", "--price-per-gpu-hour", "nan"],
            "price per GPU-hour must be a number from 0 to 10,000 USD", "nan")
    refused(["simulate", "--topology", "dgx-a100", "--op", "allreduce", "--nranks", "8", "--sizes", "1MiB",
             "--chunk", "0"], "chunk size must be positive, got 0")
    plan = tmp_path / "plan.json"
    base = ["rank", "--trace", str(trace), "--topology", "l40s-pcie", "-o", str(plan)]
    refused([*base, "--nccl-version", "0.0.0"], "NCCL 0.0.0", "supported releases are 2.8.3 to 2.30.7")
    assert not plan.exists()
    result = runner.invoke(app, [*base, "--nccl-version", "99.99.99"])
    assert result.exit_code == 0 and "note: NCCL 99.99.99 is newer than the newest modelled release (2.30.7)" \
        in result.output, result.output
    assert plan.exists()
