"""What a profiled GPU kernel computes: its category, shape and dtype (``traces.schema.ComputeEvent``).

The PyTorch op that launched a kernel says it best: ``aten::mm``/``addmm``/``bmm``/``baddbmm``/
``linear``/``matmul`` are matrix multiplies whose ``Input Dims`` give ``(m, n, k)`` or
``(batch, m, n, k)``; ``_scaled_dot_product_flash_attention`` and its kin (and their backward
ops) are fused attention of shape ``(batch, heads, seq_q, seq_kv, head_dim)``.  Without such
an op, the kernel's name tells the category (cuBLAS/CUTLASS GEMMs, flash/fmha attention,
``multi_tensor_apply`` optimizer steps, element-wise, reduction, norm, softmax and copy kernels
as memory-bound); a kernel neither says (a convolution, even one run as an implicit GEMM; a custom
kernel) has no category.

``flops``: ``2·m·n·k`` per GEMM (times batch); attention forward ``4·b·h·s_q·s_kv·d`` (its two
matrix multiplies), backward 2.5 times that (five of them; Dao, FlashAttention-2, 2023, §3)::

    >>> op_work("aten::addmm", {"Input Dims": [[4096], [8, 1024], [1024, 4096], [], []],
    ...                         "Input type": ["c10::BFloat16"] * 3 + ["Scalar", "Scalar"]})
    Work(category='gemm', shape=(8, 4096, 1024), dtype='bfloat16', flops=67108864.0)
    >>> op_work("aten::_scaled_dot_product_flash_attention",
    ...         {"Input Dims": [[2, 16, 512, 64]] * 3, "Input type": ["c10::Half"] * 3}).shape
    (2, 16, 512, 512, 64)
    >>> kernel_category("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_nn", "kernel")
    'gemm'
    >>> kernel_category("sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw", "kernel") is None
    True
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from typing import Any

from traces.kineto_calls import CPP_SCALAR_TYPES

__all__ = ["COMPUTE_OPS", "Work", "kernel_category", "op_work"]

# torch ScalarType names → Task dtypes (the subset a compute kernel works in)
_SCALAR_DTYPES = {
    "Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16", "Char": "int8",
    "Byte": "uint8", "Int": "int32", "Long": "int64", "Float8_e4m3fn": "fp8_e4m3", "Float8_e5m2": "fp8_e5m2",
}
_GEMMS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::linear", "aten::matmul", "aten::_scaled_mm"}
# attention ops → (layout of q/k: "bhsd" or "bshd", index of q among the inputs, backward?)
_ATTENTION = {
    "aten::_scaled_dot_product_flash_attention": ("bhsd", 0, False),
    "aten::_scaled_dot_product_efficient_attention": ("bhsd", 0, False),
    "aten::_scaled_dot_product_cudnn_attention": ("bhsd", 0, False),
    "aten::_flash_attention_forward": ("bshd", 0, False),
    "aten::_efficient_attention_forward": ("bshd", 0, False),
    "aten::_scaled_dot_product_flash_attention_backward": ("bhsd", 1, True),
    "aten::_scaled_dot_product_efficient_attention_backward": ("bhsd", 1, True),
    "aten::_scaled_dot_product_cudnn_attention_backward": ("bhsd", 1, True),
    "aten::_flash_attention_backward": ("bshd", 1, True),
    "aten::_efficient_attention_backward": ("bshd", 1, True),
}
COMPUTE_OPS = frozenset(_GEMMS | set(_ATTENTION))
"""The ops whose ``Input Dims`` give a kernel's shape."""
ATTENTION_BACKWARD_FLOPS = 2.5
"""Backward over forward FLOPs of attention: 5 matrix multiplies against 2 (FlashAttention-2, §3)."""

_KERNEL_CATEGORIES = (  # (pattern on the kernel name, category), first match wins
    (re.compile(r"conv|fprop|dgrad|wgrad|winograd", re.I), None),  # convolutions (implicit GEMMs): no category
    (re.compile(r"flash|fmha|attention|_attn", re.I), "attention"),
    (re.compile(r"gemm|cutlass|cublas|matmul|xmma|nvjet", re.I), "gemm"),
    (re.compile(r"multi_tensor_apply|adam|fused_sgd|lamb(?!da)", re.I), "optimizer"),  # not "lambda"
    (re.compile(r"elementwise|reduce|norm|softmax|dropout|copy|fill|cat_|index|gather|scatter|memcpy|memset"
                r"|transpose|permute|embedding", re.I), "memory"),
)


@dataclass(frozen=True)
class Work:
    """What a kernel computes: ``category`` (``COMPUTE_CATEGORIES``), ``shape``, ``dtype``, ``flops``."""

    category: str
    shape: tuple[int, ...] = ()
    dtype: str | None = None
    flops: float | None = None


@functools.lru_cache(maxsize=4096)  # a profile launches a few hundred distinct kernels many times each
def kernel_category(name: str, cat: str) -> str | None:
    """The category a kernel's name (or its trace category: memcpy, memset) says, or ``None``."""
    if cat in ("gpu_memcpy", "gpu_memset"):
        return "memory"
    return next((category for pattern, category in _KERNEL_CATEGORIES if pattern.search(name)), None)


def _dims(args: dict) -> list[list[int]]:
    dims = args.get("Input Dims")
    if not isinstance(dims, list):
        return []
    return [d if isinstance(d, list) and all(isinstance(x, int) and x >= 0 for x in d) else [] for d in dims]


def _dtype(args: dict) -> str | None:
    types = args.get("Input type")
    name = str(types[0]) if isinstance(types, list) and types else ""
    return _SCALAR_DTYPES.get(CPP_SCALAR_TYPES.get(name, name))


def _gemm_shape(name: str, dims: list[list[int]]) -> tuple[int, ...] | None:
    """(m, n, k) or (batch, m, n, k) of a matrix-multiply op, from its input dims."""
    if name in ("aten::addmm", "aten::baddbmm"):
        dims = dims[1:]
    if len(dims) < 2 or not dims[0] or not dims[1]:
        return None
    a, b = dims[0], dims[1]
    if name == "aten::linear":  # weight is (n, k)
        return (math.prod(a[:-1]), b[0], a[-1]) if len(b) == 2 else None
    if len(a) >= 3 and len(b) >= 3:
        return (math.prod(a[:-2]), a[-2], b[-1], a[-1])
    if len(b) == 2 and len(a) >= 2:
        return (math.prod(a[:-1]), b[-1], a[-1])
    return None


def _attention_shape(layout: str, q: list[int], k: list[int]) -> tuple[int, ...] | None:
    if len(q) != 4 or len(k) != 4:
        return None
    if layout == "bhsd":
        return (q[0], q[1], q[2], k[2], q[3])
    return (q[0], q[2], q[1], k[1], q[3])


def op_work(name: str, args: dict[str, Any]) -> Work | None:
    """The work of a GEMM or attention op (``COMPUTE_OPS``) from its args; ``None`` without its dims."""
    dims, dtype = _dims(args), _dtype(args)
    if name in _GEMMS:
        shape = _gemm_shape(name, dims)
        return None if shape is None else Work("gemm", shape, dtype, 2.0 * math.prod(shape))
    if name in _ATTENTION:
        layout, q, backward = _ATTENTION[name]
        shape = _attention_shape(layout, *dims[q:q + 2]) if len(dims) >= q + 2 else None
        if shape is None:
            return None
        forward = 4.0 * math.prod(shape)
        return Work("attention", shape, dtype, forward * (ATTENTION_BACKWARD_FLOPS if backward else 1.0))
    return None
