"""Compute kernels of real profiles: category, shape and dtype from their ops and names, measured times kept."""

from __future__ import annotations

import gzip
import json

from hypothesis import given
from hypothesis import strategies as st

from tests.testdata import DATA
from traces.kineto import read_kineto
from traces.kineto_compute import Work, kernel_category, op_work
from traces.schema import COMPUTE_CATEGORIES, ComputeEvent

H200 = DATA / "traces" / "capture-h200" / "ddp-iteration-rank0.kineto.json.gz"


def compute_events(trace) -> list[ComputeEvent]:
    return [e for r in trace.ranks for e in r.events if isinstance(e, ComputeEvent)]


def test_h200_mlp_gemms():
    """DDP MLP 1024→2048→2048→2048→512 at batch 64 on an H200: every Linear's forward and backward GEMMs."""
    phases = compute_events(read_kineto([H200]))
    gemms = [e for e in phases if e.category == "gemm"]
    forward = sorted(e.shape for e in gemms if e.name == "aten::addmm")
    assert forward == [(64, 512, 2048), (64, 2048, 1024), (64, 2048, 2048), (64, 2048, 2048)]
    assert {e.dtype for e in gemms} == {"float32"} and len(gemms) == 11  # 4 forward; 4 dW, 3 dX (the input needs none)
    backward = sorted(e.shape for e in gemms if e.name == "aten::mm")
    assert backward[:3] == [(64, 2048, 512), (64, 2048, 2048), (64, 2048, 2048)]  # dX = dY · W
    assert all(e.flops == 2 * e.shape[0] * e.shape[1] * e.shape[2] for e in gemms)
    assert all(e.duration_us > 0 and e.host_us > 0 and e.kernels >= 1 for e in gemms)
    assert {e.category for e in phases} == {"gemm", "memory"}  # the script takes no optimizer step


def test_nothing_measured_is_lost():
    """The compute phases hold all the GPU time of the file's non-NCCL kernels, copies and sets."""
    events = json.loads(gzip.decompress(H200.read_bytes()))["traceEvents"]
    gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
           and not e["name"].startswith("nccl")]
    phases = compute_events(read_kineto([H200]))
    busy = sum(e["dur"] for e in gpu)
    assert abs(sum(e.duration_us for e in phases) - busy) < 1e-6 * busy
    assert sum(e.kernels for e in phases) == len(gpu)


def test_dlrm_gemm_shapes(dlrm):
    phases = compute_events(read_kineto(sorted((dlrm / "dlrm_kineto").glob("worker0_*.json"))))
    shapes = {(e.name, e.shape) for e in phases if e.category == "gemm"}
    assert ("aten::addmm", (16, 512, 367)) in shapes and ("aten::bmm", (16, 27, 27, 16)) in shapes
    assert {e.category for e in phases} <= set(COMPUTE_CATEGORIES) | {None}


dim = st.integers(1, 4096)
dtypes = st.sampled_from([("float", "float32"), ("c10::BFloat16", "bfloat16"), ("c10::Half", "float16")])


@given(dim, dim, dim, st.integers(1, 8), st.integers(1, 64), dtypes)
def test_gemm_ops_agree_on_shape(m, n, k, b, s, dtype):
    cpp, ours = dtype

    def args(*dims):
        return {"Input Dims": [list(d) for d in dims], "Input type": [cpp] * len(dims)}

    mm = Work("gemm", (m, n, k), ours, 2.0 * m * n * k)
    assert op_work("aten::mm", args((m, k), (k, n))) == mm
    assert op_work("aten::addmm", args((n,), (m, k), (k, n))) == mm
    assert op_work("aten::matmul", args((m, k), (k, n))) == mm
    assert op_work("aten::linear", args((b, s, k), (n, k), (n,))).shape == (b * s, n, k)
    assert op_work("aten::bmm", args((b, m, k), (b, k, n))).shape == (b, m, n, k)
    assert op_work("aten::baddbmm", args((b, m, n), (b, m, k), (b, k, n))).shape == (b, m, n, k)
    assert op_work("aten::mm", {"Input Dims": [[], []], "Input type": ["TensorList"]}) is None


@given(st.integers(1, 8), st.integers(1, 64), st.integers(1, 8192), st.integers(1, 8192), st.sampled_from([64, 128]))
def test_attention_layouts(b, h, sq, skv, d):
    bhsd = {"Input Dims": [[b, h, sq, d], [b, h, skv, d], [b, h, skv, d]], "Input type": ["c10::BFloat16"] * 3}
    bshd = {"Input Dims": [[b, sq, h, d], [b, skv, h, d], [b, skv, h, d]], "Input type": ["c10::BFloat16"] * 3}
    forward = op_work("aten::_scaled_dot_product_flash_attention", bhsd)
    assert forward == op_work("aten::_flash_attention_forward", bshd)
    assert forward.shape == (b, h, sq, skv, d) and forward.flops == 4.0 * b * h * sq * skv * d
    backward = op_work("aten::_scaled_dot_product_flash_attention_backward",
                       {**bhsd, "Input Dims": [[b, h, sq, d], *bhsd["Input Dims"]]})
    assert backward.shape == forward.shape and backward.flops == 2.5 * forward.flops


def test_kernel_names():
    assert kernel_category("void at::native::vectorized_elementwise_kernel<4, ...>", "kernel") == "memory"
    adam = "void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor>"
    assert kernel_category(adam, "kernel") == "optimizer"
    assert kernel_category("flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>", "kernel") == "attention"
    assert kernel_category("nvjet_tst_128x256_64x4_2x1_v_bz_TNT", "kernel") == "gemm"
    assert kernel_category("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy") == "memory"
    assert kernel_category("my_custom_kernel", "kernel") is None
