"""nccl-tests logs: every real file in tests/data/nccl-tests, the JSON output, bad input, round trips."""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.testdata import DATA as TEST_DATA
from traces.errors import TraceError
from traces.nccl_tests import NcclTestsRow, read_nccl_tests
from traces.task import DTYPE_BYTES, Op, Task

DATA = TEST_DATA / "nccl-tests"
HERE = TEST_DATA / "traces"

# file: (rows, op, nranks, peak busbw GB/s, format) — rows and peaks as in tests/data/nccl-tests/SOURCES.md
REAL = {
    "abci-inter_anode-16gpu-2node-allreduce.txt": (24, Op.ALLREDUCE, 16, 33.34, "text"),
    "abci-inter_anode-16gpu-2node-broadcast.txt": (24, Op.BROADCAST, 16, 26.82, "text"),
    "abci-intra_anode-8gpu-1node-allreduce.txt": (24, Op.ALLREDUCE, 8, 158.41, "text"),
    "azure-ndH100v5-8gpu-intranode-allreduce-NVLS-busbw-summary.txt": (
        24,
        Op.ALLREDUCE,
        8,
        478.87,
        "markdown",
    ),
    "echo-azure-ndA100v4-allreduce-16gpu.txt": (25, Op.ALLREDUCE, 16, 127.95, "text"),
    "echo-azure-ndA100v4-allreduce-2gpu.txt": (28, Op.ALLREDUCE, 2, 206.37, "text"),
    "echo-azure-ndA100v4-allreduce-64gpu.txt": (23, Op.ALLREDUCE, 64, 134.98, "text"),
    "echo-azure-ndA100v4-allreduce-8gpu.txt": (28, Op.ALLREDUCE, 8, 230.86, "text"),
    "nvidia-dgxc-dgxh100-8gpu-intranode-allreduce-sample.txt": (32, Op.ALLREDUCE, 8, 480.16, "text"),
    "stanford-farmshare-l40s-pcie-2gpu-allreduce-auto_ll.txt": (25, Op.ALLREDUCE, 2, 6.04, "text"),
    "stanford-farmshare-l40s-pcie-2gpu-allreduce-auto_ll128.txt": (25, Op.ALLREDUCE, 2, 8.89, "text"),
    "stanford-farmshare-l40s-pcie-2gpu-allreduce-auto_simple.txt": (25, Op.ALLREDUCE, 2, 15.7, "text"),
    "stanford-farmshare-l40s-pcie-2gpu-allreduce-iteration_1.txt": (25, Op.ALLREDUCE, 2, 15.67, "text"),
    "stanford-farmshare-l40s-pcie-2gpu-allreduce-iteration_2.txt": (25, Op.ALLREDUCE, 2, 15.66, "text"),
    "stanford-farmshare-l40s-pcie-2gpu-allreduce-iteration_3.txt": (25, Op.ALLREDUCE, 2, 15.66, "text"),
    "stanford-farmshare-l40s-pcie-2gpu-allreduce-ring.txt": (25, Op.ALLREDUCE, 2, 15.57, "text"),
    "stanford-farmshare-l40s-pcie-2gpu-allreduce-tree.txt": (25, Op.ALLREDUCE, 2, 14.81, "text"),
    "vtrain-a100-2gpu-intranode-allreduce-LUT-1MiB-1GiB.txt": (1024, Op.ALLREDUCE, 2, 197.35, "csv"),
    "vtrain-a100-4gpu-intranode-allreduce-LUT-1MiB-1GiB.txt": (1024, Op.ALLREDUCE, 4, 221.87, "csv"),
    "vtrain-a100-8gpu-intranode-allreduce-LUT-1MiB-1GiB.txt": (1024, Op.ALLREDUCE, 8, 229.35, "csv"),
}


def test_every_real_file_is_listed():
    assert sorted(p.name for p in DATA.iterdir() if p.name != "SOURCES.md") == sorted(REAL)


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_file(name):
    rows, op, nranks, peak, fmt = REAL[name]
    log = read_nccl_tests(DATA / name)
    assert (len(log.rows), log.op, log.nranks, log.format) == (rows, op, nranks, fmt)
    assert max(log.busbw) == pytest.approx(peak)
    sizes = [row.nbytes for row in log.rows]
    assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes)
    assert all(row.dtype == "float" for row in log.rows)
    assert log.header["SOURCE"].startswith("github.com/")
    assert log.task(log.rows[-1]) == Task(op, sizes[-1], nranks, "float")


def test_real_file_details():
    ll = read_nccl_tests(DATA / "stanford-farmshare-l40s-pcie-2gpu-allreduce-auto_ll.txt")
    assert ll.env == {"NCCL_PROTO": "ll"} and ll.nccl_version == "2.29.2"
    assert ll.rows[0] == NcclTestsRow(8, 2, "float", "sum", None, 9.46, 0.0, 0.0, 8.96, 0.0, 0.0, 0, 0)
    assert read_nccl_tests(DATA / "stanford-farmshare-l40s-pcie-2gpu-allreduce-iteration_1.txt").env == {}
    abci = read_nccl_tests(DATA / "abci-inter_anode-16gpu-2node-broadcast.txt")
    assert abci.env == {"NCCL_NET_GDR_LEVEL": "2"} and abci.nccl_version == "2.8.4"
    assert abci.rows[0].root == 0 and abci.rows[0].redop is None
    echo = read_nccl_tests(DATA / "echo-azure-ndA100v4-allreduce-64gpu.txt")  # [1,0]<stdout>: prefix, N/A
    assert echo.rows[0].oop_time_us == 314.8 and echo.rows[0].oop_wrong is None
    vtrain = read_nccl_tests(DATA / "vtrain-a100-8gpu-intranode-allreduce-LUT-1MiB-1GiB.txt")  # time in ns
    assert vtrain.rows[-1].oop_time_us == pytest.approx(8193.0) and vtrain.rows[-1].ip_busbw == 229.25
    azure = read_nccl_tests(DATA / "azure-ndH100v5-8gpu-intranode-allreduce-NVLS-busbw-summary.txt")
    assert [r.nbytes for r in azure.rows] == [2**k for k in range(10, 34)]
    assert azure.rows[0].oop_busbw is None and azure.busbw[0] == 0.07 and azure.rows[0].time_us is None
    assert azure.env == {"NCCL_ALGO": "NVLS"} and azure.nccl_version == "2.18.5"
    dgx = read_nccl_tests(DATA / "nvidia-dgxc-dgxh100-8gpu-intranode-allreduce-sample.txt")
    assert dgx.env == {} and dgx.nccl_version is None  # "NCCL_NVLS_ENABLE=0/1" is a sweep, not a setting
    assert (abci.iters, ll.iters, dgx.iters, azure.iters) == (100, 20, 20, None)  # "warmup iters: 5 iters: 100"


def test_iters_from_the_command_where_the_header_line_is_missing(tmp_path):
    text = "# COMMAND: mpirun -np 2 ./all_reduce_perf -b 8 -e 1M -w 5 -n 50\n" + HEADER + ROW
    assert read_nccl_tests(write(tmp_path, text)).iters == 50
    assert read_nccl_tests(write(tmp_path, "# nThread 1 nGpus 1 warmup iters: 7 iters: 30 validation: 1\n"
                                 + HEADER + ROW)).iters == 30
    assert read_nccl_tests(write(tmp_path, HEADER + ROW)).iters is None


def test_json_output():
    log = read_nccl_tests(HERE / "nccl-tests-all_gather-2x4-synthetic.json")
    assert (log.format, log.op, log.nranks, log.nccl_version) == ("json", Op.ALLGATHER, 8, "2.27.3")
    assert log.env == {"NCCL_PROTO": "Simple", "NCCL_DEBUG": "WARN"}
    assert len(log.rows) == 9 and log.rows[0].root is None and log.rows[0].redop is None
    assert log.header["COMMAND"].startswith("./build/all_gather_perf -b 8")


def write(tmp_path, text, name="log.txt"):
    path = tmp_path / name
    path.write_text(text)
    return path


HEADER = (
    "#       size         count      type   redop    root"
    "     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
)
ROW = (
    "        1024           256     float     sum      -1"
    "    16.94    0.06    0.11      0    16.17    0.06    0.11      0\n"
)


@pytest.mark.parametrize(
    ("text", "where", "problem"),
    [
        ("", "log.txt", "empty file"),
        ("   \n\n", "log.txt", "empty file"),
        ("# nThread 1 nGpus 8\n# Avg bus bandwidth : 0\n", "log.txt", "no data rows"),
        (HEADER + ROW + "        2048    512   float  sum  -1  17.0\n", "log.txt:3", "expected 13 columns"),
        (HEADER + ROW.replace("float", "quad"), "log.txt:2", "unknown data type 'quad'"),
        (HEADER + ROW.replace("16.94", "1,5"), "log.txt:2", "is not a number"),
        ("# Collective test starting: gather_perf\n" + HEADER + ROW, "log.txt:1", "unknown collective"),
        (
            "# Collective test starting: all_reduce_perf\n# Collective test starting: all_gather_perf\n"
            + HEADER
            + ROW,
            "log.txt",
            "several collectives",
        ),
        ("size(B),count,type,time(ns),busbw(GB/s)\n8,2,float,100\n", "log.txt:2", "expected 5 CSV fields"),
        ("size(B),count,type,time(fortnights),busbw\n", "log.txt:1", "unknown time unit"),
        ("| Size | busbw |\n|---|---|\n| 1K | fast |\n", "log.txt:3", "'fast' is not a number"),
    ],
)
def test_bad_text(tmp_path, text, where, problem):
    with pytest.raises(TraceError, match=rf"^\S*/{where}: .*{problem}"):
        read_nccl_tests(write(tmp_path, text))


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"results": [', "malformed JSON"),
        ('{"version": 2}', "no 'results' list"),
        ('{"results": []}', "no data rows"),
        ('{"args": ["./hypercube_perf"], "results": [{"size": 8}]}', r"results\[0\]: no count"),
        (
            '{"args": ["./hypercube_perf"], "results": [{"size": 8, "count": 2, "type": "float",'
            ' "in_place": {"time": 1, "alg_bw": 1, "bus_bw": 1}}]}',
            "unknown collective",
        ),
    ],
)
def test_bad_json(tmp_path, text, problem):
    with pytest.raises(TraceError, match=rf"^\S*x\.json(:\d+)?: .*{problem}"):
        read_nccl_tests(write(tmp_path, text, "x.json"))


def test_not_utf8(tmp_path):
    path = tmp_path / "bin.log"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(TraceError, match="not UTF-8"):
        read_nccl_tests(path)


def test_older_layouts(tmp_path):
    """nccl-tests before 2.13 printed only the columns an op has; a table may come without its header."""
    old_allgather = (
        "#       size         count    type     time   algbw   busbw  error     time   algbw   busbw  error\n"
        "        1024            32   float    20.15    0.05    0.04  0e+00    19.87    0.05    0.04  0e+00\n"
    )
    row = read_nccl_tests(write(tmp_path, old_allgather)).rows[0]
    assert (row.redop, row.root, row.oop_time_us, row.ip_busbw) == (None, None, 20.15, 0.04)
    headerless = "    1024   256  float  sum  -1  16.94  0.06  0.11  N/A  16.17  0.06  0.11  N/A\n"
    row = read_nccl_tests(write(tmp_path, headerless)).rows[0]
    assert (row.redop, row.oop_time_us, row.ip_time_us, row.ip_wrong) == ("sum", 16.94, 16.17, None)
    replay = HEADER + "        1024           256     float     sum      -1    16.17    0.06    0.11      0\n"
    row = read_nccl_tests(write(tmp_path, replay)).rows[0]
    assert (row.oop_time_us, row.ip_time_us, row.busbw) == (None, 16.17, 0.11)


def test_nranks_from_command_and_threads(tmp_path):
    text = (
        "# COMMAND: mpirun -np 4 -x NCCL_ALGO=Ring ./all_reduce_perf -b 8 -e 1M -g 2\n"
        "# nThread 1 nGpus 2 minBytes 8\n" + HEADER + ROW
    )
    log = read_nccl_tests(write(tmp_path, text))
    assert (log.nranks, log.env, log.op) == (8, {"NCCL_ALGO": "Ring"}, Op.ALLREDUCE)
    log = read_nccl_tests(write(tmp_path, "# COMMAND: srun ./all_reduce_perf -g 1\n" + HEADER + ROW))
    assert log.nranks is None
    assert read_nccl_tests(write(tmp_path, HEADER + ROW)).op is None


# ---- property tests -----------------------------------------------------------------------

centi = st.integers(0, 10**6).map(lambda n: n / 100)  # bandwidths: 0 to 10,000 GB/s (MAX_BUSBW_GBPS)
time = st.integers(1, 10**7).map(lambda n: n / 100)  # times are > 0
rows = st.lists(
    st.builds(
        lambda count, dtype, redop, t1, a1, b1, t2, a2, b2, w1, w2: NcclTestsRow(
            count * DTYPE_BYTES[dtype], count, dtype, redop, None, t1, a1, b1, t2, a2, b2, w1, w2
        ),
        st.integers(0, 2**38),
        st.sampled_from(["float", "half", "bfloat16", "int8", "double"]),
        st.sampled_from(["sum", "prod", "max", "min", "avg"]),
        time,
        centi,
        centi,
        time,
        centi,
        centi,
        st.integers(0, 5).map(float),
        st.integers(0, 5).map(float),
    ),
    min_size=1,
    max_size=20,
)


def render_text(table: list[NcclTestsRow], prefix: str) -> str:
    lines = [
        "# Collective test starting: reduce_scatter_perf",
        "#  Rank  0 Group  0 Pid 1 on h device 0 [0x1] GPU",
        "#  Rank  1 Group  0 Pid 1 on h device 1 [0x2] GPU",
        HEADER.rstrip(),
    ]
    for r in table:
        lines.append(
            f"{r.nbytes:12d}  {r.count:12d}  {r.dtype:>8}  {r.redop:>6}  {-1:6d}  "
            f"{r.oop_time_us:7.2f}  {r.oop_algbw:6.2f}  {r.oop_busbw:6.2f}  {r.oop_wrong:6g}  "
            f"{r.ip_time_us:7.2f}  {r.ip_algbw:6.2f}  {r.ip_busbw:6.2f}  {r.ip_wrong:6g}"
        )
    return "".join(f"{prefix}{line}\n" for line in lines)


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(table=rows, prefix=st.sampled_from(["", "[1,0]<stdout>:", "0: ", "12: "]))
def test_text_round_trip(tmp_path, table, prefix):
    log = read_nccl_tests(write(tmp_path, render_text(table, prefix)))
    assert (log.op, log.nranks, log.rows) == (Op.REDUCESCATTER, 2, table)


@settings(max_examples=20, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(table=rows)
def test_json_round_trip(tmp_path, table):
    def side(t, a, b, w):
        return {"time": t, "alg_bw": a, "bus_bw": b, "nwrong": w}

    doc = {
        "version": 2,
        "args": ["all_reduce_perf"],
        "nccl_version": 22204,
        "config": {"nthreads": 1, "ngpus": 4, "devices": [{"rank": 0}]},
        "results": [
            {
                "size": r.nbytes,
                "count": r.count,
                "type": r.dtype,
                "redop": r.redop,
                "root": "    -1",
                "out_of_place": side(r.oop_time_us, r.oop_algbw, r.oop_busbw, r.oop_wrong),
                "in_place": side(r.ip_time_us, r.ip_algbw, r.ip_busbw, r.ip_wrong),
            }
            for r in table
        ],
    }
    log = read_nccl_tests(write(tmp_path, json.dumps(doc), "r.json"))
    assert (log.op, log.nranks, log.nccl_version, log.rows) == (Op.ALLREDUCE, 4, "2.22.4", table)


@settings(max_examples=100, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    text=st.lists(
        st.sampled_from(
            [
                *'0123456789 .,-|#\n{}[]":eE',
                "float",
                "sum",
                "size",
                "count",
                "type",
                "time",
                "(ns)",
                "_perf",
                "Rank",
                "Collective test starting:",
            ]
        )
    ).map("".join)
)
def test_arbitrary_text_raises_only_trace_error(tmp_path, text):
    try:
        log = read_nccl_tests(write(tmp_path, text))
    except TraceError:
        return
    assert log.rows


@settings(max_examples=80, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text())
def test_any_unicode_raises_only_trace_error(tmp_path, text):
    with contextlib.suppress(TraceError):
        read_nccl_tests(write(tmp_path, text))
