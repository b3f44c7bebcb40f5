"""traces.capture on real multi-process gloo jobs on CPU.

The jobs run in subprocesses (this file run as a script), so that pytest's own process never
imports torch: ``python tests/test_traces_capture.py jobs DIR`` forks 3 ranks that capture a
DDP training loop with a subgroup all-gather and a functional all-reduce, then an FSDP2 loop,
then a capture whose file cannot be written. Under ``ccltwin trace capture`` the same file
runs as the training script (``train``).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import socket
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from ccltwin import app
from traces.capture.issued import issued_from_comms, issued_from_entries, op_of
from traces.capture.profile import read_profile
from traces.capture.timeline import Window, assemble
from traces.errors import TraceError
from traces.schema import CollectiveEvent, ComputeEvent, ProcessGroup, Trace
from traces.task import Op
from traces.trace_file import load_trace

WORLD = 3
PAIR = (0, 2)
"""The subgroup beside DDP's: an all-gather and a functional all-reduce run on it."""
WARMUP, ITERATIONS = 2, 3
"""DDP rebuilds its buckets after the first iteration and broadcasts them at the second."""
LAYERS = (32, 48, 48, 48, 8)
LINEARS = tuple(itertools.pairwise(LAYERS))
"""(fan_in, fan_out) of each linear layer of the model."""
BUCKET_CAP_MB = 0.004
JOB_TIMEOUT_S = 240


# ---- the jobs (run in subprocesses) ------------------------------------------------------


def _model():
    import torch

    torch.manual_seed(0)
    layers = []
    for fan_in, fan_out in LINEARS:
        layers += [torch.nn.Linear(fan_in, fan_out), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


def _ddp_job(rank: int, out: str) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    from torch.nn.parallel import DistributedDataParallel

    import traces.capture

    pair = dist.new_group(list(PAIR))
    model = DistributedDataParallel(_model(), bucket_cap_mb=BUCKET_CAP_MB)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with traces.capture.capture(out, iterations=ITERATIONS, warmup=WARMUP) as cap:
        for _ in range(WARMUP + ITERATIONS + 1):
            model(torch.randn(8, LAYERS[0])).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
            if rank in PAIR:
                gathered = [torch.zeros(4) for _ in PAIR]
                dist.all_gather(gathered, torch.full((4,), float(rank)), group=pair)
                funcol.wait_tensor(funcol.all_reduce(torch.ones(16), "sum", pair))
            cap.step()


def _fsdp_job(rank: int, out: str) -> None:
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    import traces.capture

    model = _model()
    mesh = init_device_mesh("cpu", (WORLD,))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with traces.capture.capture(out, iterations=2, warmup=1) as cap:
        for _ in range(3):
            model(torch.randn(8, LAYERS[0])).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
            cap.step()


def _unwritable_job(rank: int, out: str) -> None:
    """The trace's path turns into a folder during the capture: rank 0 must fail and leave nothing."""
    import torch
    import torch.distributed as dist

    import traces.capture

    try:
        with traces.capture.capture(out, iterations=1) as cap:
            dist.all_reduce(torch.ones(8))
            if rank == 0:
                os.mkdir(out)
            cap.step()
    except TraceError as err:
        Path(out + ".error").write_text(str(err))


def _rank_main(rank: int, port: int, folder: str) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    _ddp_job(rank, os.path.join(folder, "ddp.json"))
    _fsdp_job(rank, os.path.join(folder, "fsdp.json"))
    _unwritable_job(rank, os.path.join(folder, "unwritable.json"))
    dist.destroy_process_group()


def _train_under_torchrun() -> None:
    """A plain data-parallel script that knows nothing of ccltwin: it all-reduces each gradient itself.

    (DDP itself is covered above; leaving it out here spares each rank the seconds it takes
    to import.) The script ends by destroying its process group, which ends the capture.
    """
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    model = _model()
    optimizer = torch.optim.Adam(model.parameters())
    for _ in range(4):
        model(torch.randn(8, LAYERS[0])).sum().backward()
        for parameter in model.parameters():
            dist.all_reduce(parameter.grad)
        optimizer.step()
        optimizer.zero_grad()
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# ---- fixtures -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("capture")
    done = subprocess.run(
        [sys.executable, __file__, "jobs", str(folder)], capture_output=True, text=True, timeout=JOB_TIMEOUT_S
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return folder


@pytest.fixture(scope="module")
def ddp(jobs) -> Trace:
    return load_trace(jobs / "ddp.json")


def _parameter_bytes() -> int:
    return sum((fan_in + 1) * fan_out * 4 for fan_in, fan_out in LINEARS)


def _per_iteration(trace: Trace, rank: int, group: str) -> dict[int, list[tuple[Op, int, str]]]:
    calls = defaultdict(list)
    for r, event in trace.collectives():
        if r == rank and event.group == group:
            calls[event.iteration].append((event.op, event.nbytes, event.dtype))
    return dict(calls)


def _group_of(trace: Trace, ranks: tuple[int, ...]) -> str:
    return next(g.id for g in trace.groups if g.ranks == ranks)


# ---- DDP with a subgroup -------------------------------------------------------------------------


def test_ddp_bucket_allreduces_add_up_to_the_parameters(ddp):
    """Every iteration all-reduces each parameter byte once, split into several DDP buckets."""
    world = _group_of(ddp, tuple(range(WORLD)))
    for iteration, calls in _per_iteration(ddp, 0, world).items():
        buckets = [nbytes for op, nbytes, dtype in calls if op is Op.ALLREDUCE and dtype == "float32"]
        assert sum(buckets) == _parameter_bytes(), iteration
        assert len(buckets) >= 3


def test_every_iteration_issues_the_same_collectives(ddp):
    """After warmup, each recorded iteration has the same calls, in the same order, on every group."""
    assert ddp.iterations == ITERATIONS
    for rank in range(WORLD):
        for group in ddp.groups:
            calls = _per_iteration(ddp, rank, group.id)
            if rank in group.ranks:
                assert sorted(calls) == list(range(ITERATIONS))
                assert all(calls[i] == calls[0] for i in calls)
            else:
                assert calls == {}


def test_ranks_agree_and_groups_have_their_ranks(ddp):
    """The world group and the pair group are recorded with their global ranks; members issue the same calls."""
    assert ddp.world_size == WORLD
    assert sorted(g.ranks for g in ddp.groups) == sorted([PAIR, tuple(range(WORLD))])
    for group in ddp.groups:
        sequences = [_per_iteration(ddp, rank, group.id) for rank in group.ranks]
        assert all(sequence == sequences[0] for sequence in sequences)
    assert all(rank.node == socket.gethostname() for rank in ddp.ranks)


def test_subgroup_and_functional_collectives_are_recorded(ddp):
    """The list all-gather (nccl-tests size: the whole output) and the functional all-reduce run on the pair."""
    pair = _group_of(ddp, PAIR)
    assert _per_iteration(ddp, 0, pair)[0] == [
        (Op.ALLGATHER, 4 * 4 * len(PAIR), "float32"),
        (Op.ALLREDUCE, 16 * 4, "float32"),
    ]


def test_collectives_are_timed_with_compute_between_them(ddp):
    """gloo's work spans time every collective; CPU compute phases fill the gaps and come before them."""
    for rank in ddp.ranks:
        collectives = [e for e in rank.events if isinstance(e, CollectiveEvent)]
        compute = [e for e in rank.events if isinstance(e, ComputeEvent)]
        assert all(e.start_us is not None and e.end_us > e.start_us for e in collectives)
        assert {e.iteration for e in compute} == set(range(ITERATIONS))
        assert all(0 < e.duration_us <= e.end_us - e.start_us + 1e-3 for e in compute)
        ids = {e.id: e for e in rank.events}
        assert any(isinstance(ids[dep], ComputeEvent) for e in collectives for dep in e.after)
    assert ddp.metadata["untimed_events"] == 0


def test_summary_of_a_captured_trace(jobs):
    """``ccltwin trace summary`` reads the capture: DDP's buckets carry nearly all the bytes."""
    result = CliRunner().invoke(app, ["trace", "summary", str(jobs / "ddp.json"), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["iterations"] == ITERATIONS
    assert summary["source"] == "ccltwin capture"
    world_bytes = sum(row["bytes_per_iteration"] for row in summary["tasks"] if row["nranks"] == WORLD)
    assert world_bytes == _parameter_bytes()


# ---- FSDP2 -------------------------------------------------------------------------------------


def test_fsdp_all_gathers_and_reduce_scatters_its_shards(jobs):
    """fully_shard on gloo: all-gathers and reduce-scatters (gloo runs the latter as all-reduces) of padded shards."""
    trace = load_trace(jobs / "fsdp.json")
    assert trace.iterations == 2
    world = _group_of(trace, tuple(range(WORLD)))
    calls = _per_iteration(trace, 0, world)
    assert calls[0] == calls[1]
    ops = Counter(op for op, _, _ in calls[0])
    linears = len(LINEARS)
    assert ops[Op.REDUCESCATTER] == linears
    assert ops[Op.ALLGATHER] >= linears
    padded = sum(
        math.ceil(fan_out / WORLD) * WORLD * (fan_in + 1) * 4 for fan_in, fan_out in LINEARS
    )
    assert sum(n for op, n, _ in calls[0] if op is Op.REDUCESCATTER) == padded


# ---- bad output -------------------------------------------------------------------------------


def test_a_trace_that_cannot_be_written_leaves_no_file(jobs):
    """When rank 0 cannot write at the end, it raises an error naming the path and leaves no temporary file."""
    message = (jobs / "unwritable.json.error").read_text()
    assert "unwritable.json" in message
    assert (jobs / "unwritable.json").is_dir()
    assert not [p for p in jobs.iterdir() if p.name.startswith(".unwritable.json.")]


def test_capture_into_a_missing_folder_is_refused(tmp_path):
    """The CLI refuses before starting any process, and names the folder."""
    script = tmp_path / "train.py"
    script.write_text("")
    out = tmp_path / "missing" / "job.json"
    result = CliRunner().invoke(app, ["trace", "capture", "-o", str(out), str(script)])
    assert result.exit_code == 2
    assert "missing" in result.output and "does not exist" in result.output
    assert not out.parent.exists()


# ---- the torchrun entry ------------------------------------------------------------------------


def test_ccltwin_trace_capture_runs_a_script_under_torchrun(tmp_path):
    """torchrun -m traces.capture runs an unmodified script; iterations end at its optimizer steps."""
    out = tmp_path / "job.json"
    command = ["trace", "capture", "-o", str(out), "--nproc-per-node", "2", "--warmup", "1"]
    result = CliRunner().invoke(app, [*command, __file__, "train"])
    assert result.exit_code == 0, result.output
    trace = load_trace(out)
    assert trace.world_size == 2 and trace.iterations == 3
    calls = _per_iteration(trace, 1, _group_of(trace, (0, 1)))
    expected = [
        (Op.ALLREDUCE, (fan_in if weight else 1) * fan_out * 4, "float32")
        for fan_in, fan_out in reversed(LINEARS)
        for weight in (False, True)
    ]
    assert sorted(calls[0]) == sorted(expected)
    assert calls[0] == calls[1] == calls[2]


# ---- the parts, without torch ------------------------------------------------------------------


def test_importing_capture_does_not_import_torch():
    """``import traces.capture`` (and the CLI) must not load torch."""
    code = "import sys, traces.capture, ccltwin; assert 'torch' not in sys.modules, 'torch loaded'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_flight_recorder_entries_become_issued_calls():
    """A gloo all-gather's nccl-tests size is its output; gather and scatter are counted as not modelled."""
    entries = [
        {"record_id": 4, "profiling_name": "gloo:all_gather", "process_group": ["1", "undefined"],
         "time_created_ns": 20, "input_sizes": [[4]], "output_sizes": [[2, 4]], "input_dtypes": ["Float"]},
        {"record_id": 3, "profiling_name": "gloo:gather", "process_group": ["0", "default_pg"],
         "time_created_ns": 10, "input_sizes": [[4]], "output_sizes": [], "input_dtypes": ["Float"]},
        {"record_id": 5, "profiling_name": "nccl:send 1->0", "process_group": ["0", "default_pg"],
         "time_created_ns": 30, "input_sizes": [[3]], "output_sizes": [[3]], "input_dtypes": ["BFloat16"]},
    ]
    skipped = Counter()
    issued = issued_from_entries(entries, "dump", skipped)
    assert [(i.op, i.nbytes, i.dtype, i.group) for i in issued] == [
        (Op.ALLGATHER, 32, "float32", "1"),
        (Op.SENDRECV, 6, "bfloat16", "0"),
    ]
    assert issued[1].p2p_ranks == (1, 0)
    assert skipped == {"gloo:gather (not a collective ccltwin models)": 1}


def test_a_malformed_flight_recorder_entry_is_named():
    entries = [{"record_id": 0, "profiling_name": "gloo:all_reduce", "process_group": ["0"],
                "time_created_ns": 1, "input_sizes": "12", "output_sizes": [], "input_dtypes": ["Float"]}]
    with pytest.raises(TraceError, match=r"rank 0 dump: flight-recorder record 0 \(gloo:all_reduce\): sizes"):
        issued_from_entries(entries, "rank 0 dump", Counter())


NCCL_PROFILE = Path(__file__).parent / "data/traces/capture-h200/ddp-iteration-rank0.kineto.json.gz"
"""One DDP iteration and a send on 2 H200s, NCCL 2.28 (see its SOURCES.md)."""


def test_nccl_calls_are_read_from_a_real_profile_and_timed_by_their_kernels():
    """On NCCL the calls come from record_param_comms and their times from the GPU kernels that ran them."""
    profile = read_profile(str(NCCL_PROFILE))
    skipped = Counter()
    issued = issued_from_comms(profile.comms, "profile", skipped)
    assert [(i.op, i.nbytes, i.group, i.peer_in_group) for i in issued] == [
        (Op.ALLREDUCE, 11_540_992 * 4, "0", None),  # DDP's first iteration: every gradient in one bucket
        (Op.SENDRECV, 8 * 4, "0", 1),
    ]
    spans = profile.compute + profile.work + profile.calls
    window = Window(min(s.start_ns for s in spans), max(s.end_ns for s in spans) + 1)
    events = assemble(issued, profile, {"0": ProcessGroup("0", (0, 1))}, 0, window, skipped)
    collectives = [e for e in events if isinstance(e, CollectiveEvent)]
    assert [(e.op, e.peer, e.stream) for e in collectives] == [
        (Op.ALLREDUCE, None, "nccl:0"),
        (Op.SENDRECV, 1, "nccl:0"),
    ]
    kernels = {w.op: w.end_ns - w.start_ns for w in profile.work}
    assert [e.end_us - e.start_us for e in collectives] == pytest.approx([kernels[e.op] / 1000 for e in collectives])
    compute = [e for e in events if isinstance(e, ComputeEvent)]
    assert profile.device == "cuda"
    assert compute and all(e.name.endswith("GPU ops") and e.stream.startswith("cuda:") for e in compute)
    assert all(isinstance(events[dep], ComputeEvent) for e in collectives for dep in e.after)
    assert not skipped


@given(st.text(max_size=40))
def test_op_of_reads_any_name_without_failing(name):
    """Unknown names are not collectives (None), never an exception."""
    assert op_of(name) is None or isinstance(op_of(name), Op)


if __name__ == "__main__":
    if sys.argv[1] == "jobs":
        # DDP and FSDP import the compiler stack (seconds): once here, not in each forked rank
        import torch._dynamo
        import torch.distributed.fsdp
        import torch.multiprocessing

        torch.multiprocessing.start_processes(
            _rank_main, args=(_free_port(), sys.argv[2]), nprocs=WORLD, start_method="fork"
        )
    elif sys.argv[1] == "train":
        _train_under_torchrun()
