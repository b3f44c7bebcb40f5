"""The digital twin: cluster topology, NCCL's default choice, the physics model and its engines.

Importing this package never imports torch.
"""
