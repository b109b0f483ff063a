"""Input checks shared by the reference implementations.

Every public function and module of ``course_utils`` validates what it is given and
raises a ``ValueError`` (or ``TypeError`` for a wrong dtype) whose message names the
argument, what was received and what was expected, instead of letting a cryptic error
surface from deep inside torch.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _shape(t: Tensor) -> str:
    return "(" + ", ".join(str(s) for s in t.shape) + ")"


def check_tensor(name: str, x: object) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")


def check_rank(name: str, x: Tensor, rank: int, letters: str) -> None:
    """Require ``x.dim() == rank``; ``letters`` spells the expected shape, e.g. "(B, L, D)"."""
    check_tensor(name, x)
    if x.dim() != rank:
        raise ValueError(
            f"{name} must have {rank} dimensions {letters}, got {x.dim()} with shape {_shape(x)}"
        )


def check_min_rank(name: str, x: Tensor, rank: int, letters: str) -> None:
    check_tensor(name, x)
    if x.dim() < rank:
        raise ValueError(
            f"{name} must have at least {rank} dimensions {letters}, "
            f"got {x.dim()} with shape {_shape(x)}"
        )


def check_mask(mask: object, scores_shape: torch.Size, what: str = "the attention scores") -> None:
    """A mask must be boolean (``True`` = may attend) and broadcast to the scores' shape."""
    if not isinstance(mask, Tensor):
        raise TypeError(f"mask must be a torch.Tensor of dtype torch.bool, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(
            f"mask must have dtype torch.bool (True = may attend), got {mask.dtype}; "
            "convert it with `mask.bool()` or build it with a comparison such as `tokens != pad_id`"
        )
    target = tuple(scores_shape)
    # broadcasts without growing the scores: no more dims, each 1 or equal (from the right);
    # plain Python, as torch.broadcast_shapes costs ~0.1 ms a call (twice per attention)
    fits = mask.dim() <= len(target) and all(m in (1, t) for m, t in zip(reversed(mask.shape), reversed(target)))
    if not fits:
        raise ValueError(
            f"mask of shape {_shape(mask)} cannot be broadcast to {what} of shape "
            f"{tuple(target)}; expected a shape such as (L_q, L_k), (B, 1, L_k) or (B, L_q, L_k)"
        )
