"""The compute and interference constants fitted to the real kernel timings of one H200."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from twin.calibrate import CalibrationError
from twin.calibrate.kernels import fit_kernels, kernel_rows
from twin.params import DEFAULT_PARAMS

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data"
MEASURED = json.loads((DATA / "h200-interference.json").read_text())
EARLIER = json.loads((DATA / "h200-gpu-physics.json").read_text())


@pytest.fixture(scope="module")
def fitted():
    return fit_kernels(kernel_rows(MEASURED, EARLIER), MEASURED["device"])


def test_the_shares_of_peak_are_fitted_on_part_and_predict_the_rest(fitted):
    compute = fitted.params.compute
    assert 0.70 < compute.flops_fraction < 0.80  # bf16 products at 72-80 % of 989 TFLOP/s
    assert compute.hbm_fraction == pytest.approx(0.88, abs=0.01)  # x + y: 3 GiB in 0.76 ms of 4.8 TB/s
    (copy,) = [r for r in fitted.rows if r.label.startswith("device copy 1 GiB")]
    assert not copy.fitted and fitted.predicted(copy) == pytest.approx(copy.measured, rel=0.02)
    held_gemms = [r for r in fitted.rows if r.kind == "gemm" and not r.fitted]
    assert len(held_gemms) == 2
    big = next(r for r in held_gemms if r.label == "bf16 16384x4096x14336")
    assert fitted.predicted(big) == pytest.approx(big.measured, rel=0.10)


def test_a_copy_beside_matrix_products_keeps_four_fifths_and_the_fit_predicts_the_held_out_counts(fitted):
    assert fitted.params.compute.copy_rate_under_compute == pytest.approx(0.81, abs=0.02)
    held = [r for r in fitted.rows if r.kind == "copy_under" and not r.fitted and "gemm" in r.label]
    assert held and all(abs(fitted.predicted(r) / r.measured - 1) < 0.06 for r in held)


def test_the_interference_model_expresses_what_counting_sms_cannot(fitted):
    """A copy beside a memory-bound kernel keeps a seventh of its rate, beside products four fifths; a
    GEMM beside a one-CTA copy runs 20-25 % slower, beside a one-CTA spinning kernel barely; an
    elementwise kernel keeps its speed beside 64 held SMs.  Counting SMs alone (the replay's old
    rule) missed all three; the compute model (``twin.compute.interference``) says each."""
    beside_elementwise = [r for r in fitted.rows if r.kind == "copy_under" and "elementwise" in r.label]
    assert all(r.measured < 0.2 and fitted.predicted(r) == pytest.approx(r.measured, abs=0.06)
               for r in beside_elementwise)
    copy1 = next(r for r in fitted.rows if r.label == "gemm beside copy 1x128")
    spin1 = next(r for r in fitted.rows if r.label == "gemm beside spin 1x128")
    assert copy1.measured < 0.8 < 0.98 < spin1.measured
    assert fitted.predicted(spin1) == pytest.approx(spin1.measured, abs=0.06)
    assert fitted.predicted(copy1) == pytest.approx(copy1.measured, abs=0.05)
    assert fitted.predicted(spin1) - fitted.predicted(copy1) > 0.15
    spin64 = next(r for r in fitted.rows if r.label == "elementwise beside spin 64x128")
    assert fitted.predicted(spin64) == pytest.approx(spin64.measured, abs=0.05)


def test_a_plain_copy_is_not_an_nccl_channel_and_its_cta_fit_stays_out_of_the_params(fitted):
    assert fitted.params.cta == DEFAULT_PARAMS.cta
    assert fitted.copy_cta.cta.threads_at_half_rate == pytest.approx(320.0)  # its plausible wall: linear in threads
    table = fitted.table()
    assert "held-out median |error|" in table and "compute.copy_rate_under_compute" in table


def test_a_file_that_is_not_a_kernel_measurement_is_named():
    with pytest.raises(CalibrationError, match=r"not a file of benchmarks/interference\.py --measure"):
        kernel_rows({"device": "NVIDIA H200"})
    no_gemm = {**MEASURED, "rows": {**MEASURED["rows"], "gemm_alone": []}}
    with pytest.raises(CalibrationError, match=r"no gemm rows to fit compute\.flops_fraction on"):
        fit_kernels(kernel_rows(no_gemm), MEASURED["device"])
    assert replace(kernel_rows(MEASURED)[0], fitted=False).kind == "gemm"
