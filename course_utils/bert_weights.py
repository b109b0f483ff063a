"""BERT's encoder layer in the course's :class:`~course_utils.EncoderLayer` (backs notebook 08).

Hugging Face's ``BertLayer`` is the course's post-norm ``EncoderLayer`` with GELU, under other
names (:data:`BERT_LAYER_NAMES`); :func:`copy_bert_layer` copies its weights, and
:func:`bert_attention_mask` turns the course's boolean mask into BERT's additive one, so
notebook 08 can compare the two layers' outputs.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

# Hugging Face's BertLayer is the course's post-norm EncoderLayer with GELU, under other
# names: our parameter <- theirs.
BERT_LAYER_NAMES = {
    "self_attn.w_q": "attention.self.query",
    "self_attn.w_k": "attention.self.key",
    "self_attn.w_v": "attention.self.value",
    "self_attn.w_o": "attention.output.dense",
    "norm1": "attention.output.LayerNorm",
    "feed_forward.linear1": "intermediate.dense",
    "feed_forward.linear2": "output.dense",
    "norm2": "output.LayerNorm",
}


def copy_bert_layer(layer: nn.Module, bert_layer: nn.Module) -> None:
    """Copy a ``transformers`` ``BertLayer``'s weights into the course's ``EncoderLayer``
    (``norm_first=False``, ``activation="gelu"``, same ``d_model``, heads and ``d_ff``)."""
    theirs = bert_layer.state_dict()
    ours = {
        f"{name}.{kind}": theirs[f"{bert_name}.{kind}"]
        for name, bert_name in BERT_LAYER_NAMES.items()
        for kind in ("weight", "bias")
    }
    layer.load_state_dict(ours)


def bert_attention_mask(mask: Tensor) -> Tensor:
    """The course's boolean mask ``(B, 1, L)`` (``True`` = may attend) as BERT's additive
    float mask ``(B, 1, 1, L)``: 0 where attending is allowed, a huge negative number where not."""
    blocked = torch.finfo(torch.float32).min
    additive = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device).masked_fill(~mask, blocked)  # (B, 1, L)
    return additive.unsqueeze(1)  # (B, 1, 1, L)


__all__ = ["BERT_LAYER_NAMES", "copy_bert_layer", "bert_attention_mask"]
