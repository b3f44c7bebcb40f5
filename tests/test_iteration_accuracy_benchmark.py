"""The iteration-accuracy benchmark reads its real data files and scores real predictions."""

from __future__ import annotations

import pytest

from benchmarks import iteration_accuracy as bench


def test_sc21_iteration_times_follow_the_papers_flop_count():
    # 1.7B: 96·512·2048·24·2304²·(1 + 2048/13824 + 51200/(16·24·2304)) FLOPs at 137 TFLOP/s on 32 GPUs
    assert bench.sc21_iteration_ms(512, 24, 2304, 32, 137) == pytest.approx(3528.0, abs=0.1)


def test_single_node_rows_are_predicted_and_summarised():
    rows = bench.single_node(limit=3)
    assert len(rows) == 3 and all(r.predicted_ms > 0 and r.measured_ms > 0 for r in rows)
    assert all(r.predicted_ms == pytest.approx(r.compute_ms + r.exposed_comm_ms + r.host_wait_ms + r.bubble_ms,
                                               abs=1e-6) for r in rows)
    s = bench.summary(rows)
    assert s["rows"] == 3 and s["mape"] == pytest.approx(sum(abs(r.error) for r in rows) / 3)
    assert sum(v["rows"] for v in s["by_hidden"].values()) == 3


def test_asking_for_neither_table_is_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        bench.main(["--single-only", "--multi-only"])
    assert exc.value.code == 2 and "leave nothing to predict" in capsys.readouterr().err
