"""``ccltwin simulate``: nccl-tests-like predictions for a collective over a range of sizes."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from ccltwin.nccl_release import DEFAULT_VERSION_TEXT, NcclVersionOption, nccl_version_of
from ccltwin.profiles import ProfileOption, params_of
from ccltwin.tuners import TunerConfigOption, TunerOption, tuner_overrides
from traces.errors import CcltwinError
from traces.task import parse_dtype, parse_op, whole_elements
from traces.units import SIZE_RULE, parse_size, parse_size_range
from tuner.config import Algo, Proto, Transport, parse_enum
from tuner.space import check_forced_resources
from twin.model.host import NCCL_TESTS_ITERS
from twin.placement import Communicator
from twin.predict import Prediction, predict
from twin.topology import load_cluster
from twin.topology.summary import tuner_facts, tuner_line

HEADER = (f"{'size':>12} {'count':>12} {'type':>8} {'time':>10} {'repeated':>10} {'algbw':>8} {'busbw':>8}  "
          f"{'algo':<14} {'proto':<6} {'transport':<9} {'nch':>3} {'nthr':>4} {'chunk':>8}  chosen_by")
DTYPE_HELP = ("Element type: float32 (float, fp32), float16 (half, fp16), bfloat16 (bf16), float64 (double), int8, "
              "uint8, int32, uint32, int64, uint64, fp8_e4m3, fp8_e5m2.")
SIZE_UNITS = f"{SIZE_RULE}; each size a whole number of --dtype elements."
UNITS = f"{'(B)':>12} {'(elements)':>12} {'':>8} {'(us)':>10} {'(us)':>10} {'(GB/s)':>8} {'(GB/s)':>8}"
ITERS_HELP = ("Calls timed back to back per size, as nccl-tests' -n (default 20): the 'repeated' column is the time "
              "per call of that loop, what nccl-tests' time column measures (down a Broadcast/Reduce chain the calls "
              "overlap, so it is less than 'time', one call's latency); algbw and busbw are one call's.")


def _row(p: Prediction) -> str:
    c = p.config
    return (f"{p.task.nbytes:>12} {p.task.count:>12} {p.task.dtype:>8} {p.time_us:>10.2f} {p.repeated_us:>10.2f} "
            f"{p.algbw_gbps:>8.2f} {p.busbw_gbps:>8.2f}  {c.algo:<14} {c.proto:<6} {c.transport:<9} {c.nchannels:>3} "
            f"{c.nthreads:>4} {c.chunk_bytes:>8}  {p.chosen_by}")


def simulate(
    topology: Annotated[str, typer.Option(help="Preset name or cluster YAML file.")],
    op: Annotated[str, typer.Option(help="allreduce, allgather, reducescatter, broadcast, reduce, alltoall, sendrecv")],
    nranks: Annotated[int | None, typer.Option(help="Ranks in the communicator (default: every GPU).")] = None,
    sizes: Annotated[str, typer.Option(help="MIN:MAX[:FACTOR] or a comma list, e.g. 8B:8GiB; " + SIZE_UNITS)
                     ] = "8B:8GiB",
    nodes: Annotated[int | None, typer.Option(help="Override the preset's node count.")] = None,
    gpus_per_node: Annotated[int | None, typer.Option(help="Use the first G GPUs of each node.")] = None,
    nics_per_node: Annotated[int | None, typer.Option(help="Keep the first K NICs of each node.")] = None,
    nic_gbps: Annotated[float | None, typer.Option(help="Line rate of every NIC, Gb/s.")] = None,
    algo: Annotated[str | None, typer.Option(help="Force an algorithm (ring, tree, nvls, ...).")] = None,
    proto: Annotated[str | None, typer.Option(help="Force a protocol (ll, ll128, simple).")] = None,
    transport: Annotated[str | None, typer.Option(help="Intra-node transport: p2p, shm or net.")] = None,
    nchannels: Annotated[int | None, typer.Option(min=1, max=255, help="Channels (CTAs).")] = None,
    nthreads: Annotated[int | None, typer.Option(min=32, max=640, help="Threads per channel (a multiple of 32).")
                        ] = None,
    chunk: Annotated[str | None, typer.Option(help="Chunk size, e.g. 512KiB.")] = None,
    dtype: Annotated[str, typer.Option(help=DTYPE_HELP)] = "float32",
    engine: Annotated[str, typer.Option(help="fast (closed form) or des (SimPy).")] = "fast",
    gpus_per_process: Annotated[int, typer.Option(min=1, help="GPUs driven by one host thread (nccl-tests -g).")
                                ] = 1,
    profile: ProfileOption = None,
    iters: Annotated[int, typer.Option(min=1, help=ITERS_HELP)] = NCCL_TESTS_ITERS,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array, one object per size.")] = False,
    nccl_version: NcclVersionOption = DEFAULT_VERSION_TEXT,
    tuner: TunerOption = None,
    tuner_config: TunerConfigOption = None,
) -> None:
    """Predict a collective over a range of sizes, like an nccl-tests run on the cluster.

    Options not given mean "what NCCL would choose".
    """
    if nthreads is not None and nthreads % 32:
        raise typer.BadParameter(f"{nthreads} is not a multiple of 32 (a warp)", param_hint="--nthreads")
    version = nccl_version_of(nccl_version)
    params, constants = params_of(profile)
    cluster = load_cluster(topology, nodes=nodes, gpus_per_node=gpus_per_node, nics_per_node=nics_per_node,
                           nic_gbps=nic_gbps, **tuner_overrides(tuner, tuner_config))
    if cluster.gpus_per_node % gpus_per_process:
        raise CcltwinError(f"--gpus-per-process {gpus_per_process}: one process drives whole shares of a node's "
                           f"{cluster.gpus_per_node} GPUs")
    comm = Communicator.first(cluster, nranks, gpus_per_process=gpus_per_process, params=params,
                              nccl_version=version)
    knobs = {
        "algo": parse_enum(Algo, algo) if algo else None,
        "proto": parse_enum(Proto, proto) if proto else None,
        "transport": parse_enum(Transport, transport) if transport else None,
        "nchannels": nchannels, "nthreads": nthreads,
        "chunk_bytes": parse_size(chunk) if chunk else None,
    }
    the_op = parse_op(op)
    the_dtype = parse_dtype(dtype)
    the_sizes = parse_size_range(sizes)
    for n in the_sizes:
        whole_elements(n, the_dtype, f"--sizes {sizes}")
    predictions = [predict(comm, the_op, n, dtype=the_dtype, engine=engine, iters=iters, **knobs) for n in the_sizes]
    for p in predictions:
        check_forced_resources(p.config, knobs, comm.nccl.nccl_version)
    if as_json:
        typer.echo(json.dumps([p.as_dict() for p in predictions], indent=1))
        return
    typer.echo(f"# ccltwin simulate: {the_op} on {cluster.name}, {comm.nranks} ranks "
               f"({cluster.nodes} node(s) x {cluster.gpus_per_node} {cluster.gpu.model}), NCCL {nccl_version}, "
               f"tuner {tuner_line(tuner_facts(cluster))}, {constants}; predicted, not measured")
    typer.echo("#" + HEADER[1:])
    typer.echo("#" + UNITS[1:])
    for p in predictions:
        typer.echo(_row(p))
