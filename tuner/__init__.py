"""NCCL configuration space, search algorithms and the tuning store.

Importing this package never imports torch or SimPy.
"""

from tuner.config import Algo, Config, Proto, Subspace, Transport

__all__ = ["Algo", "Config", "Proto", "Subspace", "Transport"]
