"""Accuracy of the twin against real nccl-tests runs, before any calibration.

Every nccl-tests log in ``--data DIR`` (default: the repository's ``tests/data/nccl-tests``, the
development set; ``benchmarks/data/heldout`` holds systems that set has not) is predicted from the
hardware its header describes (table ``RUNS`` below: cluster YAML or preset, nodes, GPUs per node
and per process, the NCCL release where the log does not print it, the fabric kind), with
NCCL_ALGO/NCCL_PROTO as the file's header says and NCCL's default choice for everything else.
Printed per file: the median absolute % error of busbw for sizes ≥ 1 MiB and < 1 MiB, the worst
size (size, error), whether the measured and the predicted curves are monotone (time
non-decreasing in size: ``ok``, or the largest fall below an earlier size's time and where), the
NCCL release of the file and the one emulated, the fabric; then a summary row (median over files).
For the L40S PCIe files with forced Ring/Tree and LL/LL128/Simple: how often the predicted order of
the variants matches the measured one (pairs measured within 3% of each other count as ties).

Measured busbw comes from the time column where the file has one (nccl-tests prints busbw to
0.01 GB/s, which rounds small sizes by up to 50 %), else from the busbw column; a measured curve
counts as monotone when no time falls more than 3 % (timing noise) below an earlier size's, a
predicted one when none falls at all.

With the default folder, the same table for this workplace's own measurements on 2 H200 GPUs
(``data/h200x2-allreduce.json``, made by ``nccl_sweep.py``: a machine no constant was set from
except ``protocol.ll_op_us`` and ``protocol.ll128_copy_factor`` (``twin.params``), which come from
``data/h200x2-channels.json``), timed from CUDA graphs, so without host launch costs.

    python benchmarks/accuracy.py [--data DIR] [--plots DIR]

``--plots DIR`` writes one HTML page per file (measured and predicted busbw over size, log x) and
``index.html`` with the table linking them. A log whose file name is not in ``RUNS`` is skipped
with a note (its hardware is not described); a folder with no log in ``RUNS`` stops with one line
and exit status 2.
"""

from __future__ import annotations

import argparse
import html
import json
import statistics
import sys
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path

from data_dir import default_path, missing

from traces.nccl_tests import NcclTestsLog, NcclTestsRow, read_nccl_tests
from traces.task import Op
from traces.units import format_size
from tuner.config import Algo, Proto, parse_enum
from tuner.knobs import DEFAULT_NCCL_VERSION, OLDEST_NCCL_VERSION
from twin.model.host import NCCL_TESTS_ITERS
from twin.placement import Communicator
from twin.predict import predict
from twin.topology import load_cluster

HERE = Path(__file__).resolve().parent
DATA = default_path("nccl-tests")
HELDOUT = HERE / "data" / "heldout"
H200 = HERE / "data" / "h200x2-allreduce.json"
MIB = 1 << 20
TIE = 0.03
TIME_NOISE = 0.03
"""A measured time this much below an earlier size's is a fall, not timing noise."""
MIN_BUSBW_FOR_TIME = 1.0
"""GB/s: below this a busbw-only table's 2-decimal busbw says too little to derive a time from."""
MODELLED_RELEASES = OLDEST_NCCL_VERSION

Point = tuple[int, float, float]
"""(size in bytes, measured busbw, predicted busbw), GB/s."""


@dataclass(frozen=True)
class Run:
    """The hardware and launch one file describes (as its header states them)."""

    topology: str
    nodes: int = 1
    nics_per_node: int | None = None
    gpus_per_process: int = 1
    knobs: dict = field(default_factory=dict)
    gpus_per_node: int | None = None
    """Keep only the first G GPUs of each node (runs with fewer ranks per node than GPUs)."""
    nccl: str | None = None
    """The NCCL release where the log does not print it but its header or source names it."""
    fabric: str | None = None
    """The network between nodes as the header names it: infiniband, roce, gib-a3u / gib-a4 (RoCE through
    Google's gIB plugin and tuner), efa, efa-v1 (first-generation EFA: p4d, p4de) (None: one node).
    Shown in the table; the twin models the fabric kind of ``topology`` (its YAML's
    ``fabric.kind``), which the tests hold to this."""


CLUSTERS = HERE / "clusters"
FARMSHARE = str(CLUSTERS / "farmshare-l40s.yaml")
ABCI = "abci-a"
AZURE_A100_80 = str(CLUSTERS / "azure-nda100v4-80gb.yaml")
GCP_A4 = str(CLUSTERS / "gcp-a4-b200.yaml")
GCP_A3U_DRANET = str(CLUSTERS / "gcp-a3-ultra-dranet-1gpu-1nic.yaml")
AWS_P4DE = str(CLUSTERS / "aws-p4de.yaml")
AWS_P5 = str(CLUSTERS / "aws-p5.yaml")
IB, EFA, EFA_V1 = "infiniband", "efa", "efa-v1"
ECHO_NCCL = "2.12.12"
"""The NCCL release of the Echo logs (Azure ND A100 v4), which print none.  Their nccl-tests predates
nccl-tests 51af557 (2022-08-19, "Resync with NCCL 2.13"): the header has no ``agg iters``/``graph``
fields and the device lines no ``Group`` (added in d313d20, 2022-09-20).  Azure's HPC images build
nccl-tests from a fresh clone against the image's own NCCL (``install_nccl.sh``, Azure/azhpc-images);
the images of that nccl-tests shipped NCCL 2.9.9-1 (2021-07), 2.11.4-1 (2021-11), 2.12.7-1
(2022-05) and 2.12.12-1 (2022-06, replaced by 2.14.3-1 on 2022-08-29).  The newest of them is
taken; all four read their work from host memory (``twin.model.workfifo``), which the default 2.28
does not, and the twin's one-node curves agree across them at all but one or two sizes."""
GIB_A3U, GIB_A4 = "gib-a3u", "gib-a4"  # RoCE v2 through Google's gIB plugin, its tuner config as the VM sets it
RUNS = {
    # ---- the development set (tests/data/nccl-tests) ----
    # ABCI 2.0 node (A): 8 A100 on NVSwitch, Intel Xeon hosts, 4 HDR NICs per node, one MPI rank per GPU.
    "abci-inter_anode-16gpu-2node-allreduce": Run(ABCI, nodes=2, fabric=IB),
    "abci-inter_anode-16gpu-2node-broadcast": Run(ABCI, nodes=2, fabric=IB),
    "abci-intra_anode-8gpu-1node-allreduce": Run(ABCI),
    # Azure ND H100 v5, single process driving 8 GPUs, NCCL_ALGO=NVLS.
    "azure-ndH100v5-8gpu-intranode-allreduce-NVLS-busbw-summary": Run(
        "dgx-h100", gpus_per_process=8, knobs={"algo": Algo.NVLS}),
    # Azure ND A100 v4: 8 HDR NICs per node; -g N within one node, one rank per GPU across nodes.
    "echo-azure-ndA100v4-allreduce-2gpu": Run("dgx-a100", nccl=ECHO_NCCL, gpus_per_process=2),
    "echo-azure-ndA100v4-allreduce-8gpu": Run("dgx-a100", nccl=ECHO_NCCL, gpus_per_process=8),
    "echo-azure-ndA100v4-allreduce-16gpu": Run("dgx-a100", nccl=ECHO_NCCL, nodes=2, fabric=IB),
    "echo-azure-ndA100v4-allreduce-64gpu": Run("dgx-a100", nccl=ECHO_NCCL, nodes=8, fabric=IB),
    "nvidia-dgxc-dgxh100-8gpu-intranode-allreduce-sample": Run("dgx-h100"),
    # vTrain: the launch is not recorded.  Its 2/4/8-GPU peaks (197, 222, 229 GB/s) keep the
    # ratios of a single process driving the GPUs (NCCL's direct pointers: 3, 2.67, 2.57
    # operations per byte), not of one process per GPU (4, 3.33, 3.14), so it runs as -g N.
    "vtrain-a100-2gpu-intranode-allreduce-LUT-1MiB-1GiB": Run("dgx-a100", gpus_per_process=2),
    "vtrain-a100-4gpu-intranode-allreduce-LUT-1MiB-1GiB": Run("dgx-a100", gpus_per_process=4),
    "vtrain-a100-8gpu-intranode-allreduce-LUT-1MiB-1GiB": Run("dgx-a100", gpus_per_process=8),
    # ---- held out (benchmarks/data/heldout): no constant may be set from these ----
    # ABCI node (A), NCCL 2.8.4: devices 0-3 of a node; 4, 8 and 16 nodes of 8.
    "abci-intra_anode-4gpu-1node-allreduce": Run(ABCI),
    "abci-intra_anode-8gpu-1node-broadcast": Run(ABCI),
    "abci-inter_anode-32gpu-4node-allreduce": Run(ABCI, nodes=4, fabric=IB),
    "abci-inter_anode-64gpu-8node-allreduce": Run(ABCI, nodes=8, fabric=IB),
    "abci-inter_anode-128gpu-16node-allreduce": Run(ABCI, nodes=16, fabric=IB),
    "abci-inter_anode-128gpu-16node-broadcast": Run(ABCI, nodes=16, fabric=IB),
    # Azure ND A100 v4 (Echo): -g 4 on one node; 4 and 16 nodes, one rank per GPU.
    "echo-azure-ndA100v4-allreduce-4gpu": Run("dgx-a100", nccl=ECHO_NCCL, gpus_per_process=4),
    "echo-azure-ndA100v4-allreduce-32gpu": Run("dgx-a100", nccl=ECHO_NCCL, nodes=4, fabric=IB),
    "echo-azure-ndA100v4-allreduce-128gpu": Run("dgx-a100", nccl=ECHO_NCCL, nodes=16, fabric=IB),
    # Azure AI-benchmarking-guide: one process drives 8 GPUs (-g 8); H200 with NCCL_ALGO=NVLS.
    "azure-ndH200v5-8gpu-intranode-allreduce-NVLS-busbw-summary": Run("hgx-h200", gpus_per_process=8),
    "azure-ndA100v4-80gb-8gpu-intranode-allreduce-busbw-summary": Run(AZURE_A100_80, gpus_per_process=8),
    # GCP over RoCE (gIB): B200 a4 and H200 a3-ultra VMs; "2gpu-2node" is one GPU per VM.  The a4
    # pods claim GPU and NIC on one PCIe root (DraNet's pcieRoot constraint); the a3-ultra pods get
    # any GPU and a NIC by name, a GPU of the other socket (the cluster file says how we know).
    "gcp-a4-b200-2gpu-intranode-allgather": Run(GCP_A4),
    "gcp-a4-b200-2gpu-2node-allgather-roce": Run(GCP_A4, nodes=2, gpus_per_node=1, fabric=GIB_A4),
    "gcp-a3ultra-h200-2gpu-2node-allgather-roce": Run(GCP_A3U_DRANET, nodes=2, fabric=GIB_A3U),
    "gcp-a3ultra-h200-2gpu-2node-allreduce-roce": Run(GCP_A3U_DRANET, nodes=2, fabric=GIB_A3U),
    # Nebius H200, 8x 400 Gb/s NDR per node; the job's image ships NCCL 2.23.4.
    "nebius-h200-16gpu-2node-allreduce-ib-1G-16G": Run("hgx-h200", nodes=2, nccl="2.23.4", fabric=IB),
    # AWS EFA: 2x p4de (4x 100 Gb/s first-generation EFA each), 2x p5 (32x 100 Gb/s EFA v2 each).
    "aws-p4de-a100-16gpu-2node-allreduce-efa": Run(AWS_P4DE, nodes=2, fabric=EFA_V1),
    "aws-p5-h100-16gpu-2node-allreduce-efa": Run(AWS_P5, nodes=2, fabric=EFA),
}
L40S_VARIANTS = {"ring": {"algo": Algo.RING}, "tree": {"algo": Algo.TREE}, "auto_ll": {"proto": Proto.LL},
                 "auto_ll128": {"proto": Proto.LL128}, "auto_simple": {"proto": Proto.SIMPLE}}
for _name, _knobs in L40S_VARIANTS.items():
    RUNS[f"stanford-farmshare-l40s-pcie-2gpu-allreduce-{_name}"] = Run(FARMSHARE, gpus_per_process=2, knobs=_knobs)
for _i in (1, 2, 3):
    RUNS[f"stanford-farmshare-l40s-pcie-2gpu-allreduce-iteration_{_i}"] = Run(FARMSHARE, gpus_per_process=2)


def knobs_from_env(env: dict[str, str]) -> dict:
    """NCCL_ALGO / NCCL_PROTO a file reports, as forced knobs."""
    knobs = {}
    if "NCCL_ALGO" in env:
        knobs["algo"] = parse_enum(Algo, env["NCCL_ALGO"])
    if "NCCL_PROTO" in env:
        knobs["proto"] = parse_enum(Proto, env["NCCL_PROTO"])
    return knobs


def file_release(log: NcclTestsLog, run: Run) -> str | None:
    """The NCCL release the file ran: the log's, else the one its RUNS entry names."""
    return log.nccl_version or run.nccl


def nccl_release(version: str | None) -> tuple[int, int, int]:
    """The NCCL release whose choices the twin emulates: ``version`` where the cost model knows
    it (2.8.3 and later), else the default (``DEFAULT_NCCL_VERSION``).

    >>> nccl_release("2.28.9"), nccl_release("2.8.4")
    ((2, 28, 9), (2, 8, 4))
    >>> nccl_release("2.7.8") == nccl_release(None) == DEFAULT_NCCL_VERSION
    True
    """
    if version:
        release = tuple(int(x) for x in version.split(".")[:3])
        if release >= MODELLED_RELEASES:
            return release  # type: ignore[return-value]
    return DEFAULT_NCCL_VERSION


def measured_busbw(log: NcclTestsLog, row: NcclTestsRow) -> float:
    """The row's busbw from its time where it has one (nccl-tests prints busbw to 0.01 GB/s),
    else as printed."""
    if row.time_us and log.op is not None and log.nranks is not None:
        return log.task(row).busbw_gbps(row.time_us)
    return row.busbw


def predict_file(path: Path) -> tuple[NcclTestsLog, list[Point]]:
    """(size, measured busbw, predicted busbw) for every row with a measurement."""
    log = read_nccl_tests(path)
    run = RUNS[path.stem]
    cluster = load_cluster(run.topology, nodes=run.nodes, nics_per_node=run.nics_per_node,
                           gpus_per_node=run.gpus_per_node)
    comm = Communicator.first(cluster, log.nranks, gpus_per_process=run.gpus_per_process,
                              nccl_version=nccl_release(file_release(log, run)))
    knobs = {**knobs_from_env(log.env), **run.knobs}
    out = []
    for row in log.rows:
        if row.nbytes == 0 or not row.busbw:
            continue
        # nccl-tests times calls issued back to back (``Prediction.repeated_us``): down a
        # Broadcast/Reduce chain they overlap as far as every rank's kernel lets them.
        p = predict(comm, log.op, row.nbytes, dtype=row.dtype, iters=log.iters or NCCL_TESTS_ITERS, **knobs)
        out.append((row.nbytes, measured_busbw(log, row), p.task.busbw_gbps(p.repeated_us)))
    return log, out


def predict_h200(path: Path = H200) -> dict[str, list[Point]]:
    """(size, measured busbw, predicted busbw) per NCCL_ALGO/NCCL_PROTO variant of our H200 sweep."""
    doc = json.loads(path.read_text())
    comm = Communicator.first(load_cluster(doc["topology"]), doc["nranks"], gpus_per_process=doc["gpus_per_process"],
                              nccl_version=tuple(int(x) for x in doc["nccl_version"].split(".")))
    out = {}
    for name, run in doc["runs"].items():
        knobs = knobs_from_env(run["env"])
        points = []
        for row in run["rows"]:
            p = predict(comm, Op.ALLREDUCE, row["nbytes"], **knobs)
            points.append((row["nbytes"], p.task.busbw_gbps(row["graph_us"]), p.busbw_gbps))
        out[name] = points
    return out


# ---- what the table says about one file ------------------------------------------------------

def error(measured: float, predicted: float) -> float:
    """Absolute % error of a prediction: ``error(200, 150) == 25.0``."""
    return abs(predicted - measured) / measured * 100


def median_error(points: list[Point], keep) -> float | None:
    """Median % error over the points whose size ``keep`` accepts; ``None`` when there are none."""
    errors = [error(meas, pred) for size, meas, pred in points if keep(size)]
    return statistics.median(errors) if errors else None


def worst(points: list[Point]) -> tuple[int, float]:
    """(size, % error) of the worst-predicted point.

    >>> worst([(1024, 1.0, 1.1), (2048, 2.0, 1.0), (4096, 4.0, 4.0)])
    (2048, 50.0)
    """
    size, meas, pred = max(points, key=lambda p: error(p[1], p[2]))
    return size, error(meas, pred)


def largest_fall(curve: list[tuple[int, float]], tolerance: float = 0.0) -> tuple[int, float] | None:
    """Where a time-over-size curve is not monotone: (size, % fall) of the point furthest below the
    largest time of any smaller size, counting falls of more than ``tolerance`` (a fraction);
    ``None`` when time never falls that much as size grows. ``curve`` is (size, time) in any order.

    >>> largest_fall([(1, 10.0), (2, 9.8), (4, 12.0), (8, 9.0)], tolerance=0.03)
    (8, 25.0)
    >>> largest_fall([(1, 10.0), (2, 9.8), (4, 12.0)], tolerance=0.03) is None
    True
    """
    falls = []
    highest = None
    for size, time in sorted(curve):
        if highest is not None and time < highest * (1 - tolerance):
            falls.append((1 - time / highest, size))
        highest = time if highest is None else max(highest, time)
    if not falls:
        return None
    fall, size = max(falls)
    return size, fall * 100


def time_curves(points: list[Point]) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """Measured and predicted time over size, in units of size / busbw (the op's busbw factor is
    the same at every size of a file, so this orders times as the times themselves do).

    Measured points with a busbw under ``MIN_BUSBW_FOR_TIME`` are left out: derived from a busbw
    printed to 0.01 GB/s, their times are rounding, not measurement.
    """
    measured = [(size, size / meas) for size, meas, _ in points if meas >= MIN_BUSBW_FOR_TIME]
    predicted = [(size, size / pred) for size, _, pred in points]
    return measured, predicted


@dataclass(frozen=True)
class FileAccuracy:
    """One file's line of the table."""

    name: str
    n_big: int
    err_big: float | None
    n_small: int
    err_small: float | None
    worst: tuple[int, float]
    measured_fall: tuple[int, float] | None
    predicted_fall: tuple[int, float] | None
    releases: str = ""
    fabric: str = ""


def accuracy(name: str, points: list[Point], releases: str = "", fabric: str = "",
             measured_tolerance: float = TIME_NOISE) -> FileAccuracy:
    """The table line of ``points``: errors above and below 1 MiB, the worst size, monotonicity
    (a measured fall counts beyond ``measured_tolerance``, a predicted one always)."""
    measured, predicted = time_curves(points)
    n_big = sum(size >= MIB for size, _, _ in points)
    return FileAccuracy(name, n_big, median_error(points, lambda s: s >= MIB), len(points) - n_big,
                        median_error(points, lambda s: s < MIB), worst(points),
                        largest_fall(measured, measured_tolerance), largest_fall(predicted), releases, fabric)


def file_accuracy(path: Path) -> tuple[FileAccuracy, list[Point]]:
    """The table line of one nccl-tests file and the points it was computed from."""
    log, points = predict_file(path)
    run = RUNS[path.stem]
    version = file_release(log, run)
    releases = f"{version or '?'}/{'.'.join(map(str, nccl_release(version)[:2]))}"
    return accuracy(path.stem, points, releases, run.fabric or ""), points


# ---- printing ---------------------------------------------------------------------------------

COLUMNS = ("file", "n≥1MiB", "err≥1MiB", "n<1MiB", "err<1MiB", "worst size", "monotone meas", "monotone pred",
           "NCCL file/model", "fabric")


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}%"


def _fall(fall: tuple[int, float] | None) -> str:
    return "ok" if fall is None else f"-{fall[1]:.0f}% @{format_size(fall[0])}"


def cells(row: FileAccuracy) -> tuple[str, ...]:
    """The table cells of one line, as ``COLUMNS`` names them."""
    size, err = row.worst
    return (row.name, str(row.n_big), _pct(row.err_big), str(row.n_small), _pct(row.err_small),
            f"{format_size(size)} {err:.0f}%", _fall(row.measured_fall), _fall(row.predicted_fall),
            row.releases, row.fabric)


def summary(rows: list[FileAccuracy]) -> tuple[str, ...]:
    """The summary line: median over files of each error column, files monotone, worst overall."""
    def median_of(values):
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None
    size, err = max((r.worst for r in rows), key=lambda w: w[1])
    ok_meas = sum(r.measured_fall is None for r in rows)
    ok_pred = sum(r.predicted_fall is None for r in rows)
    return (f"median over {len(rows)} files", str(sum(r.n_big for r in rows)),
            _pct(median_of(r.err_big for r in rows)), str(sum(r.n_small for r in rows)),
            _pct(median_of(r.err_small for r in rows)), f"{format_size(size)} {err:.0f}%",
            f"{ok_meas}/{len(rows)} ok", f"{ok_pred}/{len(rows)} ok", "", "")


def format_table(rows: list[FileAccuracy], title: str = COLUMNS[0]) -> str:
    """The table as aligned text, a summary line last."""
    lines = [(title, *COLUMNS[1:]), *(cells(r) for r in rows), summary(rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(COLUMNS))]
    text = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths, strict=True)))
            for line in lines]
    text.insert(len(text) - 1, "-" * len(text[0]))
    return "\n".join(line.rstrip() for line in text)


def write_plot(out: Path, name: str, points: list[Point]) -> Path:
    """``out/<name>.html``: measured and predicted busbw over size (log x), plotly.js beside it."""
    import plotly.graph_objects as go

    sizes = [size for size, _, _ in points]
    labels = [format_size(size) for size in sizes]
    fig = go.Figure()
    fig.add_scatter(x=sizes, y=[m for _, m, _ in points], name="measured", mode="lines+markers", text=labels)
    fig.add_scatter(x=sizes, y=[p for _, _, p in points], name="predicted", mode="lines+markers", text=labels)
    fig.update_layout(title=name, xaxis={"type": "log", "title": "size (bytes)"},
                      yaxis={"title": "busbw (GB/s)"}, hovermode="x unified")
    path = out / f"{name}.html"
    fig.write_html(path, include_plotlyjs="directory")
    return path


def write_index(out: Path, tables: list[tuple[str, list[FileAccuracy]]]) -> Path:
    """``out/index.html``: the tables, each file's name linking its plot."""
    parts = ["<!doctype html><meta charset='utf-8'><title>ccltwin accuracy</title>",
             "<style>td,th{padding:2px 8px;text-align:right}td:first-child{text-align:left}</style>"]
    for title, rows in tables:
        parts.append(f"<h2>{html.escape(title)}</h2><table><tr>"
                     + "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS) + "</tr>")
        for row in rows:
            first, *rest = cells(row)
            link = f"<a href='{html.escape(row.name)}.html'>{html.escape(first)}</a>"
            parts.append("<tr><td>" + link + "</td>" + "".join(f"<td>{html.escape(c)}</td>" for c in rest) + "</tr>")
        parts.append("<tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in summary(rows)) + "</tr></table>")
    path = out / "index.html"
    path.write_text("\n".join(parts) + "\n")
    return path


def order_agreement(results: dict[str, list[Point]]) -> tuple[int, int]:
    """Sizes at which the predicted order of the variants matches the measured one."""
    by_size: dict[int, dict[str, tuple[float, float]]] = {}
    for name, points in results.items():
        for size, meas, pred in points:
            by_size.setdefault(size, {})[name] = (meas, pred)
    matched = total = 0
    for variants in by_size.values():
        if len(variants) < 2:
            continue
        total += 1
        ok = True
        for (_, (m1, p1)), (_, (m2, p2)) in combinations(variants.items(), 2):
            if abs(m1 - m2) / max(m1, m2) <= TIE:
                continue
            ok &= (m1 > m2) == (p1 > p2)
        matched += ok
    return matched, total


def logs_in(folder: Path) -> list[Path]:
    """The folder's logs that ``RUNS`` describes; a note on stderr for each it does not, exit 2
    when none is left."""
    logs = sorted(folder.glob("*.txt")) if folder.is_dir() else []
    known = [path for path in logs if path.stem in RUNS]
    if not known:
        problem = ("no such folder" if not folder.is_dir() else "no nccl-tests logs (*.txt) in it" if not logs
                   else f"none of its {len(logs)} nccl-tests logs (*.txt) is described in RUNS")
        missing(f"{folder}: {problem}")
    for path in logs:
        if path.stem not in RUNS:
            print(f"skipped {path.name}: not in RUNS (the hardware it ran on is not described)", file=sys.stderr)
    return known


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA, metavar="DIR",
                        help=f"a folder of nccl-tests logs (default: {DATA}; held-out systems: {HELDOUT})")
    parser.add_argument("--plots", type=Path, metavar="DIR",
                        help="write one HTML plot per file and index.html with the table into DIR")
    args = parser.parse_args()
    known = logs_in(args.data)
    if args.plots:
        if args.plots.exists() and not args.plots.is_dir():
            missing(f"{args.plots}: not a folder")
        args.plots.mkdir(parents=True, exist_ok=True)
    rows, variants, plotted = [], {}, {}
    for path in known:
        row, points = file_accuracy(path)
        rows.append(row)
        plotted[path.stem] = points
        for name in L40S_VARIANTS:
            if path.stem.endswith(f"allreduce-{name}"):
                variants[name] = points
    tables = [(str(args.data), rows)]
    print(format_table(rows))
    matched, total = order_agreement(variants)
    if total:
        print(f"\nL40S PCIe variants ({', '.join(variants)}): predicted order matches measured at "
              f"{matched}/{total} sizes ({matched / total:.0%}); pairs within {TIE:.0%} count as ties")
    if args.data == DATA:
        h200 = {f"h200x2-allreduce-{name}": points for name, points in predict_h200().items()}
        version = json.loads(H200.read_text())["nccl_version"]
        h200_rows = [accuracy(name, points, f"{version}/{version}") for name, points in h200.items()]
        title = "2x H200 NVLink (this workplace, CUDA-graph timed)"
        print("\n" + format_table(h200_rows, title))
        tables.append((title, h200_rows))
        plotted.update(h200)
    if args.plots:
        for name, points in plotted.items():
            write_plot(args.plots, name, points)
        print(f"\nplots: {write_index(args.plots, tables)}")


if __name__ == "__main__":
    main()
