"""The SimPy engine: collectives as processes, links as capacity shared between them."""

from twin.des.engine import CollectiveRun, lumped_bytes, lumped_cap_gbps, simulate
from twin.des.network import FluidNetwork, Transfer

__all__ = ["CollectiveRun", "FluidNetwork", "Transfer", "lumped_bytes", "lumped_cap_gbps", "simulate"]
