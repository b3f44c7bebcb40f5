"""The physics of an NCCL collective: protocols, communicator geometry, algorithm schedules.

Both engines (the closed-form fast path and the SimPy simulation) read the same schedule,
so they cannot drift apart.
"""
