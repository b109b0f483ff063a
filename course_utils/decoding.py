"""Greedy autoregressive decoding (backs notebook 06).

Start every target with ``<bos>``, run the decoder on the prefix, append the most
likely next token, and repeat until every sequence has produced ``<eos>`` or
``max_len`` new tokens exist. This naive version re-runs the decoder on the whole
prefix at each step (cost grows with the square of the length); notebook 07 speeds it
up with a key/value cache.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ._validate import check_rank
from .attention import causal_mask


@torch.no_grad()
def greedy_decode(
    model: nn.Module,
    src: Tensor,
    max_len: int,
    bos_id: int,
    eos_id: int,
    src_mask: Tensor | None = None,
    pad_id: int | None = None,
) -> Tensor:
    """Decode a batch greedily with an encoder-decoder ``model``.

    Args:
        model: has ``encode(src, src_mask)``, ``decode(tgt, memory, tgt_mask,
            memory_mask)`` and ``output_projection`` (a :class:`~course_utils.Transformer`).
        src: ``(B, L_src)`` token ids.
        max_len: the most tokens to generate after ``<bos>``.
        src_mask: boolean ``(B, 1, L_src)``, ``True`` = real token; ``None`` = no padding.
        pad_id: written after a sequence's ``<eos>``; defaults to ``eos_id``.

    Returns:
        ``(B, T)`` token ids, ``T <= max_len + 1``; column 0 is ``<bos>``. Stops early
        when every sequence has produced ``<eos>``. Runs in eval mode (no dropout) and
        puts the model back in the mode it was in.
    """
    check_rank("src", src, 2, "(B, L_src) of token ids")
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 0:
        raise ValueError(f"max_len must be a non-negative int, got {max_len!r}")
    fill = eos_id if pad_id is None else pad_id
    was_training = model.training
    model.eval()
    try:
        memory = model.encode(src, src_mask)  # (B, L_src, D)
        B = src.size(0)
        ys = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)  # (B, 1)
        finished = torch.zeros(B, dtype=torch.bool, device=src.device)  # (B,)
        for _ in range(max_len):
            tgt_mask = causal_mask(ys.size(1), device=src.device)  # (T, T)
            out = model.decode(ys, memory, tgt_mask, src_mask)  # (B, T, D)
            next_token = model.output_projection(out[:, -1]).argmax(dim=-1)  # (B,)
            next_token = next_token.masked_fill(finished, fill)
            ys = torch.cat([ys, next_token.unsqueeze(1)], dim=1)  # (B, T + 1)
            finished |= next_token == eos_id
            if bool(finished.all()):
                break
        return ys
    finally:
        model.train(was_training)
