"""``--dtype`` and ``--sizes``/``--nbytes`` as people write them: every spelling of an element type,
a refusal that lists the known ones, sizes that are not a whole number of elements refused."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from ccltwin import app
from traces.task import DTYPE_ALIASES, DTYPE_BYTES, TaskError, parse_dtype, whole_elements

runner = CliRunner()


def simulate(*args):
    return runner.invoke(app, ["simulate", "--topology", "dgx-a100", "--op", "allreduce", *args])


def rows(output):
    return [line.split() for line in output.splitlines() if line and not line.startswith("#")]


@pytest.mark.parametrize(("spelling", "name"), [
    ("bf16", "bfloat16"), ("BF16", "bfloat16"), ("bfloat16", "bfloat16"), ("torch.bfloat16", "bfloat16"),
    ("fp16", "float16"), ("float16", "float16"), ("half", "half"), ("fp32", "float32"), ("float", "float")])
def test_simulate_takes_every_spelling_of_an_element_type(spelling, name):
    result = simulate("--sizes", "1KiB,8B", "--dtype", spelling)
    assert result.exit_code == 0, result.output
    (size, count, dtype, *_), (small, small_count, *_) = rows(result.output)
    assert (size, dtype) == ("1024", name) and int(count) == 1024 // DTYPE_BYTES[name]
    assert (small, small_count) == ("8", str(8 // DTYPE_BYTES[name]))


def test_an_unknown_element_type_is_refused_with_the_list():
    result = simulate("--sizes", "1KiB", "--dtype", "bfloat17")
    assert result.exit_code == 2
    line = result.output.strip()
    assert len(line.splitlines()) == 1 and "unknown dtype 'bfloat17'" in line
    assert all(name in line for name in [*DTYPE_BYTES, *DTYPE_ALIASES])


@pytest.mark.parametrize(("sizes", "dtype", "nbytes", "element"), [
    ("3B", "float32", 3, 4), ("8B,16B,5B", "float32", 5, 4), ("1K,1001B", "bf16", 1001, 2), ("12B", "double", 12, 8)])
def test_a_size_that_is_not_a_whole_number_of_elements_is_refused_naming_both(sizes, dtype, nbytes, element):
    result = simulate("--sizes", sizes, "--dtype", dtype)
    assert result.exit_code == 2, result.output
    assert result.output.strip() == (f"error: --sizes {sizes}: {nbytes} B is not a whole number of "
                                     f"{parse_dtype(dtype)} elements ({element} B each): give a multiple of "
                                     f"{element} B")


def test_tune_refuses_the_same_way_and_takes_bf16():
    base = ["tune", "--topology", "dgx-a100", "--op", "allreduce", "--nranks", "8", "--max-trials", "2", "--json"]
    refused = runner.invoke(app, [*base, "--nbytes", "3B"])
    assert refused.exit_code == 2 and "--nbytes 3B: 3 B is not a whole number of float32 elements" in refused.output
    unknown = runner.invoke(app, [*base, "--nbytes", "1MiB", "--dtype", "fp17"])
    assert unknown.exit_code == 2 and "unknown dtype 'fp17'" in unknown.output
    result = runner.invoke(app, [*base, "--nbytes", "1MiB", "--dtype", "bf16"])
    assert result.exit_code == 0, result.output
    assert '"dtype": "bfloat16"' in result.output


def test_help_states_the_size_rule_and_the_element_types():
    output = runner.invoke(app, ["simulate", "--help"], env={"COLUMNS": "300"}).output
    text = " ".join(output.replace("│", " ").split())
    assert "KiB/MiB/GiB/TiB are powers of 2" in text and "1GB = 10^9 B" in text
    assert "bfloat16 (bf16)" in text and "float16 (half, fp16)" in text


def test_whole_elements_names_where_the_size_came_from():
    assert whole_elements(6, "half") == 3
    with pytest.raises(TaskError, match=r"^--nbytes 1G: 1073741825 B is not"):
        whole_elements((1 << 30) + 1, "float32", "--nbytes 1G")
