"""End to end in a real headless Chromium: every page loads and computes, a changed control changes
the numbers, bad input gets a message (never a traceback), and the browser logs no error.

Run with ``CCLTWIN_SCREENSHOTS=docs/dashboards`` to refresh the screenshots in the docs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("server")

DONE_OR_NEW_MESSAGE = """([p, old, oldMessage]) => {
    const text = document.getElementById(p + '-progress-text');
    const message = document.getElementById(p + '-message');
    return (text.title && text.title !== old && text.textContent.startsWith('done'))
        || (message.textContent.length > 0 && message.textContent !== oldMessage);
}"""


def run_job(page, prefix: str, action="click", *, timeout_ms: int = 120_000) -> str:
    """Start job ``prefix`` by ``action`` (``"click"``: its button; a function: a control's change
    that starts it; ``None``: the page started it on load) and wait until that run is done or a new
    message shows; the message ('' when the run went through)."""
    page.wait_for_selector(f"#{prefix}-progress-text", state="attached")
    old, old_message = "", ""
    if action is not None:
        old = page.get_attribute(f"#{prefix}-progress-text", "title") or ""
        old_message = page.inner_text(f"#{prefix}-message")
        page.click(f"#{prefix}-run") if action == "click" else action()
    page.wait_for_function(DONE_OR_NEW_MESSAGE, arg=[prefix, old, old_message], timeout=timeout_ms)
    return page.inner_text(f"#{prefix}-message")


def choose(page, dropdown: str, option: str) -> None:
    """Pick ``option`` in the dcc.Dropdown with id ``dropdown``."""
    page.click(f"#{dropdown}")
    page.click(f".dash-dropdown-option:has-text('{option}')")
    page.keyboard.press("Escape")


def type_into(page, selector: str, text: str) -> None:
    """Replace a text box's value and commit it (the boxes are debounced: Enter commits)."""
    page.fill(selector, text)
    page.press(selector, "Enter")


def edit_cell(page, column: str, row: int, text: str) -> None:
    """Type ``text`` into a cell of the candidate table."""
    cell = page.locator(f'#whatif-candidates td[data-dash-column="{column}"][data-dash-row="{row}"]')
    cell.click()
    page.keyboard.press("Backspace")
    page.keyboard.type(text)
    page.keyboard.press("Enter")


def rows(page, table: str) -> list[list[str]]:
    """The cells of an HTML table, row by row (header included)."""
    return page.eval_on_selector(f"#{table}", "t => Array.from(t.rows).map(r => Array.from(r.cells)"
                                              ".map(c => c.textContent))")


def wait_for_figure(page, graph: str, text: str) -> None:
    """Wait until the figure ``graph`` shows ``text`` (figures drawn by a chained callback come later)."""
    page.wait_for_function("([g, t]) => (document.querySelector('#' + g + ' .js-plotly-plot') || {}).textContent"
                           "?.includes(t)", arg=[graph, text], timeout=30_000)


def figure_text(page, graph: str) -> str:
    """Every text the drawn figure shows (titles, subtitles, annotations, legend)."""
    return page.text_content(f"#{graph} .js-plotly-plot") or ""


def test_whatif_page_compares_sweeps_and_reports_bad_input(server, page, screenshot, tmp_path):
    """The purchase page replays the default workload on load; another workload, an edited NIC rate
    and a sweep change the numbers; zero nodes, a NIC rate of -1, too few GPUs and an unreadable
    upload each get a message."""
    page.goto(server + "/")
    assert run_job(page, "whatif", action=None) == ""
    first = rows(page, "whatif-summary")
    assert [r[0] for r in first[1:]] == ["dgx-h100:8x4", "dgx-a100:8x4"]
    assert "predicted on dgx-h100:8x4, dgx-a100:8x4" in figure_text(page, "whatif-iteration")
    screenshot(page, "whatif")
    with page.expect_download() as download:
        page.click("#whatif-download-button")
    assert download.value.suggested_filename == "whatif-report.html"
    report = Path(download.value.path()).read_text()
    assert "ccltwin what-if: phi2-tp8dp4" in report and "plotly.js v" in report

    choose(page, "whatif-example", "vgg19-dp32")
    page.click("#whatif-tuned label")  # untick "also tune": the default replay only, faster
    assert run_job(page, "whatif") == ""
    vgg = rows(page, "whatif-summary")
    assert vgg[1][2] != first[1][2] and vgg[1][3] == "-"

    edit_cell(page, "nic_gbps", 1, "25")
    assert run_job(page, "whatif") == ""
    slow = rows(page, "whatif-summary")
    assert slow[2][0] == "dgx-a100 nic25:8x4"
    assert float(slow[2][2].replace(",", "")) > float(vgg[2][2].replace(",", ""))

    assert run_job(page, "sweep") == ""
    points = rows(page, "sweep-points")
    assert [r[0] for r in points[1:]] == ["50", "100", "200", "400", "800"]
    wait_for_figure(page, "sweep-figure", "knee at")
    screenshot(page, "whatif-sweep")

    edit_cell(page, "nodes", 0, "0")
    assert "dgx-h100: nodes must be at least 1, got 0" in run_job(page, "whatif")
    edit_cell(page, "nodes", 0, "1")
    edit_cell(page, "nic_gbps", 1, "-1")
    assert "NIC rate (Gb/s) must be positive, got -1" in run_job(page, "whatif")
    edit_cell(page, "nic_gbps", 1, "")
    assert run_job(page, "whatif") == ""
    assert "the trace needs 32 GPUs" in page.inner_text("#whatif-errors")  # the 1-node dgx-h100

    bad = tmp_path / "broken.json"
    bad.write_text('{"format": "ccltwin-trace", "version": 1')
    page.set_input_files("#whatif-upload input[type=file]", str(bad))
    page.wait_for_function("() => document.getElementById('whatif-message').textContent.includes('broken.json')")
    assert "upload 'broken.json': not a readable trace JSON file" in page.inner_text("#whatif-message")
    assert "Traceback" not in page.content()
    assert page.errors == []


def test_collective_explorer_overlays_measured_curves(server, page, screenshot):
    """The explorer predicts on load with the store's measured curves beside; new sizes change the
    numbers; a rank count that does not fill whole nodes gets a message."""
    page.goto(server + "/collectives")
    assert run_job(page, "coll", action=None) == ""
    table = rows(page, "coll-numbers")
    labels = [r[0] for r in table[1:]]
    assert any(label.startswith("predicted: allreduce x8 on dgx-h100") for label in labels)
    assert any(label.startswith("measured: allreduce x16 on ABCI 2.0 Compute Node (A)") for label in labels)
    assert "measured on ABCI 2.0 Compute Node (A) (NCCL 2.8.4)" in figure_text(page, "coll-figure")

    type_into(page, "#coll-sizes", "1MiB:256MiB")
    assert run_job(page, "coll") == ""
    changed = rows(page, "coll-numbers")
    assert changed[1][1] == "256 MiB" and changed[1][2] != table[1][2]
    screenshot(page, "collectives")

    type_into(page, "#coll-nranks", "12")
    assert "12 ranks do not fill whole nodes of 8 GPUs" in run_job(page, "coll")
    assert page.errors == []


def test_landscape_ranks_sweeps_and_draws_the_trials(server, page, screenshot):
    """The landscape ranks the default task on load and draws the tuner's trials; another size
    changes the ranking, another thread count the heatmap."""
    page.goto(server + "/landscape")
    assert run_job(page, "land", action=None) == ""
    first = rows(page, "land-numbers")
    assert first[1][0] == "nvls/simple/p2p" and first[-1][0].startswith("autoccl winner")
    heatmap = figure_text(page, "land-heatmap")
    assert "autoccl trials" in heatmap and "predicted on dgx-h100 (1 node(s) x 8 H100-SXM5-80GB)" in heatmap

    type_into(page, "#land-size", "256KiB")
    assert run_job(page, "land") == ""
    small = rows(page, "land-numbers")
    assert small[1:] != first[1:]
    choose(page, "land-threads", "512")
    page.wait_for_function("() => document.querySelector('#land-heatmap .gtitle').textContent.includes('512 threads')")
    screenshot(page, "landscape")

    type_into(page, "#land-size", "0")
    assert "the message size must be at least 1 byte" in run_job(page, "land")
    assert page.errors == []


def test_timeline_shows_runs_and_records_a_new_one(server, page, screenshot):
    """The timeline draws the store's two runs with where each converged; tuning another task in the
    twin adds it to the store and to the task list."""
    page.goto(server + "/timeline")
    page.wait_for_function("() => document.querySelectorAll('#time-numbers tr').length === 3")
    runs = rows(page, "time-numbers")
    assert [r[0] for r in runs[1:]] == ["1", "2"]
    assert all(int(r[3]) <= int(r[1]) for r in runs[1:])
    text = figure_text(page, "time-figure")
    assert "run 1 converged at trial" in text and "NCCL default (predicted)" in text
    screenshot(page, "timeline")

    type_into(page, "#tune-size", "4MiB")
    choose(page, "tune-search", "ours")
    assert run_job(page, "tune") == ""
    page.wait_for_function("() => document.getElementById('time-store').textContent.includes('2 task(s)')")
    assert page.errors == []


def test_calibration_compares_measured_and_predicted(server, page, screenshot):
    """Calibration predicts, on load, the measured hardware whose id names its GPU (on that GPU's
    preset); another hardware, modelled as the preset chosen, changes the errors; a hardware the
    twin cannot guess and zero GPUs per node get messages."""
    page.goto(server + "/calibration")
    assert run_job(page, "cal", action=None) == ""
    h100 = rows(page, "cal-numbers")
    assert [r[0] for r in h100[1:]] == ["latency-bound (< 64 KiB)", "middle (64 KiB to 16 MiB)",
                                        "bandwidth-bound (≥ 16 MiB)"]
    assert "predicted on dgx-h100" in figure_text(page, "cal-parity")

    message = run_job(page, "cal", lambda: choose(page, "cal-hardware", "ABCI 2.0 Compute Node (A)"))
    assert "no preset has the GPU of 'ABCI 2.0 Compute Node (A)'" in message
    choose(page, "cal-preset", "dgx-a100")
    type_into(page, "#cal-nics", "4")  # ABCI's A nodes have 4 HDR NICs, a DGX A100 8
    assert run_job(page, "cal") == ""
    abci = rows(page, "cal-numbers")
    assert abci[1:] != h100[1:]
    assert "measured on ABCI 2.0 Compute Node (A) (NCCL 2.8.4)" in figure_text(page, "cal-error")
    screenshot(page, "calibration")

    type_into(page, "#cal-gpn", "0")
    assert "GPUs per node must be at least 1, got 0" in run_job(page, "cal")
    assert page.errors == []
