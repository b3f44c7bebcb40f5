"""The SimPy engine: collectives as processes, links as capacity shared between them."""

from twin.des.engine import CollectiveRun, simulate

__all__ = ["CollectiveRun", "simulate"]
