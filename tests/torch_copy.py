"""Copy our weights into PyTorch's modules, for the parity tests."""

from __future__ import annotations

import torch
from torch import nn

from course_utils import MultiHeadAttention


@torch.no_grad()
def copy_attention_weights(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    """Our w_q/w_k/w_v/w_o into torch's packed in_proj_* (rows [W_q; W_k; W_v]) and out_proj."""
    theirs.in_proj_weight.copy_(torch.cat([ours.w_q.weight, ours.w_k.weight, ours.w_v.weight]))
    theirs.in_proj_bias.copy_(torch.cat([ours.w_q.bias, ours.w_k.bias, ours.w_v.bias]))
    theirs.out_proj.weight.copy_(ours.w_o.weight)
    theirs.out_proj.bias.copy_(ours.w_o.bias)
