"""The events one rank of a data-parallel CNN training job (PyTorch DDP) issues in an iteration.

Each micro-batch runs the layers forward, then backward in reverse (input and weight
gradients: twice the forward FLOPs). Gradients accumulate locally until the last micro-batch
(DDP's ``no_sync``); in its backward each bucket is all-reduced as soon as its last layer's
gradient is ready, overlapping the rest of the backward. The optimizer waits for every bucket.
"""

from __future__ import annotations

from traces.generate.buckets import Bucket, GradUnit, assign_buckets
from traces.generate.events import RankEvents
from traces.generate.model import Cnn
from traces.generate.parallelism import Layout, Parallelism
from traces.task import DTYPE_BYTES, Op

__all__ = ["CnnRank"]

SGD_FLOPS_PER_PARAM = 4
SGD_BYTES_PER_PARAM = 16  # weight, gradient and momentum read, weight and momentum written


class CnnRank:
    """Builds one rank's events; ``build(iterations)`` returns them."""

    def __init__(self, model: Cnn, plan: Parallelism, rank: int) -> None:
        self.model, self.parallelism = model, plan
        self.group = Layout(plan).grad_group(rank)
        self.out = RankEvents(rank)
        self.db = DTYPE_BYTES[plan.grad_dtype or model.dtype]
        units = [GradUnit(layer.name, layer.params) for layer in reversed(model.layers)]
        self.buckets: list[Bucket] = assign_buckets(
            units, self.db, plan.grad_bucket_bytes, plan.first_grad_bucket_bytes
        )
        self.closing = {bucket.units[-1]: index for index, bucket in enumerate(self.buckets)}
        """Backward position of a bucket's last layer → the bucket, reduced right after that layer."""
        self.grad_dtype = plan.grad_dtype or model.dtype

    def _mem(self, index: int) -> int:
        """Bytes a layer's forward moves for a micro-batch: weights, input and output activations."""
        layers, b = self.model.layers, self.parallelism.micro_batch_size
        inputs = layers[index - 1].activations if index else self.model.input_elements
        return (layers[index].params + b * (inputs + layers[index].activations)) * DTYPE_BYTES[self.model.dtype]

    def build(self, iterations: int) -> RankEvents:
        out, layers, b = self.out, self.model.layers, self.parallelism.micro_batch_size
        gate: tuple[int | None, ...] = ()
        for iteration in range(iterations):
            out.iteration = iteration
            reductions: list[int | None] = []
            for micro_batch in range(self.parallelism.micro_batches):
                for index, layer in enumerate(layers):
                    out.compute(f"{layer.name}.fwd", b * layer.flops, self._mem(index), *gate)
                    gate = ()
                last = micro_batch == self.parallelism.micro_batches - 1
                for k, layer in enumerate(reversed(layers)):
                    ready = out.compute(f"{layer.name}.bwd", 2 * b * layer.flops, 2 * self._mem(len(layers) - 1 - k))
                    if last and k in self.closing:
                        index = self.closing[k]
                        reductions.append(
                            out.collective(
                                Op.ALLREDUCE, self.buckets[index].params * self.db, self.group, self.grad_dtype,
                                f"dp-grads.bucket{index}", ready,
                            )
                        )
            params = self.model.params()
            gate = (out.compute("optimizer", SGD_FLOPS_PER_PARAM * params, SGD_BYTES_PER_PARAM * params, *reductions),)
        return out
