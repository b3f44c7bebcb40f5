"""Generate training traces from a model and a parallelism plan.

>>> from traces.generate import generate, workload
>>> trace = generate(workload("autoccl-phi2"))
>>> sorted((t.op.value, t.nbytes >> 20, t.nranks, c) for t, c in trace.tasks().items() if t.nbytes >> 20 >= 80)
[('allgather', 80, 8, 3120.0), ('allreduce', 80, 8, 16.0), ('allreduce', 632, 4, 1.0), ('reducescatter', 80, 8, 2064.0)]
"""

from traces.generate.generator import generate, job_flops
from traces.generate.model import Cnn, CnnLayer, Transformer, vgg_layers
from traces.generate.parallelism import Layout, Parallelism, PipelineSchedule, Recompute
from traces.generate.workload import (
    Workload,
    WorkloadError,
    list_models,
    list_presets,
    load_model,
    load_parallelism,
    load_workload,
    workload,
)

__all__ = [
    "Cnn",
    "CnnLayer",
    "Layout",
    "Parallelism",
    "PipelineSchedule",
    "Recompute",
    "Transformer",
    "Workload",
    "WorkloadError",
    "generate",
    "job_flops",
    "list_models",
    "list_presets",
    "load_model",
    "load_parallelism",
    "load_workload",
    "vgg_layers",
    "workload",
]
