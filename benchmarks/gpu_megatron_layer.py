"""Measure, on a real GPU, the host time and kernel count of a Megatron-LM transformer layer.

A small model is host-bound: the GPU waits for one Python thread per rank issuing kernels, so
its iteration time is the framework's host time, not its FLOPs.  ``gpu_compute_sweep.py``
measured that time on a *plain* pre-norm PyTorch layer; Megatron-LM's layer (2021-22,
``megatron/model/transformer.py``: ``ParallelTransformerLayer``, ``ParallelAttention``,
``ParallelMLP``; ``megatron/mpu``) does more per kernel.  This script rebuilds that layer from
its published structure (written here, not copied):

* pre-norm ``LayerNorm`` (torch's: apex's ``FusedLayerNorm`` is not installed here; it is one
  autograd Function around one kernel forward, as torch's is);
* column-parallel QKV: ``copy_to_tensor_model_parallel_region`` (an autograd Function, identity
  forward, all-reduce backward), ``F.linear`` with bias, the view to ``[s, b, np, 3·hn]``, the
  split into Q, K, V and their views to ``[s, b·np, hn]``;
* ``torch.empty`` + ``baddbmm`` (``beta=0``, ``alpha=1/norm_factor``) over the transposed Q, K;
* scale-mask-softmax: by default apex's fused upper-triangular kernel, which is not available
  here, so it is *emulated* as what it costs the host: one autograd Function launching one
  softmax kernel forward and one backward (``--softmax torch`` runs Megatron's own fallback
  instead: fp32 cast, scale, ``masked_fill_``, softmax, cast back);
* attention dropout inside the CUDA RNG tracker's ``fork()`` (get the default generator's state,
  set the model-parallel one, run, save it back, restore the default);
* ``bmm`` with the transposed V, the view back, ``permute(2, 0, 1, 3).contiguous()``, the view
  to ``[s, b, h/t]``;
* row-parallel dense without its bias (``skip_bias_add``) and
  ``reduce_from_tensor_model_parallel_region`` (all-reduce forward, identity backward);
* TorchScript (``torch.jit.script``) fused bias-dropout-add, the second ``LayerNorm``, the MLP's
  column-parallel up projection without bias, the jit-fused bias-GeLU (an autograd Function
  around the scripted forward and backward), the row-parallel down projection, bias-dropout-add.

Outside the layers, per micro-batch (``--stage``): the batch (tokens, labels, loss mask,
position ids and the causal mask as ``get_ltor_masks_and_position_ids`` builds them, copied to
the GPU), the vocabulary-parallel word embedding (with TP > 1 its out-of-shard masking), the
position embedding, their sum, the ``[b, s, h] → [s, b, h]`` transpose and the embedding dropout
under the tracker; after the layers the final ``LayerNorm``, the logits (``copy_to`` + the
tied embedding's ``F.linear``), ``_VocabParallelCrossEntropy`` (max, subtract, target masking and
gather, exp, sum, log, divide; its backward's scatter and multiply), the loss mask average and
the division by the number of micro-batches, the loss scaling and ``torch.autograd.backward``.
A middle pipeline stage instead allocates its receive buffers (``torch.empty(...,
requires_grad=True)`` for the activations and their gradient) and calls
``torch.autograd.backward(output, grad_tensors=grad)``.  ``--recompute full`` wraps each layer
in a checkpoint Function as ``mpu.checkpoint`` does: forward under ``no_grad`` saving the CPU,
CUDA and tracker RNG states; backward restoring them, running the layer forward again with grad
and back-propagating through it.

Tensor parallelism runs on one GPU with world-size-1 semantics: the TP-region Functions are
called (their host cost is real) but reduce nothing; the shapes are a TP rank's (heads, QKV and
MLP widths ÷ ``tp``).  A real TP all-reduce also launches an NCCL kernel through c10d: the twin
prices that host launch with its own communication model (``protocol.host_launch_us``), so it is
counted here (``tp_collectives`` per layer and micro-batch) but not timed.

What is measured, at a tiny hidden size where every kernel is far shorter than its launch:
wall-clock host time of a micro-batch's forward and backward for 1, 2, 4 and 8 layers (median of
``--repeats`` after warm-ups, the GPU synchronised before and after), so that the slope over
layers is the host time per layer (forward, backward) and the intercept the micro-batch's own;
and, with ``torch.profiler``, the GPU kernels (and memset/memcpy) each region launches.

Run on the GPU machine: ``python benchmarks/gpu_megatron_layer.py --json FILE`` (torch with
CUDA; nothing else from the repository).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import platform
import statistics
import sys
import time

import torch
import torch.nn.functional as F

LAYER_COUNTS = (1, 2, 4, 8)


# ---- tensor-parallel regions (world size 1) -------------------------------------------------

class Counter:
    """How many TP collectives the regions would issue (real NCCL calls at TP > 1)."""

    collectives = 0


class CopyToTPRegion(torch.autograd.Function):
    """Identity forward; all-reduce of the gradient backward (a no-op at world size 1)."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        Counter.collectives += 1
        return grad


class ReduceFromTPRegion(torch.autograd.Function):
    """All-reduce forward (a no-op at world size 1); identity backward."""

    @staticmethod
    def forward(ctx, x):
        Counter.collectives += 1
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


# ---- the CUDA RNG tracker -------------------------------------------------------------------

class RngTracker:
    """A named generator state swapped in around model-parallel dropout (``fork()``)."""

    def __init__(self, device: str) -> None:
        self.cuda = device == "cuda"
        self.state = self._get()

    def _get(self):
        return torch.cuda.get_rng_state() if self.cuda else torch.get_rng_state()

    def _set(self, state) -> None:
        if self.cuda:
            torch.cuda.set_rng_state(state)
        else:
            torch.set_rng_state(state)

    @contextlib.contextmanager
    def fork(self):
        orig = self._get()
        self._set(self.state)
        try:
            yield
        finally:
            self.state = self._get()
            self._set(orig)


# ---- the jit-fused element-wise functions ---------------------------------------------------

@torch.jit.script
def bias_gelu(bias: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x = bias + y
    return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))


@torch.jit.script
def bias_gelu_back(g: torch.Tensor, bias: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x = bias + y
    tanh_out = torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x))
    ff = 0.5 * x * ((1 - tanh_out * tanh_out) * (0.79788456 + 0.1070322243 * x * x)) + 0.5 * (1 + tanh_out)
    return ff * g


class GeLUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, bias):
        ctx.save_for_backward(x, bias)
        return bias_gelu(bias, x)

    @staticmethod
    def backward(ctx, grad):
        x, bias = ctx.saved_tensors
        tmp = bias_gelu_back(grad, bias, x)
        return tmp, tmp


@torch.jit.script
def bias_dropout_add_train(x: torch.Tensor, bias: torch.Tensor, residual: torch.Tensor, prob: float) -> torch.Tensor:
    return residual + torch.nn.functional.dropout(x + bias, p=prob, training=True)


def bias_add(x, bias, residual, prob: float):
    """Without dropout: the residual add alone."""
    return residual + (x + bias)


class EmulatedFusedSoftmax(torch.autograd.Function):
    """Apex's ``ScaledUpperTriangMaskedSoftmax`` as the host sees it: one Function, one kernel
    each way (the scale and causal mask it applies inside its kernel are not reproduced)."""

    @staticmethod
    def forward(ctx, x, scale):
        out = torch.softmax(x, -1)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return torch._softmax_backward_data(grad, out, -1, out.dtype), None


# ---- the model ------------------------------------------------------------------------------

class Linear(torch.nn.Module):
    """Column- or row-parallel linear as Megatron's mpu layers compute it."""

    def __init__(self, n_in: int, n_out: int, dtype, device, column: bool, skip_bias_add: bool) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(n_out, n_in, dtype=dtype, device=device) * 0.02)
        self.bias = torch.nn.Parameter(torch.zeros(n_out, dtype=dtype, device=device))
        self.column, self.skip_bias_add = column, skip_bias_add

    def forward(self, x):
        if self.column:
            x = CopyToTPRegion.apply(x)
        bias = None if self.skip_bias_add else self.bias
        out = F.linear(x, self.weight, bias)
        if not self.column:
            out = ReduceFromTPRegion.apply(out)
        return out, (self.bias if self.skip_bias_add else None)


class Layer(torch.nn.Module):
    """``ParallelTransformerLayer`` (pre-norm) with ``ParallelAttention`` and ``ParallelMLP``."""

    def __init__(self, number: int, hidden: int, heads: int, tp: int, cfg, dtype, device, tracker) -> None:
        super().__init__()
        self.cfg, self.tracker = cfg, tracker
        self.np, self.hn = heads // tp, hidden // heads
        self.ln1 = torch.nn.LayerNorm(hidden, device=device, dtype=dtype)
        self.qkv = Linear(hidden, 3 * hidden // tp, dtype, device, column=True, skip_bias_add=False)
        self.dense = Linear(hidden // tp, hidden, dtype, device, column=False, skip_bias_add=True)
        self.ln2 = torch.nn.LayerNorm(hidden, device=device, dtype=dtype)
        self.fc1 = Linear(hidden, 4 * hidden // tp, dtype, device, column=True, skip_bias_add=True)
        self.fc2 = Linear(4 * hidden // tp, hidden, dtype, device, column=False, skip_bias_add=True)
        self.coeff = float(number)  # apply_query_key_layer_scaling
        self.norm_factor = math.sqrt(self.hn) * self.coeff
        self.p = cfg.dropout

    def _dropout(self, x):
        if self.p == 0:
            return x
        with self.tracker.fork():
            return F.dropout(x, p=self.p, training=True)

    def attention(self, x, mask):
        mixed, _ = self.qkv(x)
        mixed = mixed.view(*mixed.size()[:-1], self.np, 3 * self.hn)
        q, k, v = torch.split(mixed, self.hn, dim=-1)
        b, sq, sk = q.size(1), q.size(0), k.size(0)
        q = q.view(sq, b * self.np, -1)
        k = k.view(sk, b * self.np, -1)
        scores = torch.empty(b * self.np, sq, sk, dtype=q.dtype, device=q.device)
        scores = torch.baddbmm(scores, q.transpose(0, 1), k.transpose(0, 1).transpose(1, 2),
                               beta=0.0, alpha=1.0 / self.norm_factor)
        scores = scores.view(b, self.np, sq, sk)
        if self.cfg.softmax == "torch":  # FusedScaleMaskSoftmax.forward_torch_softmax, softmax in fp32
            s = scores.float() * self.coeff
            s = s.masked_fill_(mask, -10000.0)
            probs = torch.nn.Softmax(dim=-1)(s).to(scores.dtype)
        else:
            probs = EmulatedFusedSoftmax.apply(scores, self.coeff)
        probs = self._dropout(probs)
        v = v.view(sk, b * self.np, -1)
        probs = probs.view(b * self.np, sq, -1)
        ctx = torch.bmm(probs, v.transpose(0, 1))
        ctx = ctx.view(b, self.np, sq, self.hn).permute(2, 0, 1, 3).contiguous()
        ctx = ctx.view(*ctx.size()[:-2], self.np * self.hn)
        return self.dense(ctx)

    def _bda(self, out, bias, residual):
        with torch.enable_grad():
            if self.p == 0:
                return bias_add(out, bias.expand_as(residual), residual, 0.0)
            return bias_dropout_add_train(out, bias.expand_as(residual), residual, self.p)

    def forward(self, x, mask):
        attn, attn_bias = self.attention(self.ln1(x), mask)
        x = self._bda(attn, attn_bias, x)
        up, up_bias = self.fc1(self.ln2(x))
        act = GeLUFunction.apply(up, up_bias)
        down, down_bias = self.fc2(act)
        return self._bda(down, down_bias, x)


class PlainLayer(torch.nn.Module):
    """The plain pre-norm layer ``gpu_compute_sweep.py`` timed (``host eager layer``), as the
    reference on this host: ``nn.Linear``, ``nn.LayerNorm``, SDPA, ``F.dropout``, ``F.gelu``."""

    def __init__(self, hidden: int, heads: int, tp: int, dtype, device) -> None:
        super().__init__()
        self.heads = heads // tp
        self.ln1 = torch.nn.LayerNorm(hidden, device=device, dtype=dtype)
        self.ln2 = torch.nn.LayerNorm(hidden, device=device, dtype=dtype)
        self.qkv = torch.nn.Linear(hidden, 3 * hidden // tp, device=device, dtype=dtype)
        self.proj = torch.nn.Linear(hidden // tp, hidden, device=device, dtype=dtype)
        self.up = torch.nn.Linear(hidden, 4 * hidden // tp, device=device, dtype=dtype)
        self.down = torch.nn.Linear(4 * hidden // tp, hidden, device=device, dtype=dtype)

    def forward(self, x, mask):
        s, b, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(s, b, 3, self.heads, -1).permute(2, 1, 3, 0, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).permute(2, 0, 1, 3).reshape(s, b, -1)
        x = x + F.dropout(self.proj(a), 0.1)
        return x + F.dropout(self.down(F.gelu(self.up(self.ln2(x)))), 0.1)


class Checkpoint(torch.autograd.Function):
    """``mpu.checkpoint``: forward without grad keeping the RNG states, backward runs it again."""

    @staticmethod
    def forward(ctx, layer, x, mask):
        ctx.layer = layer
        ctx.cpu_state = torch.get_rng_state()
        ctx.cuda_state = torch.cuda.get_rng_state() if x.is_cuda else None
        ctx.tracker_state = layer.tracker.state
        ctx.save_for_backward(x, mask)
        with torch.no_grad():
            return layer(x, mask)

    @staticmethod
    def backward(ctx, grad):
        x, mask = ctx.saved_tensors
        layer = ctx.layer
        cpu, tracker = torch.get_rng_state(), layer.tracker.state
        cuda = torch.cuda.get_rng_state() if x.is_cuda else None
        torch.set_rng_state(ctx.cpu_state)
        if cuda is not None:
            torch.cuda.set_rng_state(ctx.cuda_state)
        layer.tracker.state = ctx.tracker_state
        x = x.detach()
        x.requires_grad = True
        with torch.enable_grad():
            out = layer(x, mask)
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state(cuda)
        layer.tracker.state = tracker
        torch.autograd.backward(out, grad)
        return None, x.grad, None


class VocabParallelCrossEntropy(torch.autograd.Function):
    """Megatron's ``_VocabParallelCrossEntropy`` (its three all-reduces: no-ops at world size 1)."""

    @staticmethod
    def forward(ctx, logits, target, start: int, end: int):
        logits_max = torch.max(logits, dim=-1)[0]
        Counter.collectives += 1
        logits.sub_(logits_max.unsqueeze(dim=-1))
        target_mask = (target < start) | (target >= end)
        masked_target = target.clone() - start
        masked_target[target_mask] = 0
        logits_2d = logits.view(-1, logits.size(-1))
        masked_target_1d = masked_target.view(-1)
        arange_1d = torch.arange(start=0, end=logits_2d.size()[0], device=logits_2d.device)
        predicted = logits_2d[arange_1d, masked_target_1d].clone().contiguous().view_as(target)
        predicted[target_mask] = 0.0
        Counter.collectives += 1
        exp_logits = logits
        torch.exp(logits, out=exp_logits)
        sum_exp = exp_logits.sum(dim=-1)
        Counter.collectives += 1
        loss = torch.log(sum_exp) - predicted
        exp_logits.div_(sum_exp.unsqueeze(dim=-1))
        ctx.save_for_backward(exp_logits, target_mask, masked_target_1d)
        return loss

    @staticmethod
    def backward(ctx, grad):
        softmax, target_mask, masked_target_1d = ctx.saved_tensors
        grad_2d = softmax.view(-1, softmax.size(-1))
        arange_1d = torch.arange(start=0, end=grad_2d.size()[0], device=grad_2d.device)
        grad_2d[arange_1d, masked_target_1d] -= 1.0 - target_mask.view(-1).float()
        softmax.mul_(grad.unsqueeze(dim=-1))
        return softmax, None, None, None


class Stage(torch.nn.Module):
    """One pipeline stage's model: embedding (first stage), layers, final norm and loss (last)."""

    def __init__(self, cfg, layers: int, device: str) -> None:
        super().__init__()
        dtype = torch.float16 if device == "cuda" else torch.float32
        self.cfg, self.device, self.dtype = cfg, device, dtype
        self.tracker = RngTracker(device)
        h, v = cfg.hidden, cfg.vocab // cfg.tp
        self.vocab_start, self.vocab_end = 0, v
        self.layers = torch.nn.ModuleList(
            PlainLayer(h, cfg.heads, cfg.tp, dtype, device) if cfg.softmax == "plain"
            else Layer(i + 1, h, cfg.heads, cfg.tp, cfg, dtype, device, self.tracker) for i in range(layers))
        self.word = torch.nn.Parameter(torch.randn(v, h, dtype=dtype, device=device) * 0.02)
        self.position = torch.nn.Parameter(torch.randn(cfg.seq, h, dtype=dtype, device=device) * 0.02)
        self.final_ln = torch.nn.LayerNorm(h, device=device, dtype=dtype)

    def batch(self):
        """``get_batch``: tokens and labels to the GPU, masks and position ids."""
        cfg = self.cfg
        data = torch.randint(0, cfg.vocab, (cfg.micro_batch, cfg.seq + 1))
        tokens_ = data.long().to(self.device, non_blocking=True)
        labels = tokens_[:, 1:].contiguous()
        tokens = tokens_[:, :-1].contiguous()
        mask = torch.tril(torch.ones((1, cfg.seq, cfg.seq), device=self.device)).view(1, 1, cfg.seq, cfg.seq)
        loss_mask = torch.ones(tokens.size(), dtype=torch.float, device=self.device)
        position_ids = torch.arange(cfg.seq, dtype=torch.long, device=self.device)
        position_ids = position_ids.unsqueeze(0).expand_as(tokens)
        return tokens, labels, loss_mask, mask < 0.5, position_ids

    def embed(self, tokens, position_ids):
        if self.cfg.tp > 1:  # VocabParallelEmbedding's out-of-shard masking
            input_mask = (tokens < self.vocab_start) | (tokens >= self.vocab_end)
            masked = tokens.clone() - self.vocab_start
            masked[input_mask] = 0
            words = F.embedding(masked, self.word)
            words[input_mask, :] = 0.0
            words = ReduceFromTPRegion.apply(words)
        else:
            words = ReduceFromTPRegion.apply(F.embedding(tokens, self.word))
        x = words + F.embedding(position_ids, self.position)
        x = x.transpose(0, 1).contiguous()
        if self.cfg.dropout:
            with self.tracker.fork():
                x = F.dropout(x, p=self.cfg.dropout, training=True)
        return x

    def run_layers(self, x, mask):
        for layer in self.layers:
            x = Checkpoint.apply(layer, x, mask) if self.cfg.recompute == "full" else layer(x, mask)
        return x

    def loss(self, x, labels, loss_mask):
        x = self.final_ln(x)
        logits = F.linear(CopyToTPRegion.apply(x), self.word)
        labels = labels.transpose(0, 1).contiguous()
        losses = VocabParallelCrossEntropy.apply(logits.float(), labels, self.vocab_start, self.vocab_end)
        losses = losses.transpose(0, 1).contiguous().float()
        loss_mask = loss_mask.view(-1).float()
        return torch.sum(losses.view(-1) * loss_mask) / loss_mask.sum()


def micro_batch(stage: Stage, cfg, forward_only: bool = False):
    """One micro-batch of the 1F1B schedule, forward step then backward step: the host seconds
    each took to issue (the backward's 0 when ``forward_only``)."""
    t0 = time.perf_counter()
    if cfg.stage == "single":
        tokens, labels, loss_mask, mask, position_ids = stage.batch()
        x = stage.embed(tokens, position_ids)
        out = stage.loss(stage.run_layers(x, mask), labels, loss_mask) / cfg.micro_batches
        t1 = time.perf_counter()
        if forward_only:
            return t1 - t0, 0.0
        scaled = out * 4096.0  # the loss scaler
        torch.autograd.backward(scaled)
    else:  # a middle stage: receive buffers, layers, backward from the received gradient
        shape = (cfg.seq, cfg.micro_batch, cfg.hidden)
        x = torch.empty(shape, requires_grad=True, device=stage.device, dtype=stage.dtype)
        mask = stage.mask
        out = stage.run_layers(x, mask)
        t1 = time.perf_counter()
        if forward_only:
            return t1 - t0, 0.0
        grad = torch.empty(shape, device=stage.device, dtype=stage.dtype).normal_()
        torch.autograd.backward(out, grad_tensors=grad)
        _ = x.grad
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def host_times(cfg, repeats: int) -> list[dict]:
    """Per layer count: median host seconds of one micro-batch's forward and backward (issue
    only), its wall time to the GPU's end, and its kernels.  The layer counts' runs interleave,
    so that a drift of the host's speed moves every count alike and leaves the slope."""
    stages = []
    for layers in LAYER_COUNTS:
        stage = Stage(cfg, layers, cfg.device)
        if cfg.stage != "single":
            stage.mask = torch.tril(torch.ones((1, 1, cfg.seq, cfg.seq), device=cfg.device)) < 0.5
        for _ in range(5):  # warm-ups: TorchScript profiles and optimises over the first runs
            micro_batch(stage, cfg)
            sync(cfg.device)
        stages.append(stage)
    times: list[list[tuple[float, float, float]]] = [[] for _ in stages]
    for _ in range(repeats):
        for stage, into in zip(stages, times, strict=True):
            sync(cfg.device)
            t0 = time.perf_counter()
            f, b = micro_batch(stage, cfg)
            sync(cfg.device)
            into.append((f, b, time.perf_counter() - t0))
    rows = []
    for layers, stage, into in zip(LAYER_COUNTS, stages, times, strict=True):
        Counter.collectives = 0
        micro_batch(stage, cfg)
        sync(cfg.device)
        rows.append({"layers": layers, "forward_us": statistics.median(t[0] for t in into) * 1e6,
                     "backward_us": statistics.median(t[1] for t in into) * 1e6,
                     "wall_us": statistics.median(t[2] for t in into) * 1e6,
                     "forward_us_min": min(t[0] for t in into) * 1e6, "backward_us_min": min(t[1] for t in into) * 1e6,
                     "tp_collectives": Counter.collectives, **count_kernels(stage, cfg)})
    return rows


def count_kernels(stage: Stage, cfg) -> dict:
    """GPU kernels (and memsets/memcpys) one micro-batch's forward and backward launch."""
    if cfg.device != "cuda":
        return {}
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with record_function("mb"):
            micro_batch(stage, cfg)
        sync(cfg.device)
    launches = {"kernel": 0, "memset": 0, "memcpy": 0}
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CPU:
            continue
        name = e.name
        if "LaunchKernel" in name or name in ("cuLaunchKernelEx", "cudaGraphLaunch"):
            launches["kernel"] += 1
        elif name.startswith("cudaMemset"):
            launches["memset"] += 1
        elif name.startswith("cudaMemcpy"):
            launches["memcpy"] += 1
    # forward alone, for the split
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof_f:
        micro_batch(stage, cfg, forward_only=True)
        sync(cfg.device)
    fwd = sum(1 for e in prof_f.events() if e.device_type == torch.autograd.DeviceType.CPU
              and ("LaunchKernel" in e.name or e.name == "cuLaunchKernelEx"))
    names: dict[str, int] = {}
    gpu_us = 0.0
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            names[e.name[:60]] = names.get(e.name[:60], 0) + 1
            gpu_us += e.time_range.elapsed_us()
    return {"kernels": launches["kernel"], "forward_kernels": fwd, "memsets": launches["memset"],
            "memcpys": launches["memcpy"], "gpu_busy_us": gpu_us, "kernel_names": names}


def fit(rows: list[dict], key: str) -> tuple[float, float]:
    """Least-squares slope (per layer) and intercept (per micro-batch) of ``key`` over layers."""
    xs = [r["layers"] for r in rows]
    ys = [r[key] for r in rows]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return slope, my - slope * mx


VARIANTS = {
    # name: (tp, dropout, softmax, recompute, stage)
    "tp1": (1, 0.1, "fused", "none", "single"),
    "tp2": (2, 0.1, "fused", "none", "single"),
    "tp8": (8, 0.1, "fused", "none", "single"),
    "tp1-no-dropout": (1, 0.0, "fused", "none", "single"),
    "tp1-torch-softmax": (1, 0.1, "torch", "none", "single"),
    "tp1-recompute-full": (1, 0.1, "fused", "full", "single"),
    "tp1-middle-stage": (1, 0.1, "fused", "none", "middle"),
    "plain-middle-stage": (1, 0.1, "plain", "none", "middle"),
    "tp8-middle-stage": (8, 0.1, "fused", "none", "middle"),
    "tp8-torch-softmax": (8, 0.1, "torch", "none", "single"),
}


def measure(args) -> dict:
    out = {}
    for index, name in enumerate(args.variants):
        tp, dropout, softmax, recompute, stage = VARIANTS[name]
        cfg = argparse.Namespace(hidden=args.hidden, heads=args.heads, seq=args.seq, vocab=args.vocab, tp=tp,
                                 micro_batch=1, micro_batches=8, dropout=dropout, softmax=softmax,
                                 recompute=recompute, stage=stage, device=args.device)
        started = time.perf_counter()
        rows = host_times(cfg, args.repeats)
        per_layer = {}
        for key in ("forward_us", "backward_us", "wall_us", "forward_us_min", "backward_us_min", "kernels",
                    "forward_kernels", "tp_collectives", "gpu_busy_us"):
            if key in rows[0]:
                slope, intercept = fit(rows, key)
                per_layer[key] = {"per_layer": slope, "per_micro_batch": intercept}
        key = name if name not in out else f"{name}#{index}"
        out[key] = {"tp": tp, "dropout": dropout, "softmax": softmax, "recompute": recompute, "stage": stage,
                     "rows": rows, "fit": per_layer, "seconds": time.perf_counter() - started}
        f, b = per_layer["forward_us"], per_layer["backward_us"]
        k = per_layer.get("kernels", {}).get("per_layer", float("nan"))
        kf = per_layer.get("forward_kernels", {}).get("per_layer", float("nan"))
        print(f"{name:22s} fwd {f['per_layer']:7.1f} µs/layer + {f['per_micro_batch']:7.1f}  "
              f"bwd {b['per_layer']:7.1f} + {b['per_micro_batch']:7.1f}  wall {per_layer['wall_us']['per_layer']:7.1f}"
              f" + {per_layer['wall_us']['per_micro_batch']:7.1f}  kernels/layer {kf:.1f} fwd {k:.1f} total"
              f"  gpu {per_layer.get('gpu_busy_us', {}).get('per_layer', float('nan')):6.1f}",
              flush=True)
    return out


def host_cpu() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--vocab", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS))
    args = parser.parse_args()
    torch.manual_seed(0)
    result = {
        "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        "torch": torch.__version__, "python": sys.version.split()[0], "host_cpu": host_cpu(),
        "measured": time.strftime("%Y-%m-%d", time.gmtime()),
        "command": "python benchmarks/gpu_megatron_layer.py --json FILE",
        "shape": {"hidden": args.hidden, "heads": args.heads, "seq": args.seq, "vocab": args.vocab, "micro_batch": 1},
        "fp16": args.device == "cuda", "jit_texpr_fuser": torch._C._jit_texpr_fuser_enabled(),
        "jit_can_fuse_on_gpu": torch._C._jit_can_fuse_on_gpu(), "layer_counts": list(LAYER_COUNTS),
        "repeats": args.repeats,
        "variants": measure(args),
    }
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
