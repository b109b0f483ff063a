"""The exercises of notebook 07 (training), as references, and learning-rate schedules.

Each function is the reference for one exercise of notebook 07, written as the solution
cell writes it plus the input checks that name a wrong argument:

* :func:`shift_targets` - teacher forcing: the decoder reads ``tgt[:, :-1]`` and must
  predict ``tgt[:, 1:]`` (exercise ``shift_targets``).
* :func:`masked_cross_entropy` - the mean cross-entropy over the real (non-pad) target
  tokens, with optional label smoothing (exercise ``masked_cross_entropy``).
* :func:`noam_lr` - the paper's learning-rate schedule (exercise ``noam_lr``);
  :func:`warmup_schedule` wraps it, or a simpler warm-up shape, in a ``LambdaLR``.
* :func:`train_step` - one optimisation step on a :class:`~course_utils.data.Batch`
  (exercise ``train_step``).

The translator's training run calls these (the student's own where they pass their checks,
else these references). The run itself (``fit``, ``History``, ``evaluate``, ``predict``,
``mistakes``, ``RECIPE``) is :mod:`course_utils.translator_training`; which of the student's
four functions it trains with (``choose_functions``, ``yours_or_reference``) is
:mod:`course_utils.student_functions`.

Learning-rate schedules
-----------------------
The paper (section 5.3) uses::

    lr(step) = factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5),  step = 1, 2, ...

a linear warm-up over ``warmup`` steps to the peak ``factor * (d_model * warmup)^-0.5``,
then a decay proportional to ``step^-0.5``. Notebook 07 plots it. For the short runs of
the notebook, :func:`warmup_schedule` also offers the same warm-up followed by a
*linear* decay to zero at ``total_steps`` (``shape="linear"``), by an inverse square root
(``"inverse_sqrt"``, the paper's shape with the peak given directly as the optimizer's
``lr``), or by nothing (``"constant"``). See :func:`warmup_schedule` for how the
optimizer's ``lr`` combines with each shape.

Counting steps
--------------
``LambdaLR`` calls its function with ``0, 1, 2, ...``: ``0`` when it is built (the rate
of the first optimizer step) and ``k`` after ``k`` calls of ``scheduler.step()``. The
paper counts steps from 1, so :func:`warmup_schedule` passes ``k + 1`` to
:func:`noam_lr` (``noam_lr(0, ...)`` would divide by zero, and raises ``ValueError``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from . import data as _data
from ._validate import check_int, check_optional_function, check_token_ids, is_number
from .data import Batch

# --------------------------------------------------------------------------- exercises


def shift_targets(tgt: Tensor) -> tuple[Tensor, Tensor]:
    """Teacher forcing: ``(tgt_in, tgt_out) = (tgt[:, :-1], tgt[:, 1:])``.

    ``tgt (B, L_tgt)`` is ``<bos> w1 ... wn <eos> <pad>...``. The decoder reads
    ``tgt_in (B, L_tgt - 1)`` (everything but the last token) and, at each position
    ``t``, must predict ``tgt_out[:, t]`` (the token after ``tgt_in[:, t]``). With the
    causal mask, position ``t`` sees ``tgt[:, :t + 1]`` only, so it cannot copy its answer.
    """
    check_token_ids("tgt", tgt)
    if tgt.size(1) < 2:
        raise ValueError(
            f"tgt must have at least 2 tokens per row (<bos> and <eos>) to be shifted, got shape "
            f"{tuple(tgt.shape)}"
        )
    return tgt[:, :-1], tgt[:, 1:]  # (B, L_tgt - 1) each


def masked_cross_entropy(
    logits: Tensor, targets: Tensor, pad_id: int, label_smoothing: float = 0.0
) -> Tensor:
    """Mean cross-entropy over the target tokens that are not ``pad_id``.

    Args:
        logits: ``(B, L, V)`` unnormalised scores (no softmax applied).
        targets: ``(B, L)`` token ids in ``[0, V)``; positions equal to ``pad_id`` are
            ignored (they neither add to the sum nor to the count).
        pad_id: the padding id.
        label_smoothing: ``eps`` in ``[0, 1]``. The target distribution becomes
            ``(1 - eps) * one_hot + eps / V`` on all ``V`` classes (the correct one
            included), as in ``F.cross_entropy(label_smoothing=eps)``; per token the loss
            is ``(1 - eps) * (-log p_target) + eps * mean_v(-log p_v)``.

    Returns:
        A 0-d tensor (differentiable), equal to ``F.cross_entropy(logits.reshape(-1, V),
        targets.reshape(-1), ignore_index=pad_id, label_smoothing=eps)``. Like it, it is
        NaN when every target is padding (0 / 0).
    """
    if not isinstance(logits, Tensor) or not logits.is_floating_point() or logits.dim() < 2:
        raise ValueError(
            f"logits must be a float tensor (B, L, V), got "
            f"{tuple(logits.shape) if isinstance(logits, Tensor) else type(logits).__name__}"
        )
    check_token_ids("targets", targets, rank=None)
    if targets.shape != logits.shape[:-1]:
        raise ValueError(
            f"targets must have the shape of logits without the last axis: logits "
            f"{tuple(logits.shape)} (B, L, V) needs targets {tuple(logits.shape[:-1])} (B, L), got "
            f"{tuple(targets.shape)}. (The logits of tgt_in go with tgt_out, both L_tgt - 1 long.)"
        )
    V = logits.size(-1)
    real = targets != pad_id  # (B, L)
    if targets.numel() and bool(((targets[real] < 0) | (targets[real] >= V)).any()):
        raise ValueError(f"targets must be ids in [0, {V}) (V = logits.size(-1)), got values outside")
    if not 0.0 <= float(label_smoothing) <= 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing!r}")
    # from here on, the solution cell of notebook 07
    log_probs = logits.log_softmax(dim=-1)  # (B, L, V)
    # a pad id outside [0, V) (-100, say) is no index for gather: any valid one, dropped below
    safe = targets.masked_fill(~real, 0)  # (B, L)
    nll = -log_probs.gather(-1, safe.unsqueeze(-1)).squeeze(-1)  # (B, L): -log p(correct word)
    smooth = -log_probs.mean(dim=-1)  # (B, L): -1/V sum_v log p(v)
    per_position = (1 - label_smoothing) * nll + label_smoothing * smooth  # (B, L)
    # indexing, not multiplying by the mask: a pad position's value never enters, even if inf
    return per_position[real].mean()  # scalar: average over the real tokens only


def noam_lr(step: int, d_model: int, warmup: int, factor: float = 1.0) -> float:
    """The paper's schedule: ``factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)``.

    ``step`` counts optimizer steps from 1 (``ValueError`` for ``step < 1``: the formula
    divides by zero at 0). The rate grows linearly for ``warmup`` steps, peaks at step
    ``warmup`` with ``factor * (d_model * warmup)^-0.5``, then decays as ``step^-0.5``.
    ``noam_lr(4000, 512, 4000) = 7.0e-4`` (the paper's base model).
    """
    for name, value in (("step", step), ("d_model", d_model), ("warmup", warmup)):
        if not is_number(value) or math.isnan(value):
            raise ValueError(f"{name} must be a number, got {value!r}")
    if step < 1:
        raise ValueError(
            f"step must be >= 1 (the paper counts steps from 1; step**-0.5 is a division by zero "
            f"at 0), got {step!r}. LambdaLR counts from 0: pass step + 1."
        )
    if d_model <= 0 or warmup <= 0:
        raise ValueError(f"d_model and warmup must be positive, got d_model={d_model!r}, warmup={warmup!r}")
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


SCHEDULES = ("noam", "linear", "inverse_sqrt", "constant")


def lr_multiplier(
    shape: str,
    warmup: int,
    *,
    d_model: int | None = None,
    factor: float = 1.0,
    total_steps: int | None = None,
    noam: Callable[..., float] | None = None,
) -> Callable[[int], float]:
    """The function ``k -> multiplier`` that :func:`warmup_schedule` gives ``LambdaLR``.

    ``k = 0, 1, 2, ...`` is the number of optimizer steps already taken (``LambdaLR``'s
    count); step ``k + 1`` runs at ``optimizer lr * multiplier(k)``. ``noam``: the
    function ``(step, d_model, warmup, factor)`` behind ``shape="noam"`` (default
    :func:`noam_lr`; notebook 07 passes the student's).
    """
    check_int("warmup", warmup, low=1)
    if shape not in SCHEDULES:
        raise ValueError(f"shape must be one of {SCHEDULES}, got {shape!r}")
    if shape == "noam":
        if d_model is None:
            raise ValueError("shape='noam' needs d_model")
        formula = noam_lr if noam is None else check_optional_function("noam", noam)
        return lambda k: formula(k + 1, d_model, warmup, factor)
    if shape == "linear":
        if total_steps is None:
            raise ValueError("shape='linear' needs total_steps (the step at which the rate reaches 0)")
        check_int("total_steps", total_steps, low=warmup + 1)
        # step s = k + 1: s / warmup up to 1 at s = warmup, then a straight line that would
        # reach 0 at s = total_steps + 1, so the last step still moves
        return lambda k: min((k + 1) / warmup, max(0.0, (total_steps - k) / (total_steps - warmup + 1)))
    if shape == "inverse_sqrt":
        return lambda k: min((k + 1) / warmup, math.sqrt(warmup / (k + 1)))
    return lambda k: min((k + 1) / warmup, 1.0)


def warmup_schedule(
    optimizer: torch.optim.Optimizer,
    warmup: int,
    shape: str = "noam",
    *,
    d_model: int | None = None,
    factor: float = 1.0,
    total_steps: int | None = None,
    noam: Callable[..., float] | None = None,
) -> torch.optim.lr_scheduler.LambdaLR:
    """A ``LambdaLR`` with linear warm-up over ``warmup`` steps; call ``.step()`` after
    each ``optimizer.step()``.

    ``LambdaLR`` multiplies the optimizer's ``lr`` by a function of the step:

    * ``"noam"``: the paper's :func:`noam_lr` (``d_model`` required; ``noam`` replaces
      the formula by another function of the same signature). The function *is*
      the learning rate, so build the optimizer with ``lr=1.0``, as the paper's
      reference code does.
    * ``"linear"``: ``step / warmup`` up to 1 at step ``warmup``, then linearly down to
      ``1 / (total_steps - warmup + 1)`` at step ``total_steps`` (required; the line
      reaches 0 one step later): the optimizer's ``lr`` is the peak.
    * ``"inverse_sqrt"``: the paper's shape with the optimizer's ``lr`` as the peak:
      ``sqrt(warmup / step)`` after the warm-up.
    * ``"constant"``: warm-up, then the optimizer's ``lr``.

    Steps are counted from 1 (``LambdaLR``'s ``k`` from 0, so the function gets
    ``k + 1``): the first step runs at ``1 / warmup`` of the peak, never at 0.
    """
    multiplier = lr_multiplier(shape, warmup, d_model=d_model, factor=factor, total_steps=total_steps, noam=noam)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, multiplier)


def train_step(
    model: nn.Module,
    batch: Batch,
    optimizer: torch.optim.Optimizer,
    scheduler: Any | None = None,
    pad_id: int = _data.PAD_ID,
    label_smoothing: float = 0.0,
    clip_norm: float | None = 1.0,
) -> float:
    """One optimisation step with teacher forcing; returns the loss (a Python float).

    1. ``model.train()`` (dropout on: an earlier evaluation may have left it off);
    2. ``optimizer.zero_grad()`` (else the gradients of every step add up);
    3. logits of ``batch.tgt_in`` given ``batch.src``, with ``batch.src_mask`` and
       ``batch.tgt_mask``: ``(B, L_tgt - 1, V)``;
    4. :func:`masked_cross_entropy` against ``batch.tgt_out`` (pad tokens ignored);
    5. ``loss.backward()``; clip the gradients' global norm to ``clip_norm`` (``None``:
       no clipping) *before* the update;
    6. ``optimizer.step()``, then ``scheduler.step()`` when a scheduler is given.
    """
    return train_step_with_loss(
        model, batch, optimizer, scheduler, pad_id, label_smoothing, clip_norm, masked_cross_entropy
    )


def train_step_with_loss(
    model: nn.Module,
    batch: Batch,
    optimizer: torch.optim.Optimizer,
    scheduler: Any | None,
    pad_id: int,
    label_smoothing: float,
    clip_norm: float | None,
    loss_fn: Callable[..., Tensor],
) -> float:
    """:func:`train_step` with the loss function as an argument (:func:`~course_utils.translator_training.fit`
    passes the student's ``masked_cross_entropy`` to the reference step this way). The body
    is the solution cell's."""
    model.train()
    optimizer.zero_grad()
    logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)  # (B, L_tgt - 1, V)
    loss = loss_fn(logits, batch.tgt_out, pad_id, label_smoothing)
    loss.backward()
    if clip_norm is not None:
        nn.utils.clip_grad_norm_(model.parameters(), clip_norm)  # after backward, before the update
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    return loss.item()


# The references, under names that fit's and choose_functions' arguments do not hide.
REFERENCES: dict[str, Callable[..., Any]] = dict(
    shift_targets=shift_targets, masked_cross_entropy=masked_cross_entropy, noam_lr=noam_lr, train_step=train_step
)

__all__ = [
    "SCHEDULES",
    "REFERENCES",
    "shift_targets",
    "masked_cross_entropy",
    "noam_lr",
    "lr_multiplier",
    "warmup_schedule",
    "train_step",
    "train_step_with_loss",
]
