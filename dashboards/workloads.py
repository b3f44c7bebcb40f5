"""The workload of a what-if: a bundled example, one generated from a model and a parallelism plan,
or an uploaded trace file.

A bundled example and a generated workload carry their plan, so a sweep over node counts can
grow the job with the cluster (``scaled``: more data-parallel replicas, more tokens per
iteration); an uploaded trace is fixed at the world size it was recorded on.

>>> choice = WorkloadChoice.example("vgg19-dp32")
>>> trace = choice.trace()
>>> trace.world_size, choice.scaled(64).trace().world_size
(32, 64)
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from dashboards.inputs import InputError, decode_upload
from dashboards.twin_api import ParallelismPlan
from traces.errors import TraceError
from traces.examples import EXAMPLES
from traces.examples import path as example_path
from traces.generate import Workload, generate, load_model, workload
from traces.generate.workload import check_fit
from traces.schema import Trace
from traces.trace_file import load_trace


@dataclass(frozen=True)
class WorkloadChoice:
    """What to replay: ``work`` (a model and its plan), or a fixed ``fixed_trace``; ``name`` for reports."""

    name: str
    work: Workload | None = None
    fixed_trace: Trace | None = None
    bundled: str | None = None
    """The bundled example's name, whose shipped file is read instead of generating it again."""

    @classmethod
    def example(cls, name: str) -> WorkloadChoice:
        """A bundled example trace (``traces.examples``), with the workload it was generated from."""
        if name not in EXAMPLES:
            raise InputError(f"unknown example trace {name!r}; bundled ones: {', '.join(sorted(EXAMPLES))}")
        preset, overrides = EXAMPLES[name]
        return cls(name, workload(preset, overrides=overrides), bundled=name)

    @classmethod
    def generated(cls, model: str, **plan_fields) -> WorkloadChoice:
        """A bundled model (``traces.generate.list_models``) trained with a parallelism plan."""
        the_model = load_model(model)
        plan = ParallelismPlan(**plan_fields)
        check_fit(the_model, plan)
        degrees = "".join(f"{k}{v}" for k, v in (("tp", plan.tp), ("pp", plan.pp), ("dp", plan.dp)) if v > 1)
        name = f"{model}-{degrees or 'single'}"
        return cls(name, Workload(name, the_model, plan))

    @classmethod
    def uploaded(cls, filename: str, content: bytes) -> WorkloadChoice:
        """A trace file's bytes (gzip or not); errors name ``filename``, not a temporary file."""
        suffix = ".json.gz" if content[:2] == b"\x1f\x8b" else ".json"
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / f"upload{suffix}"
            path.write_bytes(content)
            try:
                trace = load_trace(path)
            except TraceError as err:
                raise InputError(str(err).replace(str(path), f"upload {filename!r}")) from None
        stem = Path(filename).name.removesuffix(".gz").removesuffix(".json") or "upload"
        return cls(stem, fixed_trace=trace)

    @property
    def world_size(self) -> int:
        return self.trace().world_size if self.work is None else self.work.parallelism.world_size

    def trace(self) -> Trace:
        """The trace to replay (generated each call for a workload that is not a bundled file)."""
        if self.fixed_trace is not None:
            return self.fixed_trace
        if self.bundled is not None:
            return load_trace(example_path(self.bundled))
        return generate(self.work)

    def scaled(self, gpus: int) -> WorkloadChoice:
        """The job grown (or shrunk) to ``gpus`` GPUs by its data-parallel degree: the same per-GPU
        work, more replicas. Raises ``InputError`` when the other degrees do not divide ``gpus`` or
        the workload is a fixed trace."""
        if self.work is None:
            raise InputError(f"{self.name}: an uploaded trace has a fixed world size ({self.world_size} ranks); "
                             "it cannot be scaled to another GPU count")
        plan = self.work.parallelism
        per_replica = plan.tp * plan.pp * plan.cp
        if gpus % per_replica:
            raise InputError(f"{self.name}: {gpus} GPUs do not hold whole replicas of tp·pp·cp = {per_replica}")
        if gpus == plan.world_size:
            return self
        new_plan = replace(plan, dp=gpus // per_replica)
        work = replace(self.work, parallelism=new_plan, name=f"{self.work.name}-dp{new_plan.dp}")
        return WorkloadChoice(f"{self.name} (dp {new_plan.dp})", work)


def read_upload(filename: str, data_url: str | None) -> WorkloadChoice:
    """A ``dcc.Upload`` value (``data:...;base64,...``) as an uploaded workload."""
    return WorkloadChoice.uploaded(filename, decode_upload(filename, data_url))
