"""Accuracy of the twin against real nccl-tests runs, before any calibration.

Every nccl-tests log in ``--data DIR`` (default: the repository's ``tests/data/nccl-tests``) is
predicted from the hardware its header describes (table ``RUNS`` below: preset, node and NIC
counts, GPUs per process, NCCL_ALGO/NCCL_PROTO as the file says), with NCCL's default choice for
everything the file did not force.  Printed:
per file, the median absolute % error of busbw for sizes ≥ 1 MiB and < 1 MiB; then, for the
L40S PCIe files with forced Ring/Tree and LL/LL128/Simple, how often the predicted order of the
variants matches the measured one (pairs measured within 3% of each other count as ties).

Then the same errors against this workplace's own measurements on 2 H200 GPUs
(``data/h200x2-allreduce.json``, made by ``nccl_sweep.py``: a machine no constant was set from
except ``protocol.ll_op_us`` and ``protocol.ll128_copy_factor`` (``twin.params``), which come from
``data/h200x2-channels.json``), timed from CUDA graphs, so without host launch costs.

    python benchmarks/accuracy.py [--data DIR]

A log whose file name is not in ``RUNS`` is skipped with a note (its hardware is not described);
a folder with no log in ``RUNS`` stops with one line and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path

from data_dir import default_path, missing

from traces.nccl_tests import NcclTestsLog, read_nccl_tests
from traces.task import Op
from tuner.config import Algo, Proto, parse_enum
from tuner.knobs import DEFAULT_NCCL_VERSION, OLDEST_NCCL_VERSION
from twin.placement import Communicator
from twin.predict import predict
from twin.topology import load_cluster

HERE = Path(__file__).resolve().parent
DATA = default_path("nccl-tests")
H200 = HERE / "data" / "h200x2-allreduce.json"
MIB = 1 << 20
TIE = 0.03
MODELLED_RELEASES = OLDEST_NCCL_VERSION


@dataclass(frozen=True)
class Run:
    """The hardware and launch one file describes."""

    topology: str
    nodes: int = 1
    nics_per_node: int | None = None
    gpus_per_process: int = 1
    knobs: dict = field(default_factory=dict)


FARMSHARE = str(HERE / "clusters" / "farmshare-l40s.yaml")
ABCI = str(HERE / "clusters" / "abci-a.yaml")
RUNS = {
    # ABCI 2.0 node (A): 8 A100 on NVSwitch, Intel Xeon hosts, 4 HDR NICs per node, one MPI rank per GPU.
    "abci-inter_anode-16gpu-2node-allreduce": Run(ABCI, nodes=2),
    "abci-inter_anode-16gpu-2node-broadcast": Run(ABCI, nodes=2),
    "abci-intra_anode-8gpu-1node-allreduce": Run(ABCI),
    # Azure ND H100 v5, single process driving 8 GPUs, NCCL_ALGO=NVLS.
    "azure-ndH100v5-8gpu-intranode-allreduce-NVLS-busbw-summary": Run(
        "dgx-h100", gpus_per_process=8, knobs={"algo": Algo.NVLS}),
    # Azure ND A100 v4: 8 HDR NICs per node; -g N within one node, one rank per GPU across nodes.
    "echo-azure-ndA100v4-allreduce-2gpu": Run("dgx-a100", gpus_per_process=2),
    "echo-azure-ndA100v4-allreduce-8gpu": Run("dgx-a100", gpus_per_process=8),
    "echo-azure-ndA100v4-allreduce-16gpu": Run("dgx-a100", nodes=2),
    "echo-azure-ndA100v4-allreduce-64gpu": Run("dgx-a100", nodes=8),
    "nvidia-dgxc-dgxh100-8gpu-intranode-allreduce-sample": Run("dgx-h100"),
    # vTrain: the launch is not recorded.  Its 2/4/8-GPU peaks (197, 222, 229 GB/s) keep the
    # ratios of a single process driving the GPUs (NCCL's direct pointers: 3, 2.67, 2.57
    # operations per byte), not of one process per GPU (4, 3.33, 3.14), so it runs as -g N.
    "vtrain-a100-2gpu-intranode-allreduce-LUT-1MiB-1GiB": Run("dgx-a100", gpus_per_process=2),
    "vtrain-a100-4gpu-intranode-allreduce-LUT-1MiB-1GiB": Run("dgx-a100", gpus_per_process=4),
    "vtrain-a100-8gpu-intranode-allreduce-LUT-1MiB-1GiB": Run("dgx-a100", gpus_per_process=8),
}
L40S_VARIANTS = {"ring": {"algo": Algo.RING}, "tree": {"algo": Algo.TREE}, "auto_ll": {"proto": Proto.LL},
                 "auto_ll128": {"proto": Proto.LL128}, "auto_simple": {"proto": Proto.SIMPLE}}
for _name, _knobs in L40S_VARIANTS.items():
    RUNS[f"stanford-farmshare-l40s-pcie-2gpu-allreduce-{_name}"] = Run(FARMSHARE, gpus_per_process=2, knobs=_knobs)
for _i in (1, 2, 3):
    RUNS[f"stanford-farmshare-l40s-pcie-2gpu-allreduce-iteration_{_i}"] = Run(FARMSHARE, gpus_per_process=2)


def knobs_from_env(log: NcclTestsLog) -> dict:
    """NCCL_ALGO / NCCL_PROTO the file reports, as forced knobs."""
    knobs = {}
    if "NCCL_ALGO" in log.env:
        knobs["algo"] = parse_enum(Algo, log.env["NCCL_ALGO"])
    if "NCCL_PROTO" in log.env:
        knobs["proto"] = parse_enum(Proto, log.env["NCCL_PROTO"])
    return knobs


def nccl_release(log: NcclTestsLog) -> tuple[int, int, int]:
    """The NCCL release whose choices the twin emulates: the file's, where the cost model knows
    it (2.8.3 and later), else the default (``DEFAULT_NCCL_VERSION``)."""
    if log.nccl_version:
        version = tuple(int(x) for x in log.nccl_version.split(".")[:3])
        if version >= MODELLED_RELEASES:
            return version  # type: ignore[return-value]
    return DEFAULT_NCCL_VERSION


def predict_file(path: Path) -> tuple[NcclTestsLog, list[tuple[int, float, float]]]:
    """(size, measured busbw, predicted busbw) for every row with a measurement."""
    log = read_nccl_tests(path)
    run = RUNS[path.stem]
    cluster = load_cluster(run.topology, nodes=run.nodes, nics_per_node=run.nics_per_node)
    comm = Communicator.first(cluster, log.nranks, gpus_per_process=run.gpus_per_process,
                              nccl_version=nccl_release(log))
    knobs = {**knobs_from_env(log), **run.knobs}
    out = []
    for row in log.rows:
        if row.nbytes == 0 or not row.busbw:
            continue
        p = predict(comm, log.op, row.nbytes, dtype=row.dtype, **knobs)
        # nccl-tests times calls issued back to back; one-way collectives overlap there.
        back_to_back = float(comm.schedule(p.task, p.config).back_to_back_us())
        out.append((row.nbytes, row.busbw, p.task.busbw_gbps(back_to_back)))
    return log, out


def predict_h200(path: Path = H200) -> dict[str, list[tuple[int, float, float]]]:
    """(size, measured busbw, predicted busbw) per NCCL_ALGO/NCCL_PROTO variant of our H200 sweep."""
    doc = json.loads(path.read_text())
    comm = Communicator.first(load_cluster(doc["topology"]), doc["nranks"], gpus_per_process=doc["gpus_per_process"],
                              nccl_version=tuple(int(x) for x in doc["nccl_version"].split(".")))
    out = {}
    for name, run in doc["runs"].items():
        knobs = {}
        if "NCCL_ALGO" in run["env"]:
            knobs["algo"] = parse_enum(Algo, run["env"]["NCCL_ALGO"])
        if "NCCL_PROTO" in run["env"]:
            knobs["proto"] = parse_enum(Proto, run["env"]["NCCL_PROTO"])
        points = []
        for row in run["rows"]:
            p = predict(comm, Op.ALLREDUCE, row["nbytes"], **knobs)
            points.append((row["nbytes"], p.task.busbw_gbps(row["graph_us"]), p.busbw_gbps))
        out[name] = points
    return out


def median_error(points, keep) -> float | None:
    errors = [abs(pred - meas) / meas * 100 for size, meas, pred in points if keep(size)]
    return statistics.median(errors) if errors else None


def order_agreement(results: dict[str, list[tuple[int, float, float]]]) -> tuple[int, int]:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA, metavar="DIR",
                        help=f"a folder of nccl-tests logs (default: {DATA})")
    args = parser.parse_args()
    logs = sorted(args.data.glob("*.txt")) if args.data.is_dir() else []
    known = [path for path in logs if path.stem in RUNS]
    if not known:
        problem = ("no such folder" if not args.data.is_dir() else "no nccl-tests logs (*.txt) in it" if not logs
                   else f"none of its {len(logs)} nccl-tests logs (*.txt) is described in RUNS")
        missing(f"{args.data}: {problem}")
    for path in logs:
        if path.stem not in RUNS:
            print(f"skipped {path.name}: not in RUNS (the hardware it ran on is not described)", file=sys.stderr)
    print(f"{'file':<66} {'n≥1MiB':>6} {'err≥1MiB':>9} {'n<1MiB':>6} {'err<1MiB':>9}  NCCL file/model")
    variants = {}
    for path in known:
        log, points = predict_file(path)
        big = median_error(points, lambda s: s >= MIB)
        small = median_error(points, lambda s: s < MIB)
        n_big = sum(s >= MIB for s, _, _ in points)
        fmt = lambda e: f"{e:8.1f}%" if e is not None else f"{'-':>9}"  # noqa: E731
        release = ".".join(map(str, nccl_release(log)[:2]))
        print(f"{path.stem:<66} {n_big:>6} {fmt(big)} {len(points) - n_big:>6} {fmt(small)}  "
              f"{log.nccl_version or '?'}/{release}")
        for name in L40S_VARIANTS:
            if path.stem.endswith(f"allreduce-{name}"):
                variants[name] = points
    matched, total = order_agreement(variants)
    if total:
        print(f"\nL40S PCIe variants ({', '.join(variants)}): predicted order matches measured at "
              f"{matched}/{total} sizes ({matched / total:.0%}); pairs within {TIE:.0%} count as ties")
    print(f"\n{'2x H200 NVLink (this workplace, CUDA-graph timed)':<66} {'n≥1MiB':>6} {'err≥1MiB':>9} "
          f"{'n<1MiB':>6} {'err<1MiB':>9}")
    for name, points in predict_h200().items():
        big = median_error(points, lambda s: s >= MIB)
        small = median_error(points, lambda s: s < MIB)
        n_big = sum(s >= MIB for s, _, _ in points)
        print(f"{'h200x2-allreduce-' + name:<66} {n_big:>6} {big:8.1f}% {len(points) - n_big:>6} {small:8.1f}%")


if __name__ == "__main__":
    main()
