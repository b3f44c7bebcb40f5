"""Read models, parallelism plans and workloads (a model plus a plan) from YAML or JSON, and the bundled presets.

A workload file names its model (a bundled one by name, or a mapping) and gives its parallelism
under ``plan:`` (the key of the file format; in code the plan is a ``Parallelism``)::

    name: autoccl-phi2
    description: Phi-2 on 32 GPUs, TP8 x DP4, as in the AutoCCL paper
    model: phi-2
    plan: {tp: 8, dp: 4, sequence_parallel: true, micro_batches: 16, micro_batch_size: 8}

A model file has ``kind: transformer`` (shape fields of ``Transformer``) or ``kind: cnn``
(``input: [C, H, W]`` with a VGG-style ``convs`` list and ``classifier`` widths, or explicit
``layers`` with ``params``, ``flops`` and ``activations`` per sample). Every field is checked;
an error names the file and the field (``plan.tp: 3 does not divide model.heads (32)``).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields
from os import PathLike
from pathlib import Path
from typing import Any

import yaml

from traces.errors import TraceError
from traces.generate.model import ATTENTION_KINDS, Cnn, CnnLayer, Model, Transformer, vgg_layers
from traces.generate.parallelism import Parallelism, PipelineSchedule, Recompute
from traces.task import DTYPE_BYTES
from traces.yaml_text import YamlError, read_yaml

__all__ = [
    "PRESETS_DIR",
    "Workload",
    "WorkloadError",
    "list_models",
    "list_presets",
    "load_model",
    "load_parallelism",
    "load_workload",
    "parse_overrides",
    "workload",
]

HERE = Path(__file__).parent
PRESETS_DIR = HERE / "presets"
MODELS_DIR = HERE / "models"


class WorkloadError(TraceError):
    """A model, plan or workload description that cannot be used as it stands."""


@dataclass(frozen=True)
class Workload:
    """A model and the parallelism it is trained with."""

    name: str
    model: Model
    parallelism: Parallelism
    description: str = ""


# ---- reading files -----------------------------------------------------------------------


def _read(path: str | PathLike[str]) -> dict[str, Any]:
    path = Path(path)
    try:
        if path.suffix != ".json":
            doc = read_yaml(path, str(path))
        else:
            doc = json.loads(path.read_bytes().decode("utf-8-sig"))
    except YamlError as err:
        raise WorkloadError(str(err).removeprefix(f"{path}: "), path) from None
    except OSError as err:
        raise WorkloadError(f"cannot read ({err.strerror or err})", path) from None
    except UnicodeDecodeError as err:
        raise WorkloadError(f"not UTF-8 text (byte {err.start})", path) from None
    except (json.JSONDecodeError, RecursionError) as err:
        raise WorkloadError(f"not valid JSON ({'nested too deep' if isinstance(err, RecursionError) else err})",
                            path) from None
    if not isinstance(doc, dict):
        raise WorkloadError(f"expected a mapping at the top, got {type(doc).__name__}", path)
    return doc


class _Fields:
    """Typed, checked access to one mapping; every error names the file and ``section.key``."""

    def __init__(self, obj: Any, path: str | None, section: str) -> None:
        self.path, self.section = path, section
        if not isinstance(obj, dict):
            self.fail(f"{section} must be a mapping, got {type(obj).__name__}")
        self.obj = obj

    def fail(self, problem: str):
        raise WorkloadError(problem, self.path)

    def where(self, key: str) -> str:
        return f"{self.section}.{key}"

    def only(self, allowed: set[str]) -> None:
        unknown = sorted(set(self.obj) - allowed)
        if unknown:
            self.fail(f"{self.where(unknown[0])}: unknown field; expected one of {', '.join(sorted(allowed))}")

    def integer(self, key: str, default: Any = ..., *, minimum: int = 1, nullable: bool = False) -> Any:
        if key not in self.obj or (nullable and self.obj[key] is None):
            if default is ...:
                self.fail(f"{self.where(key)}: missing")
            return default
        value = self.obj[key]
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(f"{self.where(key)}: must be an integer, got {value!r:.40}")
        if value < minimum:
            self.fail(f"{self.where(key)}: must be at least {minimum}, got {value}")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.obj.get(key, default)
        if not isinstance(value, bool):
            self.fail(f"{self.where(key)}: must be true or false, got {value!r:.40}")
        return value

    def choice(self, key: str, options: list[str], default: Any = ..., *, nullable: bool = False) -> Any:
        if key not in self.obj or (nullable and self.obj[key] is None):
            if default is ...:
                self.fail(f"{self.where(key)}: missing")
            return default
        value = self.obj[key]
        if value not in options:
            self.fail(f"{self.where(key)}: {value!r:.40} is not one of {', '.join(map(str, options))}")
        return value

    def text(self, key: str, default: Any = ...) -> Any:
        value = self.obj.get(key, default)
        if value is ...:
            self.fail(f"{self.where(key)}: missing")
        if not isinstance(value, str):
            self.fail(f"{self.where(key)}: must be a string, got {value!r:.40}")
        return value


_DTYPES = list(DTYPE_BYTES)
_TRANSFORMER_KEYS = {f.name for f in fields(Transformer)} | {"kind"}
_PARALLELISM_KEYS = {f.name for f in fields(Parallelism)} | {"world_size"}


def _transformer(f: _Fields) -> Transformer:
    f.only(_TRANSFORMER_KEYS)
    model = Transformer(
        name=f.text("name"),
        layers=f.integer("layers"),
        hidden=f.integer("hidden"),
        ffn=f.integer("ffn"),
        heads=f.integer("heads"),
        kv_heads=f.integer("kv_heads", f.obj.get("heads", 1)),
        vocab=f.integer("vocab"),
        seq_len=f.integer("seq_len"),
        dtype=f.choice("dtype", _DTYPES, "bfloat16"),
        gated_mlp=f.flag("gated_mlp", True),
        norm=f.choice("norm", ["rmsnorm", "layernorm"], "rmsnorm"),
        bias=f.flag("bias", False),
        tied_embeddings=f.flag("tied_embeddings", False),
        attention=f.choice("attention", list(ATTENTION_KINDS), "flash"),
    )
    if model.hidden % model.heads:
        f.fail(f"{f.where('heads')}: {model.heads} does not divide {f.where('hidden')} ({model.hidden})")
    if model.heads % model.kv_heads:
        f.fail(f"{f.where('kv_heads')}: {model.kv_heads} does not divide {f.where('heads')} ({model.heads})")
    return model


def _cnn(f: _Fields) -> Cnn:
    f.only({"kind", "name", "dtype", "input", "convs", "classifier", "layers", "input_elements"})
    name, dtype = f.text("name"), f.choice("dtype", _DTYPES, "float32")
    if "layers" in f.obj:
        if not isinstance(f.obj["layers"], list) or not f.obj["layers"]:
            f.fail(f"{f.where('layers')}: must be a non-empty list")
        layers = []
        for index, item in enumerate(f.obj["layers"]):
            layer = _Fields(item, f.path, f"{f.section}.layers[{index}]")
            layer.only({"name", "params", "flops", "activations"})
            layers.append(
                CnnLayer(
                    layer.text("name"), layer.integer("params", minimum=0), layer.integer("flops", minimum=0),
                    layer.integer("activations"),
                )
            )
        return Cnn(name, tuple(layers), f.integer("input_elements"), dtype)
    shape = f.obj.get("input")
    if not (isinstance(shape, list) and len(shape) == 3 and all(isinstance(v, int) and v > 0 for v in shape)):
        f.fail(f"{f.where('input')}: must be [channels, height, width], got {shape!r:.40}")
    convs, classifier = f.obj.get("convs"), f.obj.get("classifier")
    if not isinstance(convs, list) or not isinstance(classifier, list):
        f.fail(f"{f.section}: needs 'convs' and 'classifier' lists (or explicit 'layers')")
    if shape[1] != shape[2]:
        f.fail(f"{f.where('input')}: VGG-style layers need a square input, got {shape[1]}x{shape[2]}")
    try:
        layers = vgg_layers(shape[0], shape[1], convs, classifier)
    except ValueError as err:
        f.fail(f"{f.where('convs')}: {err}")
    return Cnn(name, layers, math.prod(shape), dtype)


def model_from_dict(doc: Any, path: str | None = None, section: str = "model") -> Model:
    """A model from its mapping (``kind: transformer`` or ``kind: cnn``)."""
    f = _Fields(doc, path, section)
    kind = f.choice("kind", ["transformer", "cnn"])
    return _transformer(f) if kind == "transformer" else _cnn(f)


def parallelism_from_dict(doc: Any, path: str | None = None, section: str = "plan") -> Parallelism:
    """A parallelism plan from its mapping; ``world_size``, when given, must equal dp·tp·pp·cp."""
    f = _Fields(doc, path, section)
    f.only(_PARALLELISM_KEYS)
    plan = Parallelism(
        dp=f.integer("dp", 1),
        tp=f.integer("tp", 1),
        pp=f.integer("pp", 1),
        cp=f.integer("cp", 1),
        sequence_parallel=f.flag("sequence_parallel", False),
        zero=f.choice("zero", [0, 1, 2, 3], 0),
        micro_batches=f.integer("micro_batches", 1),
        micro_batch_size=f.integer("micro_batch_size", 1),
        grad_bucket_bytes=f.integer("grad_bucket_bytes", None, nullable=True),
        first_grad_bucket_bytes=f.integer("first_grad_bucket_bytes", None, nullable=True),
        grad_dtype=f.choice("grad_dtype", _DTYPES, None, nullable=True),
        schedule=PipelineSchedule(f.choice("schedule", [s.value for s in PipelineSchedule], "1f1b")),
        recompute=Recompute(f.choice("recompute", [r.value for r in Recompute], "none")),
        embedding_allreduce=f.flag("embedding_allreduce", True),
        vocab_divisible_by=f.integer("vocab_divisible_by", 128),
        first_stage_layers=f.integer("first_stage_layers", None, minimum=0, nullable=True),
        last_stage_layers=f.integer("last_stage_layers", None, minimum=0, nullable=True),
        gpus_per_node=f.integer("gpus_per_node", 8),
        virtual_stages=f.integer("virtual_stages", 1),
        scatter_gather_pipeline=f.flag("scatter_gather_pipeline", True),
        pipeline_on_world=f.flag("pipeline_on_world", False),
    )
    world = f.integer("world_size", None, nullable=True)
    if world is not None and world != plan.world_size:
        f.fail(
            f"{f.where('world_size')}: {world} GPUs, but dp·tp·pp·cp = "
            f"{plan.dp}·{plan.tp}·{plan.pp}·{plan.cp} = {plan.world_size}"
        )
    return plan


def check_fit(model: Model, plan: Parallelism, path: str | None = None) -> None:
    """Raise ``WorkloadError`` if ``plan`` cannot split ``model`` (naming both fields)."""

    def fail(problem: str):
        raise WorkloadError(problem, path)

    if isinstance(model, Cnn):
        for key in ("tp", "pp", "cp"):
            if getattr(plan, key) != 1:
                fail(f"plan.{key}: a CNN is trained with data parallelism only, got {key} = {getattr(plan, key)}")
        if plan.zero or plan.sequence_parallel:
            fail("plan.zero: a CNN is trained with PyTorch DDP (zero 0, no sequence parallelism)")
        return
    divides = [
        ("tp", plan.tp, "heads", model.heads),
        ("tp", plan.tp, "kv_heads", model.kv_heads),
        ("tp", plan.tp, "ffn", model.ffn),
        ("cp", plan.cp, "seq_len", model.seq_len),
    ]
    if plan.virtual_stages > 1:
        if plan.first_stage_layers is not None or plan.last_stage_layers is not None:
            fail("plan.virtual_stages: interleaved stages hold equal layer counts; drop first/last_stage_layers")
        if model.layers % (plan.pp * plan.virtual_stages):
            fail(f"plan.virtual_stages: pp·virtual_stages = {plan.pp}·{plan.virtual_stages} does not divide "
                 f"model.layers ({model.layers})")
        if plan.micro_batches % plan.pp:
            fail(f"plan.micro_batches: the interleaved schedule needs a multiple of pp = {plan.pp}, "
                 f"got {plan.micro_batches}")
        if plan.pp < 3:
            fail(f"plan.virtual_stages: the interleaved schedule needs pp > 2, got pp = {plan.pp} (Megatron-LM: "
                 "with two stages one batched exchange would hold two sends and two receives between the same ranks)")
    elif plan.first_stage_layers is None and plan.last_stage_layers is None:
        divides.append(("pp", plan.pp, "layers", model.layers))
    elif plan.stage_layers(model.layers) is None:
        fail(
            f"plan.first_stage_layers: {plan.first_stage_layers} first and {plan.last_stage_layers} last of "
            f"model.layers ({model.layers}) leave a number the other {plan.pp} stage(s) cannot share evenly"
        )
    for key, degree, field, value in divides:
        if value % degree:
            fail(f"plan.{key}: {degree} does not divide model.{field} ({value})")
    if plan.sequence_parallel and (model.seq_len // plan.cp) % plan.tp:
        fail(
            f"plan.sequence_parallel: the sequence per context-parallel rank ({model.seq_len // plan.cp}) "
            f"does not split over tp = {plan.tp}"
        )
    if plan.zero and plan.dp * plan.cp == 1:
        fail("plan.zero: ZeRO shards over data parallelism, but dp·cp = 1")


# ---- names and files ---------------------------------------------------------------------


def list_presets() -> list[str]:
    """Names of the bundled workloads (``traces/generate/presets/*.yaml``)."""
    return sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))


def list_models() -> list[str]:
    """Names of the bundled models (``traces/generate/models/*.yaml``)."""
    return sorted(p.stem for p in MODELS_DIR.glob("*.yaml"))


def _named(name: str, directory: Path, what: str, names: list[str]) -> Path:
    candidate = Path(name)
    if candidate.suffix in (".yaml", ".yml", ".json") or candidate.exists():
        return candidate
    if name not in names:
        raise WorkloadError(f"unknown {what} {name!r}; bundled ones: {', '.join(names)} (or give a file)")
    return directory / f"{name}.yaml"


def load_model(name_or_path: str | PathLike[str]) -> Model:
    """A bundled model by name (``phi-2``) or a model file."""
    path = _named(str(name_or_path), MODELS_DIR, "model", list_models())
    return model_from_dict(_read(path), str(path), "model")


def load_parallelism(path: str | PathLike[str], overrides: dict[str, Any] | None = None) -> Parallelism:
    """A plan file (the parallelism's fields at the top, or under ``plan:``), with fields replaced by
    ``overrides``."""
    doc = _read(path)
    section = doc.get("plan", doc) if isinstance(doc.get("plan"), dict) else doc
    return parallelism_from_dict({**section, **(overrides or {})}, str(path), "plan")


def load_workload(path: str | PathLike[str], overrides: dict[str, Any] | None = None) -> Workload:
    """A workload file: ``name``, ``description``, ``model`` (a name or a mapping), ``plan``."""
    path = str(path)
    doc = _read(path)
    top = _Fields(doc, path, "workload")
    top.only({"name", "description", "model", "plan"})
    spec = doc.get("model")
    if isinstance(spec, str):
        model = load_model(spec)
    elif isinstance(spec, dict) and "base" in spec:
        model = _derived_model(spec, path)
    else:
        model = model_from_dict(spec, path, "model")
    section = dict(doc.get("plan") or {})
    if overrides and {"dp", "tp", "pp", "cp"} & set(overrides) and "world_size" not in overrides:
        section.pop("world_size", None)  # the file's GPU count described the degrees being replaced
    plan = parallelism_from_dict({**section, **(overrides or {})}, path, "plan")
    check_fit(model, plan, path)
    return Workload(top.text("name", Path(path).stem), model, plan, top.text("description", ""))


def _derived_model(spec: dict[str, Any], path: str) -> Model:
    """``model: {base: llama-3.1-405b, seq_len: 131072}``: a bundled transformer with fields changed."""
    base = load_model(str(spec["base"]))
    if not isinstance(base, Transformer):
        raise WorkloadError(f"model.base: {spec['base']!r} is not a transformer; only transformers can be varied", path)
    changes = {key: value for key, value in spec.items() if key != "base"}
    return model_from_dict({"kind": "transformer", **asdict(base), **changes}, path, "model")


def workload(
    preset: str | None = None,
    *,
    model: str | None = None,
    parallelism: str | None = None,
    overrides: dict[str, Any] | None = None,
) -> Workload:
    """A bundled preset (or workload file), or a model with a plan file (``parallelism``);
    ``overrides`` replace fields of the parallelism."""
    if preset is not None:
        if model is not None or parallelism is not None:
            raise WorkloadError("give a preset, or a model and a plan, not both")
        return load_workload(_named(preset, PRESETS_DIR, "preset", list_presets()), overrides)
    if model is None or parallelism is None:
        raise WorkloadError("give a preset, or both a model and a plan")
    the_model, the_plan = load_model(model), load_parallelism(parallelism, overrides)
    check_fit(the_model, the_plan, parallelism)
    name = f"{getattr(the_model, 'name', model)}-{Path(parallelism).stem}"
    return Workload(name, the_model, the_plan)


def parse_overrides(settings: list[str]) -> dict[str, Any]:
    """Plan fields from ``FIELD=VALUE`` settings, values read as YAML scalars.

    >>> parse_overrides(["micro_batches=4", "sequence_parallel=false"])
    {'micro_batches': 4, 'sequence_parallel': False}
    """
    overrides = {}
    for setting in settings:
        key, sep, value = setting.partition("=")
        if not sep or not key.strip():
            raise WorkloadError(f"--set takes FIELD=VALUE, got {setting!r}")
        overrides[key.strip()] = yaml.safe_load(value)
    return overrides
