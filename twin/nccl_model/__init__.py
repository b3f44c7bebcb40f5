"""What stock NCCL would do: its cost model, algorithm/protocol choice and resources.

``inputs.NcclCommInfo`` describes a communicator as NCCL sees it after its topology
search; ``search.comm_info`` derives one from a :class:`twin.topology.Cluster`.
``cost_table`` reproduces the table NCCL hands a tuner plugin and ``nccl_choice`` the
whole default decision (algorithm, protocol, channels, threads, chunk), each as the
communicator's NCCL release (2.8.3 – 2.30.7) makes it: ``releases`` holds what changed when.
Where ``NcclCommInfo.tuner_config`` names a tuner config (Google's gIB tables, ``gib_tuner``), the
choice is NCCL's with that plugin's answer applied.
"""

from twin.nccl_model.cost_table import cost_table
from twin.nccl_model.inputs import NcclCommInfo, PathType
from twin.nccl_model.select import NcclChoice, default_resources, nccl_choice

__all__ = ["NcclChoice", "NcclCommInfo", "PathType", "cost_table", "default_resources", "nccl_choice"]
