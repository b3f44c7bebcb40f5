"""What a trace asks of the network: its distinct tasks, how often, how many bytes, what share."""

from __future__ import annotations

from typing import Any

from traces.schema import Trace

__all__ = ["describe", "format_summary", "human_bytes", "summarize"]


def summarize(trace: Trace) -> dict[str, Any]:
    """Tasks sorted by bytes per iteration, with counts, bytes and share of the traffic.

    ``bytes_per_iteration`` is calls × ``nbytes`` (nccl-tests' size, not bytes on the wire).
    """
    tasks = trace.tasks()
    total = sum(count * task.nbytes for task, count in tasks.items())
    rows = [
        {
            "op": task.op.value,
            "nbytes": task.nbytes,
            "dtype": task.dtype,
            "nranks": task.nranks,
            "group": task.group,
            "count_per_iteration": count,
            "bytes_per_iteration": count * task.nbytes,
            "share": count * task.nbytes / total if total else 0.0,
        }
        for task, count in tasks.items()
    ]
    rows.sort(key=lambda row: (-row["bytes_per_iteration"], row["op"], row["nbytes"]))
    return {
        "source": trace.source,
        "world_size": trace.world_size,
        "ranks_in_trace": len(trace.ranks),
        "iterations": trace.iterations,
        "collective_calls": sum(1 for _ in trace.collectives()),
        "calls_without_size": trace.unsized(),
        "bytes_per_iteration": total,
        "tasks": rows,
    }


def describe(trace: Trace) -> str:
    """One line on what a trace holds: ranks, events, distinct tasks."""
    events = sum(len(r.events) for r in trace.ranks)
    return f"{len(trace.ranks)} rank(s) in the trace, {events} events, {len(trace.tasks())} distinct tasks"


def human_bytes(n: float) -> str:
    """``human_bytes(8 << 20) == "8 MiB"``; binary units, as nccl-tests sizes are."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if n == int(n) else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def format_summary(summary: dict[str, Any]) -> str:
    """The summary as a plain-text table."""
    lines = [
        f"source: {summary['source'] or 'unknown'}; world size {summary['world_size']}, "
        f"{summary['ranks_in_trace']} rank(s) in the trace, {summary['iterations']} iteration(s), "
        f"{summary['collective_calls']} collective calls on those ranks",
    ]
    if summary["calls_without_size"]:
        lines.append(
            f"{summary['calls_without_size']} call(s) have no recorded size and are not in the table"
        )
    header = ("op", "size", "dtype", "ranks", "group", "calls/iter", "bytes/iter", "share")
    table = [
        (
            row["op"],
            human_bytes(row["nbytes"]),
            row["dtype"],
            str(row["nranks"]),
            row["group"],
            f"{row['count_per_iteration']:g}",
            human_bytes(row["bytes_per_iteration"]),
            f"{100 * row['share']:.1f}%",
        )
        for row in summary["tasks"]
    ]
    widths = [max(len(cells[i]) for cells in [header, *table]) for i in range(len(header))]
    for cells in [header, *table]:
        lines.append(
            "  ".join(
                cell.rjust(width) if i in (1, 3, 5, 6, 7) else cell.ljust(width)
                for i, (cell, width) in enumerate(zip(cells, widths, strict=True))
            ).rstrip()
        )
    lines.append(
        f"total: {human_bytes(summary['bytes_per_iteration'])} per iteration in {len(table)} task(s)"
    )
    return "\n".join(lines)
