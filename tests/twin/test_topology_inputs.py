"""Broken cluster descriptions in every command that loads one: bad encodings, deep nesting,
keys given twice, deep NCCL XML: one line naming the file, exit 2, never a traceback."""

import re

import pytest
from typer.testing import CliRunner

from ccltwin import app
from tests.testdata import DATA
from traces.flight_recorder import read_flight_recorder
from traces.trace_file import save_trace
from twin.hardware import TopologyError
from twin.topology.loader import PRESET_DIR, read_spec
from twin.topology.nccl_xml import parse_nccl_topo_xml

runner = CliRunner()
GOOD = (PRESET_DIR / "l40s-pcie.yaml").read_bytes()
BROKEN = {
    "latin1.yaml": (GOOD.replace(b"description:", b"description: caf\xe9", 1), "not UTF-8 text (byte"),
    "utf16.yaml": (GOOD.decode().encode("utf-16"), "UTF-16 text"),
    "binary.yaml": (bytes(range(256)) * 4, "a binary file"),
    "deep-flow.yaml": (b"name: " + b"[" * 5000 + b"]" * 5000, "nested more than 64 levels deep"),
    "deep-block.yaml": ("".join(" " * i + f"k{i}:\n" for i in range(5000)).encode(), "nested more than 64"),
    "twice.yaml": (GOOD + b"\nname: again\n", "key 'name' given twice (first at line 3)"),
}


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("t") / "job.json"
    save_trace(read_flight_recorder(sorted((DATA / "traces" / "flight-recorder").glob("*.json"))), path)
    return path


def test_the_duplicate_key_case_really_repeats_a_top_level_key():
    assert GOOD.split(b"\n")[2] == b"name: l40s-pcie" and read_spec("l40s-pcie").name == "l40s-pcie"


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_every_command_that_loads_a_topology_names_the_file_and_the_problem(tmp_path, trace, name):
    data, problem = BROKEN[name]
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(TopologyError, match=re.escape(problem)):
        read_spec(path)
    for argv in (["topology", "show", str(path)],
                 ["simulate", "--topology", str(path), "--op", "allreduce", "--nranks", "2", "--sizes", "1MiB"],
                 ["rank", "--trace", str(trace), "--topology", str(path), "-o", str(tmp_path / "plan.json")],
                 ["whatif", "--trace", str(trace), "--topology", str(path)],
                 ["tune", "--topology", str(path), "--op", "allreduce", "--nranks", "2", "--nbytes", "1MiB"]):
        result = runner.invoke(app, argv)
        lines = result.output.strip().splitlines()
        assert result.exit_code == 2 and "Traceback" not in result.output, (argv, result.output)
        assert any(line.startswith(f"error: {path}: ") and problem in line for line in lines), (argv, lines)
    assert not (tmp_path / "plan.json").exists()


def test_deep_nccl_xml_is_an_error_not_a_recursion_error(tmp_path):
    text = "<system><cpu>" + "<pci busid='0000:00:00.0'>" * 3000 + "</pci>" * 3000 + "</cpu></system>"
    with pytest.raises(TopologyError, match="nested more than 64 deep"):
        parse_nccl_topo_xml(text)
    path = tmp_path / "deep.xml"
    path.write_text(text)
    result = runner.invoke(app, ["topology", "import", str(path), "--format", "nccl-xml"])
    assert result.exit_code == 2 and f"error: {path}: elements nested more than 64" in result.output, result.output
    real = DATA / "topology" / "nccl-xml" / "azure-ndv5-topo.xml"
    argv = ["topology", "import", str(real), "--nic-gbps", "400", "--gpu-model", "h100"]
    assert runner.invoke(app, argv).exit_code == 0


def test_an_asymmetric_nvidia_smi_matrix_is_an_error_naming_the_pair(tmp_path):
    real = DATA / "topology" / "nvidia-smi" / "warpem-106-l40s.txt"
    lines = real.read_text().splitlines(keepends=True)
    row = next(i for i, line in enumerate(lines) if line.startswith("GPU0") and " X " in line)
    cells = lines[row].split()
    assert cells[2] != "SYS"
    lines[row] = lines[row].replace(cells[2], "SYS" if cells[2] != "SYS" else "PIX", 1)
    bad = tmp_path / "bad.txt"
    bad.write_text("".join(lines))
    result = runner.invoke(app, ["topology", "import", str(bad), "--gpu-model", "l40s", "--nic-gbps", "100"])
    assert result.exit_code == 2 and f"error: {bad}: the matrix is not symmetric: GPU1-GPU0 is" in result.output, \
        result.output
