"""Input checks shared by the reference implementations.

Every public function and module of ``course_utils`` validates what it is given and
raises a ``ValueError`` (or ``TypeError`` for a wrong dtype) whose message names the
argument, what was received and what was expected, instead of letting a cryptic error
surface from deep inside torch.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from typing import Any

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
        if len(target) == 4:  # (B, H, L_q, L_k): multi-head scores
            # one rule for every wrong shape, so the message never contradicts a caller's own diagnosis
            expected = ("; against 4-D scores (B, H, L_q, L_k) a mask lines up from the right, each axis 1 or the "
                        "scores' size, such as (L_q, L_k), (B, 1, 1, L_k), (B, 1, L_q, L_k) or (B, H, L_q, L_k). A 3-D "
                        "mask (B, 1, L_k) or (B, L_q, L_k) gets the head axis with mask.unsqueeze(1); a 2-D mask "
                        "(L_q, L_k) needs none")
        else:
            expected = "; expected a shape such as (L_q, L_k), (B, 1, L_k) or (B, L_q, L_k)"
        raise ValueError(
            f"mask of shape {_shape(mask)} cannot be broadcast to {what} of shape {tuple(target)}{expected}"
        )


def check_positive_int(name: str, value: object) -> int:
    """Require a size such as ``d_model`` or ``num_layers`` to be an int >= 1; return it as int.

    Anything with ``__index__`` counts as an int (``numpy.int64``, a 0-d integer tensor),
    a ``bool`` or a float such as ``2.0`` does not: ``MultiHeadAttention(8, 2.0)`` would
    otherwise be accepted and fail much later inside ``view``.
    """
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        raise ValueError(f"{name} must be a positive int, got {value!r} ({type(value).__name__})")
    number = operator.index(value)  # type: ignore[arg-type]
    if number < 1:
        raise ValueError(f"{name} must be a positive int, got {number}")
    return number


def check_floating(name: str, x: Tensor) -> None:
    """Activations must be floating point: an integer tensor would fail in a matmul."""
    if not x.is_floating_point():
        raise TypeError(
            f"{name} must be a floating-point tensor (e.g. torch.float32), got dtype {x.dtype}; "
            f"convert it with `{name}.float()`"
        )


def check_same_dtype(named: Iterable[tuple[str, Tensor]]) -> None:
    """Tensors that meet in one matmul need one dtype (torch says 'expected scalar type')."""
    named = list(named)
    for name, t in named:
        check_floating(name, t)
    dtypes = {t.dtype for _, t in named}
    if len(dtypes) > 1:
        listed = ", ".join(f"{name} {t.dtype}" for name, t in named)
        first = named[0][0]
        raise TypeError(
            f"{' and '.join(name for name, _ in named)} must have the same dtype, got {listed}; "
            f"convert them, e.g. `.to({first}.dtype)`"
        )


def check_module_dtype(name: str, x: Tensor, weight: Tensor, module: str) -> None:
    """An input must have the dtype of the module's weights (float64 into a float32 module)."""
    check_floating(name, x)
    if x.dtype != weight.dtype and not _autocast_on(x.device.type):
        raise TypeError(
            f"{name} has dtype {x.dtype} but the weights of this {module} are {weight.dtype}; "
            f"convert the input (`{name}.to({weight.dtype})`) or the module (`.to({x.dtype})`)"
        )


def _autocast_on(device_type: str) -> bool:
    """Inside ``torch.autocast`` a float16 input to a float32 module is intended."""
    try:
        return bool(torch.is_autocast_enabled(device_type))
    except TypeError:  # torch < 2.4 takes no argument (and means CUDA)
        return bool(torch.is_autocast_enabled())


def check_width(name: str, x: Tensor, d_model: int, what: str = "d_model") -> None:
    """The last dimension of ``x`` must be the module's width."""
    if x.size(-1) != d_model:
        raise ValueError(f"{name} must have last dimension {what} = {d_model}, got shape {_shape(x)}")


def check_nonempty(name: str, x: Tensor, dim: int, letter: str) -> None:
    """A sequence must hold at least one position (``letter`` names the length, e.g. L_src)."""
    if x.size(dim) == 0:
        raise ValueError(f"{name} must hold at least one position ({letter} >= 1), got shape {_shape(x)}")


def is_int(value: object) -> bool:
    """A Python ``int`` that is not a ``bool`` (``True`` is an int to Python, never a count here)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    """An ``int`` or ``float`` that is not a ``bool`` (NaN included: compare it yourself)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_int(name: str, value: object, low: int | None = None) -> int:
    """Require a Python int (not a bool) that is ``>= low``; return it.

    The message names the bound the way a reader says it: ``low=0`` "a non-negative
    int", ``low=1`` "a positive int", otherwise "an int >= low".
    """
    if not is_int(value) or (low is not None and value < low):  # type: ignore[operator]
        wanted = {None: "an int", 0: "a non-negative int", 1: "a positive int"}.get(low, f"an int >= {low}")
        raise ValueError(f"{name} must be {wanted}, got {value!r}")
    return value  # type: ignore[return-value]


def check_vocab_ids(tokens: Tensor, vocab_size: int) -> None:
    """Require ``tokens (B, L)`` of ``torch.long``/``torch.int`` ids in ``[0, vocab_size)``: what
    ``nn.Embedding(vocab_size, D)`` can look up (an embedding's and a language model's input)."""
    check_rank("tokens", tokens, 2, "(B, L) of token ids")
    if tokens.dtype not in (torch.long, torch.int):
        raise TypeError(f"tokens must be integer token ids (torch.long), got dtype {tokens.dtype}")
    if tokens.numel() > 0:
        low, high = int(tokens.min()), int(tokens.max())
        if low < 0 or high >= vocab_size:
            bad = low if low < 0 else high
            raise ValueError(
                f"token id {bad} is outside the vocabulary: ids must lie in "
                f"[0, {vocab_size - 1}] (vocab_size = {vocab_size})"
            )


def check_token_ids(name: str, x: object, rank: int | None = 2, letters: str = "(B, L)") -> None:
    """Require a tensor of integer token ids (not float, complex or bool), of ``rank``
    dimensions when ``rank`` is given (``letters`` spells the shape)."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids, got {type(x).__name__}")
    if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer token ids (torch.long), got dtype {x.dtype}")
    if rank is not None and x.dim() != rank:
        raise ValueError(f"{name} must have shape {letters} of token ids, got shape {_shape(x)}")


def check_optional_function(name: str, fn: Any) -> Any:
    """``fn`` (``None`` allowed: the reference is used); a clear ``TypeError`` for anything else
    that is not callable."""
    if fn is not None and not callable(fn):
        raise TypeError(f"{name} must be a function (or None for the reference), got {type(fn).__name__}")
    return fn


def names_used(fn: Callable[..., Any]) -> set[str]:
    """Global names a function's code (nested functions included) refers to. Here, not in the
    checkers: ``student_functions.choose_functions`` uses it too, and a graded kernel's
    ``course_utils.checks`` is a stand-in without them."""
    code = getattr(fn, "__code__", None)
    names: set[str] = set()
    stack = [code] if code is not None else []
    while stack:
        c = stack.pop()
        names.update(c.co_names)
        stack.extend(k for k in c.co_consts if hasattr(k, "co_names"))
    return names
