"""Capture a running PyTorch job's collectives into one ccltwin trace.

Every collective the job's process groups run is recorded, whoever issued it (``dist.*``,
DDP's reducer, FSDP, functional collectives), with its size, group and duration, and the
compute between collectives. In a script, on every rank::

    with traces.capture.capture("job.trace.json", iterations=3, warmup=1) as cap:
        for batch in loader:
            train_step(batch)
            cap.step()

or with no change to the script, under torchrun (an iteration ends at each optimizer step)::

    torchrun --nproc-per-node 2 -m traces.capture -o job.trace.json --iterations 3 train.py

which ``ccltwin trace capture`` launches for you. Importing this package never imports torch;
a capture imports it when it starts. How it works: ``traces.capture.session``.
"""

from traces.capture.session import Capture, capture

__all__ = ["Capture", "capture"]
