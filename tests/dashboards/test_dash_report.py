"""The static what-if report: one HTML file with plotly.js inside that renders its plots offline,
and the CLI's progress bar."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

import dashboards.progress
from dashboards.clusters import CandidateCluster
from dashboards.progress import progress_bar
from dashboards.report import write_html
from dashboards.studies import compare
from dashboards.workloads import WorkloadChoice
from traces.errors import TraceError


@pytest.fixture(scope="module")
def report():
    return compare(WorkloadChoice.example("vgg19-dp32"), [CandidateCluster(preset="dgx-h100"),
                                                          CandidateCluster(preset="dgx-a100", nic_gbps=100)],
                   engine="serial").report


def test_the_report_is_one_file_with_plotly_inside(report, tmp_path):
    """plotly.js is embedded once; no script or stylesheet is fetched from anywhere."""
    path = tmp_path / "report.html"
    write_html(report, path)
    text = path.read_text()
    assert text.count("plotly.js v") >= 1 and len(text) > 3_000_000
    assert "<script src=" not in text and "<link " not in text
    for c in report.clusters:
        assert f"<h2>{c.cluster}: per task</h2>" in text
    assert "Predicted by the ccltwin twin (NCCL 2.28.9, default constants), not measured" in text


def test_the_report_renders_offline_in_chromium(report, chromium, tmp_path, screenshot):
    """Opened from file:// with every network request refused, all five figures draw."""
    path = tmp_path / "report.html"
    write_html(report, path)
    context = chromium.new_context(viewport={"width": 1300, "height": 900})
    refused = []

    def refuse(route):
        refused.append(route.request.url)
        route.abort()

    context.route("http*://**/*", refuse)
    page = context.new_page()
    errors = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.as_uri())
    page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot .main-svg').length >= 10")
    titles = page.eval_on_selector_all(".js-plotly-plot .gtitle", "ts => ts.map(t => t.textContent)")
    assert titles == ["Candidate clusters side by side", "Iteration time: NCCL default vs tuned",
                      "Where the iteration goes", "Communication per op and iteration", "Cost: USD per iteration"]
    assert "dgx-a100 nic100:8x4" in page.text_content("body")
    screenshot(page, "report")
    assert errors == [] and refused == []
    context.close()


def test_an_unwritable_report_path_is_an_error_naming_it(report, tmp_path):
    with pytest.raises(TraceError, match="is a directory; give a file name for the HTML report"):
        write_html(report, tmp_path)
    with pytest.raises(TraceError, match=r"folder .* does not exist"):
        write_html(report, tmp_path / "missing" / "report.html")


def test_the_progress_bar_shows_counts_on_stderr_and_nothing_when_quiet(monkeypatch):
    """After ``SHOW_AFTER_S`` the bar draws done/total; quiet (``--json``) draws nothing."""
    monkeypatch.setattr(dashboards.progress, "SHOW_AFTER_S", 0.0)
    out = io.StringIO()
    with progress_bar("replaying clusters", console=Console(file=out, force_terminal=True, width=100)) as update:
        for done in range(1, 4):
            update(done, 3)
    assert "replaying clusters" in out.getvalue() and "3/3" in out.getvalue()
    quiet = io.StringIO()
    with progress_bar("replaying", quiet=True, console=Console(file=quiet)) as update:
        update(1, 1)
    assert quiet.getvalue() == ""
