"""What is trained: a decoder-only transformer or a CNN, with its parameter and FLOP counts.

A transformer is described by its shape (layers, hidden, ffn, heads, kv heads, vocab, sequence
length, dtype) and a few architecture switches (gated MLP, RMSNorm or LayerNorm, biases, tied
embeddings). FLOPs follow the standard count (Narayanan et al., SC'21): a matmul of an
``m × k`` input with a ``k × n`` weight costs ``2·m·k·n`` forward and twice that backward
(input and weight gradients); attention scores and their application cost ``4·s·h`` per token
forward (full, non-causal ``s × s`` scores). A CNN is a list of layers, each with its parameter
count and forward FLOPs per sample; ``vgg_layers`` builds that list from the real layer shapes.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ATTENTION_KINDS", "Cnn", "CnnLayer", "Model", "Transformer", "vgg_layers"]


ATTENTION_KINDS = ("flash", "fused-softmax", "unfused")
"""How attention runs: one fused kernel (FlashAttention); Megatron-LM's kernels before it
(``baddbmm``, the fused causal scale-mask-softmax, dropout, ``bmm``); or PyTorch's plain matmul,
masked softmax, dropout, matmul."""


@dataclass(frozen=True)
class Transformer:
    """A decoder-only transformer (GPT, Llama, Phi, Yi style)."""

    name: str
    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    vocab: int
    seq_len: int
    dtype: str = "bfloat16"
    gated_mlp: bool = True
    """SwiGLU: the first MLP matmul holds a gate and an up projection (``2·ffn`` outputs)."""
    norm: str = "rmsnorm"
    """``rmsnorm`` (a weight) or ``layernorm`` (a weight and a bias)."""
    bias: bool = False
    """Biases on the attention and MLP matmuls."""
    tied_embeddings: bool = False
    """The output layer reuses the input embedding's weight."""
    attention: str = "flash"
    """``ATTENTION_KINDS``: a fused kernel, ``fused-softmax`` (Megatron-LM without
    ``--use-flash-attn``) or ``unfused``."""

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def qkv_width(self) -> int:
        """Output width of the fused Q, K, V projection (grouped-query attention)."""
        return self.hidden + 2 * self.kv_heads * self.head_dim

    @property
    def mlp_up_width(self) -> int:
        return self.ffn * (2 if self.gated_mlp else 1)

    @property
    def norm_params(self) -> int:
        """Parameters of one norm."""
        return self.hidden * (2 if self.norm == "layernorm" else 1)

    def layer_matmul_params(self) -> int:
        """Weights of one layer's four matmuls (QKV, attention output, MLP up, MLP down)."""
        h = self.hidden
        return h * self.qkv_width + h * h + h * self.mlp_up_width + self.ffn * h

    def layer_params(self) -> int:
        """All parameters of one layer: matmul weights, their biases, two norms."""
        biases = self.qkv_width + self.hidden + self.mlp_up_width + self.hidden if self.bias else 0
        return self.layer_matmul_params() + biases + 2 * self.norm_params

    def params(self, vocab: int | None = None) -> int:
        """Total parameters (with ``vocab`` rows in the embedding, default the real vocabulary)."""
        embedding = (vocab or self.vocab) * self.hidden
        output = 0 if self.tied_embeddings else embedding
        return self.layers * self.layer_params() + embedding + output + self.norm_params

    def matmul_params(self, vocab: int | None = None) -> int:
        """Parameters that multiply every token (layers' matmuls and the output layer)."""
        return self.layers * self.layer_matmul_params() + (vocab or self.vocab) * self.hidden

    def train_flops_per_token(self, vocab: int | None = None) -> float:
        """Forward plus backward FLOPs per token: ``6·matmul params + 12·layers·seq·hidden``."""
        return 6 * self.matmul_params(vocab) + 12 * self.layers * self.seq_len * self.hidden


@dataclass(frozen=True)
class CnnLayer:
    """One layer of a CNN: parameters, forward FLOPs and output activation elements per sample."""

    name: str
    params: int
    flops: float
    activations: int


@dataclass(frozen=True)
class Cnn:
    """A convolutional network trained with data parallelism, as a list of layers."""

    name: str
    layers: tuple[CnnLayer, ...]
    input_elements: int
    """Elements of one input sample (``3·224·224`` for ImageNet)."""
    dtype: str = "float32"

    def params(self) -> int:
        return sum(layer.params for layer in self.layers)

    def forward_flops_per_sample(self) -> float:
        return sum(layer.flops for layer in self.layers)


Model = Transformer | Cnn


def vgg_layers(channels: int, size: int, convs: list[int | str], classifier: list[int]) -> tuple[CnnLayer, ...]:
    """The layers of a VGG-style network: 3×3 convolutions (padding 1), ``"M"`` 2×2 max-pools, then linears.

    ``convs`` is torchvision's configuration list (``[64, 64, "M", 128, ...]``); a pool is folded
    into the convolution before it. The classifier's input is the last feature map, flattened.

    >>> layers = vgg_layers(3, 224, [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M",
    ...                              512, 512, 512, 512, "M", 512, 512, 512, 512, "M"], [4096, 4096, 1000])
    >>> sum(layer.params for layer in layers)  # torchvision's vgg19
    143667240
    """
    layers: list[CnnLayer] = []
    block, index = 1, 1
    for item in convs:
        if item == "M":
            if not layers:
                raise ValueError("a VGG configuration cannot start with a pool")
            size //= 2
            last = layers[-1]
            layers[-1] = CnnLayer(last.name, last.params, last.flops, last.activations // 4)
            block, index = block + 1, 1
            continue
        if not isinstance(item, int) or item < 1:
            raise ValueError(f"a VGG configuration holds channel counts and 'M', got {item!r}")
        weights = channels * item * 9
        flops = 2 * weights * size * size
        layers.append(CnnLayer(f"conv{block}_{index}", weights + item, flops, item * size * size))
        channels, index = item, index + 1
    features = channels * size * size
    for number, width in enumerate(classifier, start=1):
        layers.append(CnnLayer(f"fc{number}", features * width + width, 2 * features * width, width))
        features = width
    return tuple(layers)
