"""Collect attention weights from any model, for plotting (used from notebook 02 on).

One mechanism everywhere: :func:`record_attention` puts a forward hook on every
multi-head attention module inside a model (or on the module itself) and records the
weights each returns, under the module's qualified name. It works the same for a single
``MultiHeadAttention``, an encoder or decoder layer, a whole ``Transformer`` (and for a
student's own classes, as long as their attention returns ``(output, weights)``), and
costs nothing when not in use::

    with record_attention(model) as maps:
        model(src, tgt, src_mask, tgt_mask)
    maps["encoder.layers.0.self_attn"]         # (B, H, L_src, L_src)
    stack_layers(maps, "decoder", "cross_attn")  # (num_layers, B, H, L_tgt, L_src)
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

# class names recorded: ours, a student's class of the same name, and torch's own
_ATTENTION_CLASS_NAMES = {"MultiHeadAttention", "MultiheadAttention"}


def _is_attention(module: nn.Module) -> bool:
    return type(module).__name__ in _ATTENTION_CLASS_NAMES


@contextmanager
def record_attention(model: nn.Module) -> Iterator[dict[str, Tensor]]:
    """Record the attention weights of every attention module in ``model`` during the block.

    Yields a dict ``{qualified name: weights (B, H, L_q, L_k)}`` filled as the model runs
    (detached, on the CPU; a module called several times keeps its latest call). The
    model itself, if it is an attention module, is recorded under ``"self"``. The hooks
    are removed when the block ends, even after an exception.
    """
    maps: dict[str, Tensor] = {}
    handles = []

    def make_hook(name: str):
        def hook(module: nn.Module, inputs: tuple, output: object) -> None:
            if isinstance(output, tuple) and len(output) >= 2 and isinstance(output[1], Tensor):
                maps[name] = output[1].detach().cpu()

        return hook

    for name, module in model.named_modules():
        if _is_attention(module):
            handles.append(module.register_forward_hook(make_hook(name or "self")))
    try:
        yield maps
    finally:
        for handle in handles:
            handle.remove()


def stack_layers(maps: dict[str, Tensor], stack: str, kind: str) -> Tensor:
    """Stack ``{stack}.layers.{i}.{kind}`` for i = 0, 1, ... into ``(num_layers, B, H, L_q, L_k)``.

    ``stack`` is ``"encoder"`` or ``"decoder"`` (or any prefix such as ``"layers"`` for a
    bare ``nn.ModuleList``), ``kind`` is ``"self_attn"`` or ``"cross_attn"``.
    """
    prefix = f"{stack}.layers." if stack else "layers."
    pattern = re.compile(re.escape(prefix) + r"(\d+)\." + re.escape(kind) + r"$")
    found = sorted(
        (int(m.group(1)), maps[name]) for name in maps if (m := pattern.match(name)) is not None
    )
    if not found:
        raise ValueError(
            f"no attention maps named '{prefix}<i>.{kind}' were recorded; recorded: {sorted(maps)}"
        )
    return torch.stack([w for _, w in found])  # (num_layers, B, H, L_q, L_k)
