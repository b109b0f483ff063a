"""Checkers for notebook 07 (training): ``shift_targets``, ``masked_cross_entropy``,
``noam_lr`` and ``train_step``. docs/course-contract.md says what each verifies; each
exercise's mistakes are one catalogue table (``SHIFT``, ``MCE``, ``NOAM``, ``TRAIN_STEP``), in
the order they are tried.

``shift_targets``: random targets with trailing padding (``B != L_tgt``), compared exactly
with ``(tgt[:, :-1], tgt[:, 1:])``.

``masked_cross_entropy``: random logits ``(B, L, V)`` (all sizes different), targets with
trailing padding, a non-zero ``pad_id`` with real tokens of id 0 and a non-contiguous slice
for targets (as ``batch.tgt_out`` is); without and with label smoothing; then extreme
logits (``[0, -120, 0]`` and one of 100: ``log(softmax(x))`` is not finite) and a pad
position with a ``-inf`` pad logit (a mask multiplied in gives ``inf * 0 = nan``). The
result: a differentiable 0-d tensor in the logits' dtype equal to ``F.cross_entropy(...,
ignore_index=pad_id, label_smoothing=eps)``; a wrong value is compared with the loss
computed with each catalogued mistake, nearest first.

``noam_lr``: random ``d_model``, ``warmup`` and ``factor`` at steps 1, 2, around the end of
the warm-up and far after it; a Python float.

``train_step``: a small :class:`course_utils.Transformer` and batches of
:func:`course_utils.data.collate`; plain SGD (Adam's update hardly changes when the gradient
is scaled, which would hide a missing clipping) with a ``LambdaLR`` that halves the rate
at every step, and gradients left over from an earlier backward pass (a missing
``zero_grad`` shows from the first call). The cases are ``_STEP_CASES``; in each, two calls
are compared one by one with the reference simulated with each catalogued mistake (cached
on the draw, which the checks of one seed share): the returned loss (a Python float),
every parameter (``atol=1e-6``; the updates are about ``1e-2``), the scheduler's step
count, the dtype backward ran on, and train mode after the call. No gradient from before
the call may reach the update: ``zero_grad`` after ``step`` is "misplaced", not "forgotten".
"""

from __future__ import annotations

import copy
import functools
import inspect
import math
import warnings
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._validate import names_used
from ..data import collate
from ..model import Transformer, make_tgt_mask
from ..training import masked_cross_entropy, noam_lr
from ._core import (
    Failure,
    Mistake,
    StudentError,
    call_student,
    check_unchanged,
    checker,
    describe_shape,
    drawn_once,
    equal,
    expect_close,
    fail,
    fail_view_error,
    isfinite,
    matches,
    module_copy,
    own_helper_failure,
    randint,
    register_hints,
    require_function,
)
from .catalogue import Catalogue, Entry, Output, Probe, Raises, Reference

__all__ = ["check_shift_targets", "check_masked_cross_entropy", "check_noam_lr", "check_train_step"]


def _distinct(*sizes: int) -> bool:
    return len(set(sizes)) == len(sizes)


def _ids(shape: tuple[int, ...], vocab: int, avoid: int) -> Tensor:
    """Random ids in ``[0, vocab)`` that are never ``avoid``."""
    ids = torch.randint(0, vocab - 1, shape)
    return ids + (ids >= avoid).long()


_LIBRARY_LOSSES = frozenset({"cross_entropy", "CrossEntropyLoss", "masked_cross_entropy"})


def _loss_by_hand(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` (with the functions of its own module it calls or closes over) computes the
    cross-entropy itself, without a library loss that takes label_smoothing (whose argument is then
    the one to pass on)."""
    names: set[str] = set()
    seen: set[int] = set()
    stack = [fn]
    while stack:
        f = stack.pop()
        if id(f) in seen:
            continue
        seen.add(id(f))
        used = names_used(f)
        names |= used
        known = getattr(f, "__globals__", {})
        cells = []
        for cell in getattr(f, "__closure__", None) or ():
            try:
                cells.append(cell.cell_contents)
            except ValueError:  # an empty cell
                continue
        stack += [g for g in [known.get(n) for n in used] + cells
                  if inspect.isfunction(g) and g.__module__ == getattr(fn, "__module__", None)]
    return not names & _LIBRARY_LOSSES


def _view_error(exc: BaseException) -> None:
    fail_view_error(exc, "batch.tgt_out is the slice tgt[:, 1:] of a bigger tensor, and .view cannot flatten a slice",
                    ".reshape(-1) (or .flatten()), which copies when it has to")


# ---------------------------------------------------------------- shift_targets
def _targets_with_padding(B: int, L: int, vocab: int = 20, pad_id: int = 0) -> Tensor:
    """``(B, L)``: ``<bos>`` (1), words, ``<eos>`` (2), then ``pad_id``; lengths differ."""
    tgt = torch.randint(4, vocab, (B, L))  # (B, L)
    lengths = torch.randint(3, L + 1, (B,))  # (B,) tokens including <bos> and <eos>
    lengths[randint(1, B - 1)] = L  # one full row
    lengths[0] = min(int(lengths[0]), L - 1)  # and a padded one
    positions = torch.arange(L)[None, :]  # (1, L)
    tgt[:, 0] = 1
    tgt = torch.where(positions == (lengths[:, None] - 1), torch.full_like(tgt, 2), tgt)
    return torch.where(positions >= lengths[:, None], torch.full_like(tgt, pad_id), tgt)


def _wrong_return(got: Any) -> dict[str, str] | None:
    """Not a pair: what came back instead, in words."""
    if isinstance(got, (tuple, list)) and len(got) == 2:
        return None
    what = f"one tensor of shape {describe_shape(got)}" if isinstance(got, Tensor) else (
        f"a {type(got).__name__} of {len(got)}" if isinstance(got, (tuple, list)) else type(got).__name__)
    return dict(what=what)


def _not_tensors(got: Any) -> dict[str, str] | None:
    """A pair of lists or arrays (``.tolist()``, ``.numpy()``): their kinds, in words."""
    if isinstance(got, (tuple, list)) and len(got) == 2 and not all(isinstance(t, Tensor) for t in got):
        kinds = " and ".join(dict.fromkeys(f"{type(t).__name__}s" for t in got))  # lists, ints
        return dict(type=type(got).__name__, kinds=kinds)
    return None


def _cast_slices(c: Any) -> dict[str, Any] | None:
    """The right ids in another dtype than tgt's: which of the two, and the dtype."""
    cast = [(n, t.dtype) for n, t in (("tgt_in", c.got_in), ("tgt_out", c.got_out)) if t.dtype != c.tgt.dtype]
    if not cast:
        return None
    return dict(which=" and ".join(n for n, _ in cast), verb="have" if len(cast) == 2 else "has", dtype=cast[0][1])


_COPY = ("so the model learns to copy its input (the training loss falls near zero) and greedy decoding, "
         "which has no answer to copy, fails. The decoder reads tgt[:, :-1] and predicts tgt[:, 1:].")


def _pairs(make: Callable[[Any], list[tuple[Tensor, Tensor]]]) -> Reference:
    """The ``(tgt_in, tgt_out)`` pairs a mistake gives (one candidate; none when it cannot show)."""
    def build(c: Any) -> list:
        pairs = make(c)
        return [({}, pairs)] if pairs else []
    return Reference(build, "pairs")


def _prepended(c: Any) -> Tensor | None:
    """(B, L - 1): the student's start token, then tgt moved right (only when tgt_in has that shape)."""
    return torch.cat([c.got_in[:, :1], c.tgt[:, :-2]], 1) if c.got_in.shape == c.exp_in.shape else None


SHIFT = Catalogue("shift_targets", "07", [
    Entry("not a function", None, Probe("require_function")),
    Entry("input modified in place", None, Probe("check_unchanged")),
    Entry("not a tensor", None, Output(_not_tensors, "return"),
          "shift_targets returned a {type} of {kinds}, not of tensors ({case}): return the slices themselves, "
          "tgt[:, :-1] and tgt[:, 1:] (no .tolist() or .numpy()): the model and the loss take tensors."),
    Entry("wrong return", None, Output(_wrong_return, "return"),
          "shift_targets should return two tensors, (tgt_in, tgt_out); yours returned {what}. End with `return "
          "tgt_in, tgt_out`."),
    Entry("dtype not preserved", None, Output(_cast_slices, "dtype"),
          "your {which} {verb} the right ids but dtype {dtype} ({case}); tgt is {tgt_dtype}. Leave out the cast "
          "(.float(), .to(...)): slicing keeps the dtype, and nn.Embedding and the loss need integer ids."),
    # the (tgt_in, tgt_out) pairs of a mistake, in the order tried
    Entry("not shifted", "targets not shifted", _pairs(lambda c: [(c.tgt, c.tgt)]),
          "tgt_in and tgt_out are both the whole tgt: the targets are not shifted. At each position the decoder "
          "would read the very token it must predict there, " + _COPY),
    Entry("shifted the wrong way", "input and output slices exchanged",
          _pairs(lambda c: [(c.exp_out, c.exp_in)]),
          "the shift goes the wrong way: your tgt_in is tgt[:, 1:] (it starts after <bos>) and tgt_out is "
          "tgt[:, :-1]. The decoder must read <bos> first and predict the *next* token: tgt_in = tgt[:, :-1] (drop "
          "the last token), tgt_out = tgt[:, 1:] (drop <bos>)."),
    Entry("shifted along the batch axis", "the slice runs along the batch axis",
          _pairs(lambda c: [(c.tgt[:-1], c.tgt[1:]), (c.tgt[1:], c.tgt[:-1])]),
          "you shifted along the batch axis: tgt[:-1] drops a whole sequence. tgt is (B, L_tgt): shift along the time "
          "axis, tgt[:, :-1] and tgt[:, 1:]."),
    Entry("the same slice twice", "tgt_in and tgt_out are the same slice", Reference(
        lambda c: [(dict(both=both), [(t, t)]) for t, both in ((c.exp_in, "tgt[:, :-1]"), (c.exp_out, "tgt[:, 1:]"))],
        "pairs"),
          "tgt_in and tgt_out are the same slice, {both}: each position is asked for the very token it reads, "
          + _COPY),
    Entry("<eos> replaced by pad in tgt_in", "tgt_in's <eos> replaced by the pad id (Hugging Face's habit)",
          _pairs(lambda c: [(c.exp_in.masked_fill(c.exp_in == 2, 0), c.exp_out)]),  # <eos> 2, pad 0
          "your tgt_in has <pad> where tgt has <eos> (the <eos> of a shorter target, which tgt[:, :-1] keeps), as "
          "code that strips <eos> from the decoder's input does (Hugging Face's habit). The loss would not notice "
          "(the target there is <pad>), but collate, the mask made from tgt_in and this exercise take the slices "
          "unchanged: tgt_in = tgt[:, :-1], tgt_out = tgt[:, 1:], with no replacing."),
    Entry("padding labels set to -100", "shift_targets writes Hugging Face's -100 labels where tgt_out has <pad>",
          _pairs(lambda c: [(c.exp_in, c.exp_out.masked_fill(c.exp_out == 0, -100))]),  # pad 0
          "your tgt_out has -100 where tgt has <pad> (Hugging Face's labels, the default ignore_index of "
          "F.cross_entropy). Here the padding stays pad_id in tgt_out and the loss is told which id to ignore "
          "(masked_cross_entropy's pad_id): tgt_in = tgt[:, :-1], tgt_out = tgt[:, 1:], with no replacing."),
    # fairseq's prev_output_tokens: tgt rolled right with a start token in front, whatever that token,
    # tgt_out then tgt[:, :-1] (fairseq) or tgt[:, 1:] (the start token added on top of the shift)
    Entry("start token prepended again",
          "tgt_in built as fairseq's prev_output_tokens (tgt rolled right, a start token in front), tgt_out = "
          "tgt[:, :-1]",
          _pairs(lambda c: [(p, c.exp_in) for p in (_prepended(c),) if p is not None]),
          "your tgt_in is tgt moved one place to the right with a start token in front (fairseq's "
          "prev_output_tokens, torch.roll) and your tgt_out is tgt[:, :-1]. Here tgt already starts with <bos>: "
          "nothing is added, the two slices are the shift: tgt_in = tgt[:, :-1], tgt_out = tgt[:, 1:]."),
    Entry("start token prepended again", None,
          _pairs(lambda c: [(p, c.exp_out) for p in (_prepended(c),) if p is not None]),
          "your tgt_in starts with <bos> twice: a start token is put in front of tgt, which already begins with <bos> "
          "(collate put it there), so every token comes one place late. Add nothing: tgt_in = tgt[:, :-1], tgt_out = "
          "tgt[:, 1:]."),
    Entry("rolled with torch.roll", "tgt_in or tgt_out rolled by one place with torch.roll on top of the slice",
          _pairs(lambda c: [(c.exp_in, c.exp_out.roll(k, 1)) for k in (1, -1)]
                 + [(c.exp_in.roll(k, 1), c.exp_out) for k in (1, -1)]),
          "one of the two is rolled by one place (torch.roll wraps the token that falls off one end around to the "
          "other): the slices themselves are the shift. tgt_in = tgt[:, :-1], tgt_out = tgt[:, 1:], with no roll."),
    Entry("only one side shifted", "only one of tgt_in and tgt_out is sliced",
          _pairs(lambda c: [(c.exp_in, c.tgt), (c.tgt, c.exp_out), (c.tgt[:, 1:], c.tgt), (c.tgt, c.tgt[:, :-1])]),
          "only one of the two is shifted: tgt_in has shape {shape_in} and tgt_out {shape_out}. Both must have L_tgt "
          "- 1 = {L_1} columns: tgt_in = tgt[:, :-1] and tgt_out = tgt[:, 1:]."),
])


@checker("shift_targets")
def check_shift_targets(fn: Callable[..., Any]) -> str:
    require_function(fn, "shift_targets")
    for _ in range(2):
        while True:
            B, L = randint(2, 6), randint(5, 10)
            if _distinct(B, L, L - 1):
                break
        tgt = _targets_with_padding(B, L)
        tgt0 = tgt.clone()
        case = f"tgt of shape ({B}, {L})"
        got = call_student(fn, tgt, context=f"calling shift_targets({case})")
        check_unchanged(["tgt"], [tgt], [tgt0], case)
        SHIFT.detect("return", got, case=case)
        got_in, got_out = got
        exp_in, exp_out = tgt0[:, :-1], tgt0[:, 1:]  # (B, L - 1) each

        def same(a: Tensor, b: Tensor) -> bool:
            return a.shape == b.shape and bool(equal(a.long(), b))

        c = SimpleNamespace(tgt=tgt0, got_in=got_in, got_out=got_out, exp_in=exp_in, exp_out=exp_out)
        if same(got_in, exp_in) and same(got_out, exp_out):
            SHIFT.detect("dtype", c, case=case, tgt_dtype=tgt0.dtype)
            continue
        for name, words, pairs in SHIFT.candidates(c, "pairs", shape_in=describe_shape(got_in),
                                                   shape_out=describe_shape(got_out), L_1=L - 1):
            if any(same(got_in, a) and same(got_out, b) for a, b in pairs):
                fail(f"{words} ({case})", mistake=name)
        expect_close("tgt_in", got_in, exp_in, atol=0, rtol=0, case=case)
        expect_close("tgt_out", got_out, exp_out, atol=0, rtol=0, case=case)
    return "tgt_in = tgt[:, :-1], tgt_out = tgt[:, 1:]"


# ---------------------------------------------------------------- masked_cross_entropy
def _smoothed_ce(logits: Tensor, targets: Tensor, pad_id: int, q_fn: Callable[[Tensor], Tensor],
                 kl: bool = False) -> Tensor:
    """Cross-entropy of ``softmax(logits)`` against a target distribution ``q_fn(targets)``
    ``(N, V)``, over the non-pad tokens."""
    V = logits.size(-1)
    logp = logits.reshape(-1, V).log_softmax(-1)  # (N, V)
    t = targets.reshape(-1)  # (N,)
    q = q_fn(t)  # (N, V)
    per = -(q * logp).sum(-1)  # (N,)
    if kl:
        per = per + (q * q.clamp_min(1e-30).log()).sum(-1)  # minus the entropy of q
    return per[t != pad_id].mean()


def _log_probs_loss(logp: Tensor, targets: Tensor, pad_id: int, eps: float) -> Tensor:
    """The smoothed cross-entropy computed from given log-probabilities ``(B, L, V)``, over the
    non-pad tokens: (1 - eps) * nll + eps * mean of -log p."""
    nll = -logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (B, L)
    per = (1 - eps) * nll - eps * logp.mean(-1)  # (B, L)
    return per[targets != pad_id].mean()


@dataclass
class _LossCase:
    """One case of masked_cross_entropy (the pristine logits and targets) and the pieces the
    mistakes' losses are built from."""

    logits: Tensor  # (B, L, V)
    targets: Tensor  # (B, L)
    pad_id: int
    eps: float
    by_hand: bool = False  # the loss computed without a library loss (_loss_by_hand)

    def __post_init__(self) -> None:
        self.B, self.L, self.V = self.logits.shape
        self.flat_logits, self.flat_t = self.logits.reshape(-1, self.V), self.targets.reshape(-1)  # (B*L, V), (B*L,)
        self.real = self.targets != self.pad_id  # (B, L)

    def per_token(self, x: Tensor | None = None, e: float | None = None) -> Tensor:
        """(B, L): each position's loss (pad positions included) of logits ``x`` with smoothing ``e``."""
        x = self.logits if x is None else x
        return F.cross_entropy(x.reshape(-1, self.V), self.flat_t, reduction="none",
                               label_smoothing=self.eps if e is None else e).reshape(self.B, self.L)

    def ce(self, **kwargs: Any) -> Tensor:
        return F.cross_entropy(self.flat_logits, self.flat_t, **{"label_smoothing": self.eps, **kwargs})

    def smoothed(self, q: Callable[[Tensor], Tensor], kl: bool = False) -> Tensor:
        return _smoothed_ce(self.logits, self.targets, self.pad_id, q, kl)

    def one_hot_q(self, spread: str) -> Callable[[Tensor], Tensor]:
        eps, V, pad_id = self.eps, self.V, self.pad_id

        def q(t: Tensor) -> Tensor:
            onehot = F.one_hot(t, V).float()  # (N, V)
            if spread == "others":
                return (1 - eps) * onehot + eps / (V - 1) * (1 - onehot)
            if spread == "no pad":  # The Annotated Transformer's LabelSmoothing
                dist = torch.full_like(onehot, eps / (V - 2))
                dist[:, pad_id] = 0
                return dist.scatter(1, t[:, None], 1 - eps)
            return (1 - eps) * onehot + eps / V  # "all": the reference's
        return q

    def q(self, correct: float, others: float) -> Callable[[Tensor], Tensor]:
        """A target distribution: ``correct`` on the target's class, ``others`` on every other one."""
        return lambda t: others + (correct - others) * F.one_hot(t, self.V).float()  # (N, V)

    def without_pad(self, t: Tensor) -> Tensor:  # (N, V): eps / (V - 1) on every word but <pad>
        eps, V = self.eps, self.V
        out = self.q(1 - eps + eps / (V - 1), eps / (V - 1))(t)
        out[:, self.pad_id] = 0.0
        return out

    def smoothing_over_all(self) -> Tensor:
        logp = self.logits.log_softmax(-1)  # (B, L, V)
        nll = -logp.gather(-1, self.targets.unsqueeze(-1)).squeeze(-1)  # (B, L)
        return (1 - self.eps) * nll[self.real].mean() - self.eps * logp.mean(-1).mean()


def _loss(make: Callable[[_LossCase], Tensor], when: Callable[[_LossCase], bool] = lambda c: True) -> Reference:
    """One candidate loss, ``make(case)``, computed when asked for (none unless ``when(case)``)."""
    return Reference(lambda c: [({}, lambda: make(c))] if when(c) else [], "loss")


def _smoothing(make: Callable[[_LossCase], Tensor]) -> Reference:
    """A smoothing mistake: it shows only with label smoothing on."""
    return _loss(make, lambda c: c.eps > 0)


def _first_line(exc: BaseException) -> dict[str, str]:
    return dict(type=type(exc).__name__, line=(str(exc).splitlines() or [""])[0])


def _finite_where_reference_is(flag: str) -> Callable[[Any], Any]:
    """The student's loss is not finite on the case with ``flag`` (the right loss is)."""
    def test(c: Any) -> Any:
        got = c.got
        return (getattr(c, flag) and isinstance(got, Tensor) and got.numel() == 1
                and not bool(isfinite(got.detach()).all()) and dict(value=float(got.detach())))
    return test


def _python_number(c: Any) -> Any:
    got = c.got
    if not isinstance(got, (float, int)) or isinstance(got, bool):
        return None
    right = math.isclose(float(got), float(c.expected), rel_tol=1e-4, abs_tol=1e-5)
    return dict(right=" (with the right value)" if right else "")


def _not_reduced(c: Any) -> Any:
    got = c.got
    if not isinstance(got, Tensor) or got.dim() == 0:
        return None
    shaped = got.shape in (c.per_shape, torch.Size([c.B, c.L]))
    return dict(shape=describe_shape(got), why=": it looks like the per-token losses (reduction='none'). Average "
                "them over the real tokens." if shaped else ".")


MCE = Catalogue("masked_cross_entropy", "07", [
    Entry("not a function", None, Probe("require_function")),
    Entry("view on a non-contiguous tensor", None, Probe("fail_view_error")),
    Entry("input modified in place", None, Raises("leaf Variable that requires grad", (RuntimeError,)),
          "your code raised {type}: {line_stripped}: it changes the logits in place (logits -= ..., "
          "logits.sub_(...)). Autograd refuses that on a tensor whose gradient it needs, and the caller still needs "
          "its logits: build a new tensor, x = logits - logits.max(dim=-1, keepdim=True).values, or leave the max to "
          "log_softmax, which subtracts it itself."),
    Entry("classes on the wrong axis", "cross_entropy given classes on the wrong axis",
          Raises("Expected target size|only batches of spatial targets", (RuntimeError, ValueError)),
          "your code raised {type}: {line}. F.cross_entropy expects the classes on axis 1: (N, V) logits and (N,) "
          "targets. Flatten them first: logits.reshape(-1, V) and targets.reshape(-1) (or pass "
          "logits.transpose(1, 2))."),
    Entry("input modified in place", None, Probe("check_unchanged")),
    Entry("not a tensor", None, Output(_python_number, "result"),
          "your loss ({case}) is a Python number{right}: return the tensor itself, not loss.item(), so that "
          "loss.backward() can follow it back to the model's parameters."),
    Entry("not reduced", "the loss is not reduced to a scalar", Output(_not_reduced, "result"),
          "your loss ({case}) has shape {shape}; it must be a single number, a 0-d tensor{why}"),
    Entry("log of softmax", "log(softmax(...)) instead of log_softmax: not finite on extreme logits",
          Output(_finite_where_reference_is("extreme"), "result"),
          "your loss is {value} ({case}), though the right one, {expected:.2f}, is finite: log(softmax(x)) underflows "
          "(or exp overflows). For logits like [0, -120, 0] softmax gives exactly 0 in float32 and log(0) = -inf; "
          "exp(100) is inf in float32. Use log_softmax (F.log_softmax, or F.cross_entropy, which uses it): it "
          "computes x - logsumexp(x) without ever forming the tiny probability."),
    Entry("pad positions reach the sum", "padding zeroed by multiplying with the mask: an infinite pad loss gives nan",
          Output(_finite_where_reference_is("pad_inf"), "result"),
          "your loss is {value} ({case}); the right one, {expected:.4f}, ignores the pad positions whatever their "
          "logits. The pad positions reach your sum: multiplied by a 0/1 mask, their infinite loss gives inf * 0 = "
          "nan. Select the real positions instead (per_position[targets != pad_id], or torch.where), do not "
          "multiply."),
    # the loss computed with each mistake (tried nearest first: _nearest_first)
    Entry("sign flipped", "the loss has the wrong sign (log-likelihood instead of its negative)",
          _loss(lambda c: -c.ce(ignore_index=c.pad_id)),
          "your loss is the reference's with the sign flipped: the log-likelihood, not its negative. Training would "
          "push the probability of the right words down. The loss of a position is -log p(target)."),
    Entry("padding in the sum only", "the pad positions' losses summed, then divided by the real-token count",
          _loss(lambda c: c.per_token().sum() / c.real.sum()),
          "the padding is left out of the count but not out of the sum: the pad positions' losses are summed and "
          "divided by the number of real tokens. Leave them out of both: select the real positions "
          "(per_position[targets != pad_id]) and take their mean."),
    Entry("only the padding counted",
          "the loss averages the pad positions only (targets == pad_id: the selection inverted)",
          _loss(lambda c: c.per_token()[~c.real].mean()),
          "your loss is the mean over the padding positions only, the real tokens left out: the selection is "
          "inverted (targets == pad_id keeps the padding). Keep the real tokens: per_position[targets != "
          "pad_id].mean()."),
    Entry("padding counted", "padding positions count in the loss", _loss(lambda c: c.ce()),
          "the padding positions are counted: you averaged over every position, pad tokens included. Ignore the "
          "targets equal to pad_id (F.cross_entropy(..., ignore_index=pad_id), or mask them out and divide by the "
          "number of real tokens)."),
    Entry("divided by all positions", "the loss sum divided by all positions, padding included",
          _loss(lambda c: (c.per_token() * c.real).sum() / c.real.numel()),
          "the padding is left out of the sum but not out of the count: you divided by all B * L positions. Divide "
          "by the number of real (non-pad) target tokens."),
    Entry("divided by the batch size", "the loss divided by B instead of the token count",
          _loss(lambda c: (c.per_token() * c.real).sum() / c.B),
          "you divided the summed loss by the batch size B: the padding then still shapes the loss (a batch with "
          "more padding gets a smaller loss). Divide by the number of real (non-pad) target tokens."),
    Entry("sum instead of mean", "a sum instead of a mean", _loss(lambda c: c.per_token()[c.real].sum()),
          "your loss is the sum over the target tokens, not their mean: it grows with the batch and with the "
          "lengths, and the learning rate would have to follow. Divide by the number of real tokens."),
    Entry("summed with the padding",
          "the loss summed over every position, padding included, instead of averaged over the real tokens",
          _loss(lambda c: c.per_token().sum()),
          "your loss is the sum over every position, padding included: the pad positions are not left out and "
          "nothing is divided, so the loss grows with the batch, the lengths and the padding. Leave the pad "
          "positions out and average over the real tokens: F.cross_entropy(..., ignore_index=pad_id), with its "
          "default reduction='mean'."),
    Entry("mean of per-sequence means", "the mean of per-sequence means instead of a mean over tokens",
          _loss(lambda c: ((c.per_token() * c.real).sum(1) / c.real.sum(1)).mean()),
          "you averaged each sequence's tokens, then the sequences: a short sequence's tokens then weigh more than a "
          "long one's. Average over all real target tokens of the batch at once."),
    Entry("double softmax", "a softmax before cross_entropy",
          _loss(lambda c: c.per_token(c.logits.softmax(-1))[c.real].mean()),
          "your logits go through a softmax before the cross-entropy, which applies (log-)softmax itself: a double "
          "softmax squashes the loss and its gradients. Pass the raw logits."),
    Entry("log-softmax over the wrong axis", "log_softmax over the positions or the batch instead of the vocabulary",
          Reference(
        lambda c: [(dict(dim=dim, what=what),
                    lambda dim=dim: _log_probs_loss(c.logits.log_softmax(dim), c.targets, c.pad_id, c.eps))
                   for dim, what in ((1, "the positions"), (0, "the batch"))], "loss"),
          "your log_softmax runs over axis {dim} ({what}), not over the vocabulary: each position's probabilities "
          "must sum to 1 over its V words, log_softmax(dim=-1)."),
    Entry("no log-softmax", "cross-entropy on raw logits without log_softmax",
          _loss(lambda c: (-c.logits.gather(-1, c.targets.unsqueeze(-1)).squeeze(-1))[c.real].mean()),
          "you used F.nll_loss on the raw logits: nll_loss expects log-probabilities. Use F.cross_entropy (which "
          "applies log_softmax itself) or apply log_softmax first."),
    Entry("hard-coded pad id", None, _loss(lambda c: c.ce(ignore_index=0), lambda c: c.pad_id != 0),
          "padding is recognised by the id 0 instead of pad_id (here {pad_id}): real tokens with id 0 are ignored "
          "and the padding is counted. Use the pad_id argument (ignore_index=pad_id)."),
    # a loss written by hand is told how to add the smoothing term, not to pass an argument on
    Entry("label smoothing ignored", "label_smoothing has no effect",
          _loss(lambda c: c.per_token(e=0.0)[c.real].mean(), lambda c: c.eps > 0 and c.by_hand),
          "label_smoothing={eps} has no effect: your loss, written by hand, is the one without smoothing (the nll of "
          "the correct word only). Add the smoothing term: at each position (1 - eps) * nll + eps * "
          "(-log_probs.mean(dim=-1)), then the mean over the real tokens."),
    Entry("label smoothing ignored", None,
          _loss(lambda c: c.per_token(e=0.0)[c.real].mean(), lambda c: c.eps > 0 and not c.by_hand),
          "label_smoothing={eps} has no effect: your loss is the one without smoothing. Pass it on "
          "(F.cross_entropy(..., label_smoothing=label_smoothing))."),
    Entry("label smoothing applied twice", "label smoothing applied twice",
          _smoothing(lambda c: c.per_token(e=1 - (1 - c.eps) ** 2)[c.real].mean()),
          "the label smoothing is applied twice (for example smoothed targets given to a cross-entropy that smooths "
          "again): apply it once."),
    Entry("smoothing over the other classes only", "smoothing spread over the other classes only",
          _smoothing(lambda c: c.smoothed(c.one_hot_q("others"))),
          "your smoothing spreads eps over the V - 1 wrong classes and gives the correct one 1 - eps. The convention "
          "here (F.cross_entropy's, the paper's) spreads eps uniformly over all V classes, the correct one included: "
          "the target is (1 - eps) * one_hot + eps / V."),
    Entry("smoothing without the padding class", "smoothing leaves out the padding class",
          _smoothing(lambda c: c.smoothed(c.one_hot_q("no pad"))),
          "your smoothing leaves out the padding class (eps / (V - 2) on the other wrong classes, as in The "
          "Annotated Transformer). The convention here is F.cross_entropy's: eps spread over all V classes, target "
          "(1 - eps) * one_hot + eps / V."),
    Entry("smoothing without the padding class", None,
          _smoothing(lambda c: c.smoothed(c.one_hot_q("no pad"), kl=True)),
          "your smoothing leaves out the padding class and uses the KL divergence (The Annotated Transformer's "
          "LabelSmoothing with KLDivLoss). Here the loss is F.cross_entropy's: the target (1 - eps) * one_hot + eps "
          "/ V over all V classes, and cross-entropy, not KL."),
    Entry("smoothing term summed", "the smoothing term summed instead of averaged",
          _smoothing(lambda c: c.smoothed(lambda t: (1 - c.eps) * F.one_hot(t, c.V).float() + c.eps)),
          "your smoothing term sums -log p over the V classes instead of averaging it: use eps * "
          "(-log_probs.mean(dim=-1)), not .sum(dim=-1). The target distribution is (1 - eps) * one_hot + eps / V, "
          "which sums to 1."),
    Entry("KL divergence instead of cross-entropy", "KL divergence instead of cross-entropy",
          _smoothing(lambda c: c.smoothed(c.one_hot_q("all"), kl=True)),
          "your loss is the KL divergence between the smoothed targets and the prediction: it has the same gradients "
          "but is lower by the entropy of the smoothed targets. Return the cross-entropy (F.cross_entropy with "
          "label_smoothing)."),
    # label smoothing written by hand as (1 - eps) * nll + eps * smooth, one weight or one average
    # wrong (trial D's attempts)
    Entry("smoothing over padding", "the label-smoothing term is averaged over the pad positions too",
          _smoothing(lambda c: c.smoothing_over_all()),
          "the nll term leaves the padding out, but the smoothing term eps * (-log_probs.mean(dim=-1)) is averaged "
          "over every position, pad positions included: mask both terms and average over the real tokens only."),
    Entry("correct class left out of the smoothing", "the correct class gets 1 - eps instead of 1 - eps + eps / V",
          _smoothing(lambda c: c.smoothed(c.q(1 - c.eps, c.eps / c.V))),
          "the correct class gets 1 - eps and only the others get eps / V, so the target sums to 1 - eps / V: the "
          "uniform share eps / V goes to every class, the correct one included, which gets 1 - eps + eps / V (the "
          "target is (1 - eps) * one_hot + eps / V)."),
    Entry("nll not weighted by 1 - eps", "smoothed loss written as nll + eps * smooth, without the factor 1 - eps",
          _smoothing(lambda c: c.smoothed(c.q(1 + c.eps / c.V, c.eps / c.V))),
          "the nll term is not multiplied by (1 - eps): the smoothed loss is (1 - eps) * nll + eps * "
          "(-log_probs.mean(dim=-1)), the cross-entropy against (1 - eps) * one_hot + eps / V."),
    # trial r07's three: eps over the V - 1 words other than <pad> (the smoothing term's mean
    # leaves the pad column out), the term on probabilities (their mean is always 1 / V), no term
    Entry("smoothing without the padding class", None, _smoothing(lambda c: c.smoothed(c.without_pad)),
          "your smoothing term averages -log p over the V - 1 words other than <pad>. The convention here is "
          "F.cross_entropy's: eps spread over all V classes, <pad> included, the term eps * (-log_probs.mean(dim=-1)) "
          "over the whole last axis."),
    Entry("smoothing term on probabilities",
          "the smoothing term averages softmax probabilities (a constant 1 / V), not log-probabilities",
          _smoothing(lambda c: (1 - c.eps) * c.smoothed(c.q(1.0, 0.0)) - c.eps / c.V),
          "your smoothing term averages the probabilities, not the log-probabilities: the mean of softmax over the V "
          "words is always 1 / V, so the term is a constant and does nothing. Use eps * (-log_probs.mean(dim=-1)), "
          "log_probs = logits.log_softmax(dim=-1)."),
    Entry("smoothing term missing", "the smoothed loss is (1 - eps) * nll only, without the eps * smoothing term",
          _smoothing(lambda c: (1 - c.eps) * c.smoothed(c.q(1.0, 0.0))),
          "the loss is (1 - eps) * nll only: the smoothing term eps * (-log_probs.mean(dim=-1)) is missing. The "
          "smoothed loss is (1 - eps) * nll + eps * (-log_probs.mean(dim=-1)), the cross-entropy against (1 - eps) * "
          "one_hot + eps / V."),
    Entry("smoothing on the correct class only", "the eps / V share goes to the correct class only, not to every class",
          _smoothing(lambda c: c.smoothed(c.q(1 - c.eps + c.eps / c.V, 0.0))),
          "the share eps / V goes to the correct word only ((1 - eps + eps / V) * nll, the other words get nothing): "
          "the reference spreads eps / V over every one of the V words, the correct one included, so the loss is "
          "(1 - eps) * nll + eps * (-log_probs.mean(dim=-1))."),
    # the value is right: what it is made of
    Entry("dtype not preserved", None,
          Output(lambda c: isinstance(c.got, Tensor) and c.got.dtype != c.dtype and dict(got_dtype=c.got.dtype),
                 "right value"),
          "your loss ({case}) has the right value but dtype {got_dtype}, the logits {dtype}: the loss follows the "
          "logits' dtype. Something builds it in another one (.double() or .half(), a tensor of another dtype or "
          "torch.tensor(..., dtype=...)): leave the cast out."),
    Entry("detached from the graph", "the loss (or the logits it is built from) is cut from the graph before backward",
          Output(lambda c: isinstance(c.got, Tensor) and not c.got.requires_grad,
                                                  "right value"),
          "your loss ({case}) has the right value but is detached from the computation graph (.detach(), .item(), "
          "torch.tensor(...) or torch.no_grad()): loss.backward() could not reach the logits. Build it from the "
          "logits with torch operations only."),
])


def _nearest_first(got: Any, mistakes: list[Mistake]) -> list[Mistake]:
    """The candidates, computed, nearest to ``got`` first. The smoothing variants move a
    scalar loss by about 1 %, so two of them can fall within the comparison's tolerance of
    each other on some draws: the nearest one is the student's, on every draw."""
    if not (isinstance(got, Tensor) and got.numel() == 1):
        return mistakes
    value = float(got.detach())
    computed = []
    for name, diagnosis, candidate in mistakes:
        try:
            v = candidate() if callable(candidate) else candidate
        except Exception:  # noqa: BLE001 - a variant that cannot be computed is not the student's
            continue
        if isinstance(v, Tensor) and v.numel() == 1 and math.isfinite(float(v)):
            computed.append((abs(float(v) - value), (name, diagnosis, v)))
    return [m for _, m in sorted(computed, key=lambda c: c[0])]


@checker("masked_cross_entropy")
def check_masked_cross_entropy(fn: Callable[..., Any]) -> str:
    require_function(fn, "masked_cross_entropy")
    by_hand = _loss_by_hand(fn)
    cases = [(randint(1, 9), 0.0, False), (0, round(0.05 * randint(1, 5), 2), True), (randint(1, 9), 0.1, True),
             (randint(1, 9), 0.1, True), (randint(1, 9), 0.1, True)]  # the last two: extreme logits; -inf at a pad
    for i, (pad_id, eps, pass_eps) in enumerate(cases):
        extreme, pad_inf = i == 3, i == 4
        while True:
            B, L, V = randint(2, 5), randint(4, 8), randint(10, 14)
            if _distinct(B, L, V, L + 1):
                break
        full = _ids((B, L + 1), V, pad_id)  # (B, L + 1)
        full[0, 1] = 0 if pad_id != 0 else full[0, 1]  # a real token with id 0
        real = _targets_with_padding(B, L + 1, pad_id=-1) != -1  # (B, L + 1) trailing padding
        full = torch.where(real, full, torch.full_like(full, pad_id))
        targets = full[:, 1:]  # (B, L) a non-contiguous slice, like batch.tgt_out
        if int((targets == pad_id).sum()) < 2 or bool((targets == pad_id).all(dim=1).any()):
            # in place, not on a clone: a clone is contiguous, and `.view` would then work
            targets[0, -2:] = pad_id  # at least two pads, every row keeps a real token
        logits = 2.5 * torch.randn(B, L, V)  # (B, L, V)
        if extreme:  # a real target and another class far below the largest logit, as in [0, -120, 0]
            b, t = torch.nonzero(targets != pad_id)[0].tolist()
            logits[b, t, targets[b, t]] = logits[b, t].max() - 120
            logits[-1, -1, randint(0, V - 1)] -= 120
            logits[-1, 0, randint(0, V - 1)] = 100.0  # a large positive logit: exp(100) overflows float32
        if pad_inf:  # a model that never predicts <pad> may give it -inf: that position's loss is inf, and ignored
            b, t = torch.nonzero(targets == pad_id)[0].tolist()
            logits[b, t, pad_id] = -math.inf
        logits.requires_grad_(True)
        logits0, targets0 = logits.detach().clone(), targets.clone()
        args = f"logits ({B}, {L}, {V})" + (" with logits 120 below the largest and one of 100" if extreme else "") + \
            (" with the pad logit -inf at a pad position" if pad_inf else "") + f", targets ({B}, {L}), pad_id={pad_id}"
        case = args + (f", label_smoothing={eps}" if pass_eps else "")
        kwargs = {"label_smoothing": eps} if pass_eps else {}
        try:
            got = call_student(fn, logits, targets, pad_id, context=f"calling masked_cross_entropy({case})", **kwargs)
        except StudentError as err:
            _view_error(err.exc)
            line = _first_line(err.exc)
            MCE.detect_raised(err.exc, **line, line_stripped=line["line"].rstrip("."))
            raise
        check_unchanged(["logits", "targets"], [logits.detach(), targets], [logits0, targets0], case)
        expected = F.cross_entropy(logits0.reshape(-1, V), targets0.reshape(-1), ignore_index=pad_id,
                                   label_smoothing=eps)  # ()
        per_shape = torch.Size([B * L])  # F.cross_entropy(..., reduction="none") of the flattened logits
        MCE.detect("result", SimpleNamespace(got=got, expected=expected, per_shape=per_shape, B=B, L=L,
                                             extreme=extreme, pad_inf=pad_inf),
                   case=case, expected=float(expected))
        rtol = 1e-4
        if isinstance(got, Tensor) and got.is_floating_point() and got.dtype.itemsize < logits.dtype.itemsize:
            # a float16 loss cannot hold the value to 1e-4: judged at its own resolution, "dtype not preserved"
            # below names it (an error of that size in the value itself shows once the dtype is kept)
            rtol = 4 * torch.finfo(got.dtype).eps
        with torch.no_grad():
            mistakes = MCE.candidates(_LossCase(logits0, targets0, pad_id, eps, by_hand), "loss", pad_id=pad_id,
                                      eps=eps)
            expect_close("the loss", got, expected, _nearest_first(got, mistakes), case=case, rtol=rtol)
        MCE.detect("right value", SimpleNamespace(got=got, dtype=logits.dtype), case=case, dtype=logits.dtype)
    return "mean over the non-pad tokens, pad_id 0 and non-zero, with and without label smoothing"


# ---------------------------------------------------------------- noam_lr
def _rate(make: Callable[[Any], Callable[[int], float]], when: Callable[[Any], bool] = lambda c: True) -> Reference:
    """One candidate schedule, ``make(case)`` (a function of the step), unless ``when(case)`` is false."""
    return Reference(lambda c: [({}, make(c))] if when(c) else [], "schedule")


def _base(c: Any, step: float, dm: float | None = None, f: float | None = None, w: float | None = None,
          pick: Callable[..., float] = min) -> float:
    """The paper's rate at ``step``, with one of its pieces replaced."""
    dm = c.d_model ** -0.5 if dm is None else dm
    return (c.factor if f is None else f) * dm * pick(step ** -0.5, step * (c.warmup ** -1.5 if w is None else w))


def _factor_given(c: Any) -> bool:
    return c.factor != 1.0


def _not_a_number(value: Any) -> Any:
    try:
        if isinstance(value, (bool, str, bytes)) or value is None:
            raise TypeError
        float(value)
    except (TypeError, ValueError, RuntimeError):
        return dict(type=type(value).__name__)
    return None


_ONE_BRANCH = ("the factor (here {factor}) multiplies one branch inside the min only, so it changes the rate on one "
               "side of the warm-up and moves the point where the branches meet. It multiplies the whole rate: factor "
               "* d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5).")

NOAM = Catalogue("noam_lr", "07", [
    Entry("not a function", None, Probe("require_function")),
    Entry("division by zero at step 1", "the schedule divides by zero at step 1",
          Raises("", (ZeroDivisionError,), stage="step 1"),
          "your code divides by zero at step=1 ({type}: {said}). Steps are counted from 1 here: step 1 is the first "
          "update, and the formula works as written, factor * d_model ** -0.5 * min(step ** -0.5, step * warmup ** "
          "-1.5), without subtracting 1."),
    Entry("not a Python float", "a tensor or numpy number where the contract asks for a Python float", Output(
        lambda v: (isinstance(v, Tensor) or type(v).__module__ == "numpy")
        and dict(kind="a tensor" if isinstance(v, Tensor) else f"a numpy {type(v).__name__}"), "value"),
          "noam_lr ({case}) returned {kind}; it returns a Python float (LambdaLR multiplies the base rate by it, and "
          "the notebook prints and plots it): compute with Python numbers (** and min), or convert with float(...)."),
    Entry("not a number", "the result is not a number", Output(_not_a_number, "value"),
          "noam_lr ({case}) should return a number, got {type}."),
    # the schedule with each mistake, at every step of the case
    Entry("warmup^-0.5 instead of warmup^-1.5", "the warm-up exponent is -0.5",
          _rate(lambda c: lambda s: _base(c, s, w=c.warmup ** -0.5)),
          "the warm-up branch uses warmup ** -0.5; the paper's is step * warmup ** -1.5 (so that both branches meet "
          "at step = warmup)."),
    Entry("max instead of min", "max instead of min of the two terms", _rate(lambda c: lambda s: _base(c, s, pick=max)),
          "you take the max of the two branches: the rate then never warms up and grows without bound afterwards. It "
          "is the min: the rising branch during the warm-up, the decaying one after."),
    Entry("missing d_model^-0.5", "the schedule lacks the d_model^-0.5 factor",
          _rate(lambda c: lambda s: _base(c, s, dm=1.0)),
          "the factor d_model ** -0.5 is missing: the peak rate must shrink for wider models."),
    Entry("d_model^0.5 instead of d_model^-0.5", "the schedule multiplies by sqrt(d_model)",
          _rate(lambda c: lambda s: _base(c, s, dm=c.d_model ** 0.5)),
          "you multiply by d_model ** 0.5 (the square root); the formula has d_model ** -0.5 (one over it)."),
    Entry("steps counted from 0", "the first step is 0 (division by zero)", _rate(lambda c: lambda s: _base(c, s + 1)),
          "your function gives at step k the paper's rate of step k + 1: the step is already counted from 1 here "
          "(step = 1 is the first update). If LambdaLR calls it, do the + 1 where you build the scheduler (lambda k: "
          "noam_lr(k + 1, ...)), not inside noam_lr."),
    Entry("step - 1", "noam_lr gives at step k the rate of step k - 1 (step 1 guarded from 0)",
          _rate(lambda c: lambda s: _base(c, max(s - 1, 1))),
          "your function gives at step k the paper's rate of step k - 1 (the step counted from 0 inside noam_lr, with "
          "step 1 kept away from 0): step is already counted from 1 here (step = 1 is the first update), so use it as "
          "it is: factor * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)."),
    Entry("warmup^-1 instead of warmup^-1.5", "the warm-up branch is step / warmup",
          _rate(lambda c: lambda s: _base(c, s, w=1 / c.warmup)),
          "the warm-up branch is step / warmup (warmup ** -1); it is step * warmup ** -1.5, so that both branches "
          "meet at step = warmup (where step ** -0.5 = warmup ** -0.5)."),
    Entry("integer division", None, _rate(
        lambda c: lambda s: c.factor * c.d_model ** -0.5 * min(s ** -0.5, s // c.warmup ** 1.5)),
          "your warm-up branch uses // (floor division): step // warmup ** 1.5 is 0 for every step of the warm-up, "
          "so the rate is 0 there. Use true division or the power: step * warmup ** -1.5."),
    Entry("warmup^1.5 instead of warmup^-1.5", "the warm-up exponent is 1.5",
          _rate(lambda c: lambda s: _base(c, s, w=c.warmup ** 1.5)),
          "the warm-up branch multiplies by warmup ** 1.5; it is step * warmup ** -1.5."),
    Entry("warmup^1.5 with an integer square root", "warmup * int(warmup ** 0.5) in the warm-up branch",
          _rate(lambda c: lambda s: _base(c, s, w=1 / (c.warmup * math.isqrt(c.warmup)))),
          "your warm-up branch divides by warmup * int(warmup ** 0.5): the square root is cut to an integer (int(...), "
          "// or math.isqrt), so the slope is wrong whenever warmup is not a perfect square. Use the float power: "
          "step * warmup ** -1.5."),
    Entry("warmup ** -3 / 2", "warmup ** -3 / 2, read as (warmup ** -3) / 2, in the warm-up branch",
          _rate(lambda c: lambda s: _base(c, s, w=c.warmup ** -3 / 2)),
          "your warm-up branch computes warmup ** -3 / 2, which Python reads as (warmup ** -3) / 2: ** binds tighter "
          "than /. Write warmup ** -1.5 (or warmup ** (-3 / 2))."),
    Entry("factor ignored", "the factor argument is not used",
          _rate(lambda c: lambda s: _base(c, s, f=1.0), _factor_given),
          "the factor argument (here {factor}) is not applied: multiply the rate by it."),
    Entry("factor on one branch only", "the factor multiplies one branch inside the min, not the whole rate", _rate(
        lambda c: lambda s: c.d_model ** -0.5 * min(c.factor * s ** -0.5, s * c.warmup ** -1.5), _factor_given),
          _ONE_BRANCH),
    Entry("factor on one branch only", None, _rate(
        lambda c: lambda s: c.d_model ** -0.5 * min(s ** -0.5, c.factor * s * c.warmup ** -1.5), _factor_given),
          _ONE_BRANCH),
    Entry("values differ", None, Output(lambda c: True, "values"),
          "at step={step} ({shown}) your rate is {got:.6g}, expected {expected:.6g}: factor * d_model ** -0.5 * "
          "min(step ** -0.5, step * warmup ** -1.5)."),
])


@checker("noam_lr")
def check_noam_lr(fn: Callable[..., Any]) -> str:
    require_function(fn, "noam_lr")
    for pass_factor in (False, True):
        d_model = [32, 64, 96, 128, 256, 512][randint(0, 5)]
        warmup = randint(20, 4000)
        warmup += math.isqrt(warmup) ** 2 == warmup  # not a perfect square: an integer square root shows
        factor = [0.5, 2.0, 1.5][randint(0, 2)] if pass_factor else 1.0
        steps = sorted({1, 2, warmup // 2, warmup - 1, warmup, warmup + 1, 3 * warmup, 10 * warmup + randint(1, 9)})
        expected = [noam_lr(s, d_model, warmup, factor) for s in steps]
        got, shown = [], f"d_model={d_model}, warmup={warmup}" + (f", factor={factor}" if pass_factor else "")
        for step in steps:
            case = f"step={step}, {shown}"
            kwargs = {"factor": factor} if pass_factor else {}
            try:
                value = call_student(fn, step, d_model, warmup, context=f"calling noam_lr({case})", **kwargs)
            except StudentError as err:
                if step == 1:
                    NOAM.detect_raised(err.exc, "step 1", type=type(err.exc).__name__, said=err.exc)
                raise
            NOAM.detect("value", value, case=case)
            got.append(float(value))
        if all(math.isclose(g, e, rel_tol=1e-6, abs_tol=1e-15) for g, e in zip(got, expected)):
            continue
        c = SimpleNamespace(d_model=d_model, warmup=warmup, factor=factor)
        for name, diagnosis, variant in NOAM.candidates(c, "schedule", factor=factor):
            try:
                candidate = [variant(s) for s in steps]
            except (ZeroDivisionError, OverflowError):
                continue
            if all(math.isclose(g, v, rel_tol=1e-6, abs_tol=1e-15) for g, v in zip(got, candidate)):
                fail(f"{diagnosis} ({shown})", mistake=name)
        i = next(i for i, (g, e) in enumerate(zip(got, expected)) if not math.isclose(g, e, rel_tol=1e-6, abs_tol=1e-15))  # noqa: E501
        NOAM.detect("values", None, step=steps[i], shown=shown, got=got[i], expected=expected[i])
    return "steps 1 to 10 x warmup, with and without factor"


# ---------------------------------------------------------------- train_step
_LR = 0.1  # SGD's base rate; the scheduler halves it at every step


@dataclass
class _StepSetup:
    model: Transformer
    batches: list[Any]
    pad_id: int
    eps: float
    clip: float | None
    use_scheduler: bool
    leftover: list[Tensor]  # gradients present before the first call
    seed: int
    train_mode: bool = True  # False: the model arrives in eval mode
    cache: dict[tuple, list[tuple[float, Tensor]]] = field(default_factory=dict)


def _flat(model: nn.Module) -> Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])  # (P,)


def _fresh(setup: _StepSetup, leftover: bool = True) -> tuple[nn.Module, torch.optim.Optimizer, Any]:
    """A copy of the setup's model, in its mode, with the leftover gradients, and its SGD and scheduler."""
    model = module_copy(setup.model).train(setup.train_mode)
    for p, g in zip(model.parameters(), setup.leftover if leftover else ()):
        p.grad = g.clone()
    optimizer = torch.optim.SGD(model.parameters(), lr=_LR)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: 0.5**k) if setup.use_scheduler else None
    return model, optimizer, scheduler


def _variant_loss(model: nn.Module, batch: Any, pad_id: int, eps: float, flags: frozenset[str]) -> Tensor:
    shifts = {"copy": ("tgt", "tgt"), "vs tgt_in": ("tgt_in", "tgt_in"), "wrong way": ("tgt_out", "tgt_in")}
    read, target = next((shifts[f] for f in flags if f in shifts), ("tgt_in", "tgt_out"))
    if "whole tgt" in flags:  # the decoder reads all of batch.tgt; its last position's logits are dropped below
        read = "tgt"
    tgt_in, tgt_out = getattr(batch, read), getattr(batch, target)
    # "copy", "whole tgt": the decoder reads batch.tgt, for which batch.tgt_mask is one token too short
    tgt_mask = None if "no tgt mask" in flags else make_tgt_mask(tgt_in, pad_id) if read == "tgt" else batch.tgt_mask
    src_mask = None if "no src mask" in flags else batch.src_mask
    if "masks swapped" in flags:  # runs only when L_src = L_tgt - 1; else the model raises
        src_mask, tgt_mask = tgt_mask, src_mask
    logits = model(batch.src, tgt_in, src_mask, tgt_mask)  # (B, L, V)
    if "whole tgt" in flags:
        logits = logits[:, :-1]  # (B, L_tgt - 1, V)
    V, e = logits.size(-1), 0.0 if "no smoothing" in flags else eps
    if "sum pad" in flags:  # summed over every position, padding included
        return F.cross_entropy(logits.reshape(-1, V), tgt_out.reshape(-1), label_smoothing=e, reduction="sum")
    if "sum / B" in flags:  # The Annotated Transformer's normalisation: the summed loss over the sentences
        return masked_cross_entropy(logits, tgt_out, pad_id, e) * (tgt_out != pad_id).sum() / tgt_out.size(0)
    if "shifted twice" in flags:  # logits[:, :-1] against tgt_out[:, 1:]: the token two steps ahead
        logits, tgt_out = logits[:, :-1], tgt_out[:, 1:]
    if "targets transposed" in flags:  # (B, L) targets flattened as (L, B): another position's token
        return F.cross_entropy(logits.reshape(-1, V), tgt_out.T.reshape(-1), ignore_index=pad_id, label_smoothing=e)
    if flags & {"pad counted", "pad zero"}:  # ignore_index=-100, F.cross_entropy's default: no id is ignored
        return F.cross_entropy(logits.reshape(-1, V), tgt_out.reshape(-1), ignore_index=0 if "pad zero" in flags
                               else -100, label_smoothing=e)
    return masked_cross_entropy(logits, tgt_out, pad_id, e)


def _simulate(setup: _StepSetup, flags: frozenset[str], calls: int = 2) -> list[tuple[float, Tensor]]:
    """``(loss, parameters after the call)`` for the first ``calls`` batches, with the mistakes in ``flags``."""
    key = tuple(sorted(flags))
    if len(setup.cache.get(key, ())) >= calls:
        return setup.cache[key]
    model, optimizer, scheduler = _fresh(setup)
    results = []
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the candidates' own misuse must not warn in the notebook
        for i, batch in enumerate(setup.batches[:calls]):
            torch.default_generator.manual_seed(setup.seed + i)
            if "eval mode" not in flags:
                model.train()
            if "no zero_grad" not in flags:
                optimizer.zero_grad()
            loss = _variant_loss(model, batch, setup.pad_id, setup.eps, flags)
            (loss / batch.src.size(0) if "loss / B" in flags else loss).backward()
            if "zero_grad after backward" in flags:
                optimizer.zero_grad()
            if setup.clip is not None and "no clip" not in flags:
                bound = 1.0 if "clip 1.0" in flags else setup.clip
                if "clip value" in flags:
                    nn.utils.clip_grad_value_(model.parameters(), bound)
                elif "clip each" in flags:
                    for p in model.parameters():
                        if p.grad is not None:
                            nn.utils.clip_grad_norm_(p, bound)
                else:
                    nn.utils.clip_grad_norm_(model.parameters(), bound)
            if scheduler is not None and "scheduler before" in flags:
                scheduler.step()
            optimizer.step()
            if "step twice" in flags:
                optimizer.step()
            if scheduler is not None and "scheduler before" not in flags and "no scheduler" not in flags:
                scheduler.step()
            if "loss after the update" in flags:  # the loss computed again, with the updated parameters
                with torch.no_grad():
                    loss = _variant_loss(model, batch, setup.pad_id, setup.eps, flags)
            results.append((float(loss.detach()), _flat(model)))
    setup.cache[key] = results
    return results


def _draw_step_setup(pad_id: int, eps: float, use_scheduler: bool, dropout: float, train_mode: bool,
                     clip_fraction: float | None = None, clip: float | None = None,
                     clip_root: bool = False) -> _StepSetup:
    """``clip_fraction``: clip_norm that fraction of the first gradient's norm; ``clip_root``:
    clip_norm between that norm, made smaller than 1, and its square root; else ``clip``."""
    while True:
        V_src, V_tgt, D, d_ff = randint(11, 15), randint(11, 15), 4 * randint(2, 3), randint(12, 20)
        if _distinct(V_src, V_tgt, D, d_ff):
            break
    model = Transformer(V_src, V_tgt, d_model=D, num_heads=2, num_layers=1, d_ff=d_ff, dropout=dropout, max_len=32)
    batches = []
    for _ in range(2):
        B = randint(3, 5)
        pairs = []
        bos, eos = (pad_id + 1) % V_tgt, (pad_id + 2) % V_tgt
        for b in range(B):
            src = _ids((randint(3, 8),), V_src, pad_id)
            words = _ids((randint(1, 6),), V_tgt, pad_id)
            words = words.masked_fill((words == bos) | (words == eos), (pad_id + 3) % V_tgt)
            if b == 0 and pad_id != 0:
                words[0] = 0  # a real target with id 0: a hard-coded ignore_index=0 shows
            tgt = torch.cat([torch.tensor([bos]), words, torch.tensor([eos])])
            pairs.append((src, tgt))
        pairs[0] = (torch.cat([pairs[0][0], _ids((3,), V_src, pad_id)]), pairs[0][1])  # src padding elsewhere
        batches.append(collate(pairs, pad_id=pad_id))
    leftover = [torch.randn_like(p) for p in model.parameters()]
    setup = _StepSetup(model, batches, pad_id, eps, clip, use_scheduler, leftover, randint(0, 10_000), train_mode)
    for _ in range(4 if clip_fraction is not None else 0):
        g = _reference_grads(setup, 0)[0]  # (P,) the first call's gradient
        norm, largest = float(g.norm()), float(g.abs().max())
        if norm > 1.5:
            break
        # rare: below 1, a clip_norm hard-coded as 1.0 would not clip, like no clipping at all; larger
        # logits give larger gradients
        with torch.no_grad():
            model.output_projection.weight.mul_(2.0)
    if clip_fraction is not None:
        # below the global norm (clip_grad_norm_ acts) and below the largest entry (so that
        # clip_grad_value_ would act too, and differently)
        setup.clip = round(min(norm * clip_fraction, 0.5 * largest), 4)
    if clip_root:
        norm = float(_reference_grads(setup, 0)[0].norm())
        for _ in range(8):
            if norm < 0.5:
                break
            # smaller logits, smaller gradients: the output layer and the norm before it scaled down
            with torch.no_grad():
                for p in (model.output_projection.weight, *model.decoder.layers[-1].norm3.parameters()):
                    p.mul_(0.5)
            norm = float(_reference_grads(setup, 0)[0].norm())
        # n < clip_norm < sqrt(n): clipping leaves these gradients alone, but clip_norm ** 2 < n
        setup.clip = round(norm**0.75, 4)
    return setup


def _run_student(fn: Callable[..., Any], setup: _StepSetup, words: str,
                 pass_options: bool) -> Iterator[tuple[Any, Tensor, Any, bool]]:
    """The student's calls, one by one: the comparison of a call comes before the next call."""
    model, optimizer, scheduler = _fresh(setup)
    # each call in its own fork of the random state: none stays open while a call is compared
    for i, batch in enumerate(copy.deepcopy(setup.batches)):  # the setup's own stay as drawn
        kwargs: dict[str, Any] = {}
        if pass_options:
            kwargs = dict(scheduler=scheduler, pad_id=setup.pad_id, label_smoothing=setup.eps, clip_norm=setup.clip)
        originals = [batch.src.clone(), batch.tgt.clone()]
        try:
            with torch.random.fork_rng(devices=[]):
                torch.default_generator.manual_seed(setup.seed + i)  # the CPU's: torch.manual_seed costs ms
                # boxed, so that a numpy loss reaches the "returned" tests (a float is due, not a tensor)
                # warnings.catch_warnings: PyTorch's own warnings about the student's calls (float(loss) on a
                # tensor that requires grad, the scheduler stepped first) would print inside the verdict; the
                # verdict names what matters
                with _BackwardWatch() if i == 0 else nullcontext() as watch, warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    loss = call_student(lambda *a, **k: [SimpleNamespace(value=fn(*a, **k))], model, batch, optimizer,
                                        context=f"calling train_step ({words})", **kwargs)[0].value
        except StudentError as err:
            _view_error(err.exc)
            text = str(err.exc)
            B, L = batch.tgt.shape
            TRAIN_STEP.detect("raised", SimpleNamespace(exc=err.exc, text=text, batch=batch, clip=setup.clip),
                              type=type(err.exc).__name__, line=(text.splitlines() or [""])[0], L=L, L_1=L - 1,
                              tgt_mask=describe_shape(batch.tgt_mask), src_mask=describe_shape(batch.src_mask))
            raise
        check_unchanged(["batch.src", "batch.tgt"], [batch.src, batch.tgt], originals, words)
        epoch = getattr(scheduler, "last_epoch", 0)
        TRAIN_STEP.detect("scheduler", SimpleNamespace(epoch=epoch, first=i == 0 and scheduler is not None),
                          words=words, epoch=epoch, unclipped=_UNCLIPPED if setup.clip is None else "")
        grads = [None if p.grad is None else p.grad.detach().clone() for p in model.parameters()]
        yield (loss, _flat(model), grads, all(m.training for m in model.modules()), watch.dtypes if watch else [])


class _BackwardWatch(torch.overrides.TorchFunctionMode):
    """The dtypes of the tensors backward() runs from (loss.backward(), torch.autograd.backward)."""

    def __init__(self) -> None:
        super().__init__()
        self.dtypes: list[torch.dtype] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if getattr(func, "__name__", "") == "backward" and args:
            self.dtypes += [t.dtype for t in (args[0] if isinstance(args[0], (tuple, list)) else args[:1])
                            if isinstance(t, Tensor)]
        return func(*args, **(kwargs or {}))


@dataclass
class _Call:
    """One call of the student's train_step, as the table's tests and simulations see it."""

    s: _StepSetup
    i: int
    training: bool  # every module in train mode after the call
    grads: list[Tensor | None]  # the gradients the call left in the model
    params: Tensor  # (P,) after the call
    before: Tensor  # (P,) before the call (the reference's)
    exp_params: Tensor  # (P,) the reference's after the call
    dtypes: list[torch.dtype]  # of the tensors backward() ran from (first call only)
    by_hand: bool = False  # the loss computed without a library loss (_loss_by_hand)

    @functools.cached_property
    def factor(self) -> SimpleNamespace | None:
        """The factor the gradients left in the model are the right loss's times, when they are."""
        return _gradient_factor(self.s, self.i, self.grads)

    @property
    def grads_empty(self) -> bool:
        return all(g is None or not bool(g.any()) for g in self.grads)

    @property
    def clipped_after(self) -> bool:
        """The gradients left in the model have norm clip_norm: clipped, but after the update."""
        present = [g for g in self.grads if g is not None]
        norm = float(torch.sqrt(sum((g.double() ** 2).sum() for g in present))) if present else None
        return norm is not None and math.isclose(norm, self.s.clip, rel_tol=1e-3)


# the stages of a wrong update, in the order tried; the simulated ones compare the update with the
# reference's run with each entry's flags (_simulate), the others are tests on the call
_UPDATE_STAGES = ("eval update", "unchanged", "clip 0", "gradients", "update", "no clip", "clip value", "partial",
                  "scaled", "update differs")
_SIMULATED = frozenset({"eval update", "clip 0", "update", "no clip", "clip value"})


def _compare_step(setup: _StepSetup, got: Iterator[tuple[Any, Tensor, Any, bool, list]], words: str,
                  by_hand: bool) -> None:
    expected = _simulate(setup, frozenset())
    for i, ((loss, params, grads, training, dtypes), (exp_loss, exp_params)) in enumerate(zip(got, expected)):
        call = f"call {i + 1} of {len(expected)}, {words}"
        TRAIN_STEP.detect("returned", SimpleNamespace(value=loss, expected=exp_loss), call=call)
        value = float(loss)
        before = setup.cache[()][i - 1][1] if i else _flat(setup.model)
        c = _Call(setup, i, training, grads, params, before, exp_params, dtypes, by_hand)

        def loss_of(flags: frozenset[str], i: int = i) -> float | None:
            try:
                return _simulate(setup, flags, i + 1)[i][0]
            except Exception:  # noqa: BLE001 - a variant that cannot run is not this mistake
                return None

        if not math.isclose(value, exp_loss, rel_tol=1e-5, abs_tol=1e-6):
            # the case of a model that arrives in eval mode is there for its mistake: tried first. Then the
            # loss mistakes within tolerance: two may be (whole tgt with dropout and no tgt_mask differ by
            # 2e-6 on some draws); the nearest is the student's
            for stage in ("eval loss", "loss"):
                near = [(abs(value - v), name, diagnosis) for name, diagnosis, flags in
                        TRAIN_STEP.candidates(c, stage, call=call) for v in (loss_of(flags),)
                        if v is not None and math.isclose(value, v, rel_tol=1e-5, abs_tol=1e-6)]
                if near:
                    _, name, diagnosis = min(near, key=lambda m: m[0])
                    fail(diagnosis, mistake=name)
            TRAIN_STEP.detect("loss differs", c, call=call, value=value, expected=exp_loss)
        if matches(params, exp_params, atol=1e-6, rtol=1e-5):
            TRAIN_STEP.detect("right update", c, call=call)
            continue
        for stage in _UPDATE_STAGES:
            if stage not in _SIMULATED:
                TRAIN_STEP.detect(stage, c, call=call, clip=setup.clip)
                continue
            for name, diagnosis, flags in TRAIN_STEP.candidates(c, stage, call=call, clip=setup.clip):
                if matches(params, _simulate(setup, flags, i + 1)[i][1], atol=1e-6, rtol=1e-5):
                    fail(diagnosis, mistake=name)


# train_step: what the simulated variants cannot name (the update is a scalar multiple of the loss's
# gradients, a part of the model clipped on its own, a graph cut before the loss)
_FAR_ABOVE = 1e4  # a clip_norm no gradient of these small models reaches: clipping must change nothing


def _reference_grads(setup: _StepSetup, i: int) -> tuple[Tensor, int]:
    """The gradient of the right loss at call ``i``, flat ``(P,)``, from the parameters the
    student's model had before it (the reference's after call i - 1), and the number of real
    target tokens."""
    model = module_copy(setup.model).train()
    before = setup.cache[()][i - 1][1] if i else _flat(setup.model)
    nn.utils.vector_to_parameters(before.clone(), model.parameters())
    batch, params = setup.batches[i], list(model.parameters())
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(setup.seed + i)
        logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)  # (B, L - 1, V)
        loss = masked_cross_entropy(logits, batch.tgt_out, setup.pad_id, setup.eps)
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    flat = torch.cat([(torch.zeros_like(p) if g is None else g).reshape(-1) for p, g in zip(params, grads)])  # (P,)
    return flat, int((batch.tgt_out != setup.pad_id).sum())


def _gradient_factor(setup: _StepSetup, i: int, grads: list[Tensor | None]) -> SimpleNamespace | None:
    """The gradients left in the model after the student's call, when they are the right
    loss's gradients times one number ``c``: that number and the norms that name the mistake."""
    got = [g for g in grads if g is not None]
    if not got:
        return None
    G = torch.cat([g.reshape(-1) for g in got]).double()  # (P',)
    if len(got) != len(grads) or not bool(G.any()):
        return None
    g, N = _reference_grads(setup, i)
    g = g.double()
    c = float(G @ g / (g @ g))
    if float((G - c * g).norm()) > 1e-3 * float(G.norm()):
        return None  # not a scalar multiple: per-parameter clipping and others, named elsewhere
    n2, ninf, n1, clip = float(g.norm()), float(g.abs().max()), float(g.abs().sum()), setup.clip
    # clip_norm left at 1.0 scales by min(1, 1 / n2): when a draw puts that factor near another
    # norm's (the largest entry close to clip_norm), the nearer one names the mistake
    hard_coded = abs(c - min(1.0, 1.0 / n2)) if clip not in (None, 1.0) else math.inf
    norms = ((ninf, "the largest gradient entry (norm_type=inf, or a max instead of a root sum of squares)"),
             (n2**2, "the sum of squares without its square root"),
             (n1, "the sum of the entries' absolute values (norm_type=1)"))
    # the factor nearest to c names the norm: two norms' factors may fall within 0.2 % on a draw
    fits = sorted((abs(c - clip / norm), how) for norm, how in norms
                  if clip is not None and norm > clip and _close(c, clip / norm))
    return SimpleNamespace(c=c, N=N, n2=n2, clip=clip, norm=fits[0][1] if fits and fits[0][0] < hard_coded else None)


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=2e-3)


def _partial_clipping(c: _Call) -> dict[str, str] | None:
    """Clipping of a part of the model only (clip_grad_norm_(model.encoder.parameters(), ...)): the
    gradients of that part scaled by one factor, clip_norm over their own norm; the others as they are."""
    setup, grads = c.s, c.grads
    if setup.clip is None or any(g is None for g in grads):
        return None
    g = _reference_grads(setup, c.i)[0].double()  # (P,)
    names = [n for n, _ in setup.model.named_parameters()]
    kept, scaled, offset = [], [], 0
    for name, G in zip(names, grads):
        r, offset = g[offset:offset + G.numel()].view(G.shape), offset + G.numel()
        if float(r.abs().max()) > 1e-6:  # a gradient of about 0 (the keys' bias) fits either group
            (kept if matches(G, r, atol=1e-7, rtol=1e-4) else scaled).append((name, G, r))
    if not kept or not scaled:
        return None
    got = torch.cat([G.reshape(-1) for _, G, _ in scaled]).double()  # (P',)
    ref = torch.cat([r.reshape(-1) for _, _, r in scaled])  # (P',)
    factor = setup.clip / float(ref.norm())
    if not (factor < 1 and matches(got, factor * ref, atol=1e-7, rtol=1e-3)):
        return None

    def parts(group: list, other: list) -> str:  # the shortest prefixes that name no parameter of the other
        out = []
        for n, _, _ in group:
            bits = n.split(".")
            out.append(next(p for p in (".".join(bits[:k]) for k in range(1, len(bits) + 1))
                            if not any(m == p or m.startswith(p + ".") for m, _, _ in other)))
        named = [f"model.{p}" for p in dict.fromkeys(out)]
        return ", ".join(named[:4]) + (f" and {len(named) - 4} more" if len(named) > 4 else "")

    return dict(scaled=parts(scaled, kept), kept=parts(kept, scaled))


def _update_scaled(c: _Call) -> dict[str, float] | None:
    """The update points the reference's way, with another size."""
    step, exp_step = c.params - c.before, c.exp_params - c.before  # (P,) each
    ratio = float(step @ exp_step / (exp_step @ exp_step))
    return dict(ratio=ratio) if matches(step, ratio * exp_step, atol=1e-6, rtol=1e-4) else None


def _graph_cut(fn: Callable[..., Any], setup: _StepSetup, words: str) -> None:
    """No update although the loss is right: did any gradient reach the model's output? (A
    loss built from ``logits.detach().requires_grad_()`` backpropagates into a copy.)"""
    model, optimizer, scheduler = _fresh(setup, leftover=False)
    outputs, reached = [], []

    def watch(module: nn.Module, args: tuple[Any, ...], out: Any) -> None:
        if isinstance(out, Tensor):
            outputs.append(out.requires_grad)
            if out.requires_grad:
                out.register_hook(lambda grad: reached.append(True))

    handle = model.output_projection.register_forward_hook(watch)
    try:
        with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # as in _run_student: no PyTorch warning inside the verdict
            call_student(fn, model.train(), setup.batches[0], optimizer, scheduler=scheduler, pad_id=setup.pad_id,
                         label_smoothing=setup.eps, clip_norm=setup.clip)
    except StudentError:
        return
    finally:
        handle.remove()
    TRAIN_STEP.detect("graph cut", SimpleNamespace(outputs=outputs, reached=reached), words=words)


_STEP_CASES = [  # (the draw's arguments, pass the options, words); "pad": a non-zero pad_id drawn
    # A: everything on: a scheduler, clipping below the gradient norm, smoothing, a non-zero pad
    (dict(pad_id="pad", eps=0.1, use_scheduler=True, dropout=0.0, train_mode=True, clip_fraction=0.3), True,
     "SGD with a LambdaLR scheduler, pad_id={s.pad_id}, label_smoothing={s.eps}, clip_norm={s.clip}"),
    # E: clip_norm far above the gradient norm: clipping must leave the gradients alone
    (dict(pad_id="pad", eps=0.1, use_scheduler=True, dropout=0.0, train_mode=True, clip=_FAR_ABOVE), True,
     "clip_norm={s.clip:g}, far above the gradient norm, pad_id={s.pad_id}, label_smoothing=0.1"),
    # B: the defaults: scheduler=None, pad_id=0, no smoothing, clip_norm=1.0
    (dict(pad_id=0, eps=0.0, use_scheduler=False, dropout=0.0, train_mode=True, clip=1.0), False,
     "train_step(model, batch, optimizer) with the default arguments (no scheduler)"),
    # C: a model with dropout that an evaluation left in eval mode; its gradient norm n is below 1
    # and clip_norm lies between n and sqrt(n), so a clip that compares the norm with clip_norm ** 2
    # scales the gradients up
    (dict(pad_id="pad", eps=0.0, use_scheduler=True, dropout=0.5, train_mode=False, clip_root=True), True,
     "a model with dropout=0.5 that arrives in eval mode, pad_id={s.pad_id}, clip_norm={s.clip} (above the "
     "gradient norm)"),
    # D: no clipping (clip_norm=None) with a scheduler, which must still step; smoothing, a non-zero pad
    (dict(pad_id="pad", eps=0.1, use_scheduler=True, dropout=0.0, train_mode=True), True,
     "SGD with a LambdaLR scheduler, clip_norm=None (no clipping), label_smoothing=0.1, pad_id={s.pad_id}"),
    # F: clip_norm=0.0, a legal bound: every gradient scaled to norm 0, no update
    (dict(pad_id="pad", eps=0.0, use_scheduler=True, dropout=0.0, train_mode=True, clip=0.0), True,
     "clip_norm=0.0 (the gradients scaled to norm 0: no update), pad_id={s.pad_id}"),
]


def _sim(flags: set[str], when: Callable[[_Call], bool] = lambda c: True, stage: str = "loss") -> Reference:
    """A mistake simulated: the reference's step run with ``flags`` (:func:`_simulate`); none
    unless ``when(call)`` (the mistake cannot show on that case, or another entry names it there)."""
    frozen = frozenset(flags)
    return Reference(lambda c: [({}, frozen)] if when(c) else [], stage)


def _clip_not_one(c: _Call) -> bool:  # clip_norm None or 1.0: these clip like the reference
    return c.s.clip not in (None, 1.0)


def _masks_in_error(c: Any) -> bool:
    """The reference's attention names the mask's shape and the scores' it should broadcast to."""
    B, L = c.batch.tgt.shape
    L_src = c.batch.src.size(1)
    return isinstance(c.exc, ValueError) and any(
        f"mask of shape {tuple(mask.shape)} " in c.text and f"{scores}" in c.text
        for mask, scores in ((c.batch.tgt_mask, (B, L_src, L_src)), (c.batch.src_mask, (B, L - 1, L - 1))))


def _tgt_lengths_in_error(c: Any) -> bool:
    """Two of the shapes of batch.tgt and batch.tgt_out (flat or not) in the error: logits and targets of
    different lengths."""
    B, L = c.batch.tgt.shape
    shapes = (f"({B * (L - 1)})", f"({B * L})", str((B, L - 1)), str((B, L)), f"{B}, {L - 1}", f"{B}, {L}")
    return isinstance(c.exc, (RuntimeError, ValueError)) and sum(s in c.text for s in shapes) >= 2


def _tensor_loss(c: Any) -> Any:
    if not (isinstance(c.value, Tensor) and c.value.numel() == 1):
        return None
    right = math.isclose(float(c.value.detach()), c.expected, rel_tol=1e-5, abs_tol=1e-6)
    return dict(right=" with the right value" if right else "")


def _no_float(c: Any) -> Any:
    v = c.value
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return None
    return dict(what=type(v).__name__ if not isinstance(v, Tensor) else "a tensor of shape " + describe_shape(v))


_UNCLIPPED = (" With clip_norm=None too: only the clipping belongs under `if clip_norm is not None:`, the optimizer "
              "and the scheduler step either way.")
_NO_UPDATE = ("the parameters did not change: optimizer.step() is missing, or zero_grad() runs between backward() and "
              "step() and erases the gradients. The order is zero_grad, forward, loss, backward, clip, step. ({call})")
_TOO_LATE = (" in eval mode, dropout off, and only then was the model switched to train mode. The model may arrive "
             "in eval mode (after an evaluation): call model.train() first, before the forward pass.")
_COPY_WORDS = ("each position sees the token it must predict, so the model learns to copy its input (the loss falls "
               "near zero) and greedy decoding fails.")
_MODEL_CALL = "model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)"

TRAIN_STEP = Catalogue("train_step", "07", [
    Entry("not a function", None, Probe("require_function")),
    # the student's step raised (stage "raised")
    Entry("view on a non-contiguous tensor", None, Probe("fail_view_error")),
    Entry("clip_norm None not handled", "the code fails with clip_norm=None",
          Output(lambda c: c.clip is None and isinstance(c.exc, TypeError) and "NoneType" in c.text, "raised"),
          "your code raised {type}: {line} with clip_norm=None, which means: no clipping. Clip only when there is a "
          "bound: `if clip_norm is not None: nn.utils.clip_grad_norm_(model.parameters(), clip_norm)`."),
    Entry("scheduler None not handled", "the code fails with scheduler=None",
          Output(lambda c: isinstance(c.exc, AttributeError) and "NoneType" in c.text and "step" in c.text, "raised"),
          "your code raised {type}: {line} with scheduler=None: the scheduler is optional. Step it only when there is "
          "one: `if scheduler is not None: scheduler.step()`."),
    Entry("detached from the graph", None, Output(
        lambda c: isinstance(c.exc, RuntimeError) and "does not require grad and does not have a grad_fn" in c.text,
        "raised"),
          "your code raised {type}: {line}: the loss has no graph to backpropagate through, so the forward pass ran "
          "inside torch.no_grad() (or the logits were detached). Training needs the graph: call model(...) and "
          "compute the loss outside any torch.no_grad() block (no_grad is for evaluation)."),
    Entry("masks swapped", "masks passed to the wrong attentions or arguments", Output(_masks_in_error, "raised"),
          "your code raised {type}: {line}: batch.tgt_mask {tgt_mask} went to the encoder, or batch.src_mask "
          "{src_mask} to the decoder's self-attention: the masks are swapped. The order is " + _MODEL_CALL + "."),
    Entry("loss on tgt instead of tgt_out", "the loss uses tgt instead of tgt_out",
          Output(_tgt_lengths_in_error, "raised"),
          "your code raised {type}: {line}. The logits of batch.tgt_in have L_tgt - 1 = {L_1} positions, one per "
          "token read; they go with batch.tgt_out (also {L_1} long), not with batch.tgt ({L} long)."),
    Entry("input modified in place", None, Probe("check_unchanged")),
    # the scheduler after the call (stage "scheduler"): an argument given (ReduceLROnPlateau's habit makes
    # LambdaLR jump to the 'epoch' it was given: a fractional last_epoch), then the step count of call 1
    Entry("loss passed to scheduler.step", "scheduler.step(loss) gives LambdaLR the loss as its epoch",
          Output(lambda c: isinstance(c.epoch, float) and not c.epoch.is_integer(), "scheduler"),
          "scheduler.step() was given an argument ({words}): after one call the schedule stands at step {epoch:.4g}, "
          "so the loss (or another number) was passed as the epoch. A LambdaLR scheduler counts its own steps: call "
          "scheduler.step() with no argument, once, after optimizer.step() (only ReduceLROnPlateau takes the loss)."),
    Entry("scheduler not stepped", "the scheduler is not stepped",
          Output(lambda c: c.first and c.epoch == 0, "scheduler"),
          "the scheduler was not stepped ({words}): the learning rate would stay at its first value for the whole "
          "training. Call scheduler.step() after optimizer.step().{unclipped}"),
    Entry("scheduler stepped twice", "the scheduler is stepped twice",
          Output(lambda c: c.first and c.epoch != 1, "scheduler"),
          "the scheduler was stepped {epoch} times in one call ({words}): step it once, after optimizer.step()."),
    # what the call returned (stage "returned")
    Entry("not a Python float", None,
          Output(lambda c: type(c.value).__module__ == "numpy" and dict(type=type(c.value).__name__), "returned"),
          "train_step returns the loss as a numpy {type} ({call}): return a Python float, loss.item(), which a "
          "history list, an f-string or a plot takes as it is."),
    Entry("loss returned as a tensor", "the loss returned as a tensor, not a float", Output(_tensor_loss, "returned"),
          "train_step returns the loss as a tensor ({call}){right}: return a Python float, loss.item(). A tensor that "
          "the caller keeps in a history holds on to its device memory (and, unless detached, to the whole graph of "
          "the step)."),
    Entry("no loss returned", "train_step returns no loss", Output(_no_float, "returned"),
          "train_step should return the loss as a Python float (loss.item()), got {what} ({call})."),
    # the returned loss differs: the case of a model that arrives in eval mode first (stage "eval loss"), then
    # the loss of each simulated mistake (stage "loss"), the nearest within tolerance
    Entry("model.train() too late", "model.train() called after the forward pass: the loss was computed in eval mode",
          _sim({"eval mode"}, lambda c: not c.s.train_mode and c.training, "eval loss"),
          "model.train() comes too late ({call}): the forward pass ran" + _TOO_LATE),
    Entry("model in eval mode", "train_step does not put the model in train mode",
          _sim({"eval mode"}, lambda c: not c.s.train_mode and not c.training, "eval loss"),
          "the model stays in eval mode ({call}): dropout is off during training. The model may arrive in eval mode "
          "(after an evaluation): call model.train() at the start of train_step."),
    Entry("targets not shifted", "the loss compares with the unshifted targets", _sim({"copy"}),
          "the loss compares the decoder's output for batch.tgt with batch.tgt itself: not shifted, " + _COPY_WORDS
          + " Feed batch.tgt_in and compare with batch.tgt_out. ({call})"),
    Entry("targets not shifted", None, _sim({"copy", "no tgt mask"}),
          "the decoder reads batch.tgt (without a causal mask) and the loss compares with batch.tgt itself: "
          + _COPY_WORDS + " Call " + _MODEL_CALL + " and compare with batch.tgt_out. ({call})"),
    Entry("compared with tgt_in", "the loss compares with tgt_in", _sim({"vs tgt_in"}),
          "the loss compares the logits with batch.tgt_in, the tokens the decoder reads: each position is asked for "
          "the token it already sees. Compare with batch.tgt_out (the next tokens). ({call})"),
    Entry("shifted the wrong way", None, _sim({"wrong way"}),
          "the decoder reads batch.tgt_out and the loss compares with batch.tgt_in: the shift goes the wrong way. "
          "Feed batch.tgt_in, compare with batch.tgt_out. ({call})"),
    Entry("tgt_mask not passed", "tgt_mask not passed on", _sim({"no tgt mask"}),
          "the model is called without batch.tgt_mask: every target position sees the later tokens it has to "
          "predict. Call " + _MODEL_CALL + ". ({call})"),
    Entry("src_mask not passed", "src_mask not passed to the model", _sim({"no src mask"}),
          "the model is called without batch.src_mask: attention reads the source padding. Call " + _MODEL_CALL
          + ". ({call})"),
    Entry("masks not passed", "neither mask passed on", _sim({"no src mask", "no tgt mask"}),
          "the model is called without masks, model(batch.src, batch.tgt_in): the target positions see the later "
          "tokens they have to predict and attention reads the source padding. Call " + _MODEL_CALL + ". ({call})"),
    Entry("masks swapped", None, _sim({"masks swapped"}),
          "the model gets batch.tgt_mask as its src_mask and batch.src_mask as its tgt_mask: the masks are swapped. "
          "The order is " + _MODEL_CALL + ". ({call})"),
    Entry("targets shifted twice", "the already shifted tgt_out shifted again (logits[:, :-1] against tgt_out[:, 1:])",
          _sim({"shifted twice"}),
          "the loss compares logits[:, :-1] with batch.tgt_out[:, 1:]: batch.tgt_out is already shifted (position t "
          "of the logits predicts batch.tgt_out[:, t]), so shifting again asks each position for the token two steps "
          "ahead. Compare the logits with batch.tgt_out as they are. ({call})"),
    Entry("targets flattened in another order", "the targets flattened in another order than the logits (tgt_out.T)",
          _sim({"targets transposed"}),
          "the targets are flattened in another order than the logits (a .T or a transpose on one side only): the "
          "logits of position (b, t) are compared with another position's token. Flatten both the same way: "
          "logits.reshape(-1, V) and batch.tgt_out.reshape(-1). ({call})"),
    Entry("padding counted", None, _sim({"pad counted"}),
          "the loss counts the padding positions of batch.tgt_out: pass pad_id on (masked_cross_entropy(logits, "
          "batch.tgt_out, pad_id, ...) or ignore_index=pad_id). ({call})"),
    Entry("hard-coded pad id", None, _sim({"pad zero"}, lambda c: c.s.pad_id != 0),
          "the loss ignores the id 0 instead of the pad_id argument: use pad_id. ({call})"),
    Entry("label smoothing ignored", None, _sim({"no smoothing"}, lambda c: c.s.eps != 0 and c.by_hand),
          "your loss, written by hand, leaves label_smoothing out: it is the loss without smoothing. Add the "
          "smoothing term, (1 - eps) * nll + eps * (-log_probs.mean(dim=-1)) at each real position, or call "
          "masked_cross_entropy(logits, batch.tgt_out, pad_id, label_smoothing). ({call})"),
    Entry("label smoothing not passed", "label_smoothing not passed on",
          _sim({"no smoothing"}, lambda c: c.s.eps != 0 and not c.by_hand),
          "label_smoothing is not passed on to the loss: your loss is the one without smoothing. ({call})"),
    Entry("divided by the batch size", None, _sim({"sum / B"}),
          "your loss is the sum of the token losses divided by the batch size B (The Annotated Transformer's "
          "normalisation, by sentences): it grows with the sentences' lengths, and so does every update. Here the "
          "loss is the mean over the real target tokens (masked_cross_entropy, or the sum divided by their count): "
          "backpropagate that and return it. ({call})"),
    Entry("summed with the padding", None, _sim({"sum pad"}),
          "your loss is the sum over every position of batch.tgt_out, padding included (reduction='sum' without "
          "ignore_index): the pad positions count and the loss grows with the batch and the lengths. The loss is the "
          "mean over the real target tokens: masked_cross_entropy(logits, batch.tgt_out, pad_id, label_smoothing). "
          "({call})"),
    Entry("loss after the update returned", "train_step returns the loss recomputed after optimizer.step()",
          _sim({"loss after the update"}),
          "the parameters are updated right, but the loss you return is computed again after optimizer.step(), with "
          "the new parameters: return the loss the update was computed from (loss.item() of the forward pass before "
          "backward), the number the training curve is made of. ({call})"),
    Entry("decoder fed the whole tgt", "the decoder reads batch.tgt and logits[:, :-1] is kept (dropout draws differ)",
          _sim({"whole tgt"}),
          "the decoder reads the whole batch.tgt and you keep logits[:, :-1]. Without dropout that gives the same "
          "loss (the causal mask hides the last token from the others), but the decoder computes one position for "
          "nothing and, with dropout on, draws its dropout masks over L_tgt positions instead of L_tgt - 1, so the "
          "step is not the one asked for. Feed the shifted input with its mask, as the exercise says: "
          + _MODEL_CALL + ". ({call})"),
    Entry("values differ", None, Output(lambda c: True, "loss differs"),
          "the returned loss ({call}) is {value:.5f}, expected {expected:.5f}: the mean cross-entropy of "
          + _MODEL_CALL + " against batch.tgt_out, pad tokens ignored, with label_smoothing."),
    # the update is right: what else the call did (stage "right update")
    Entry("model left in eval mode", "the model is left in eval mode after train_step",
          Output(lambda c: not c.training, "right update"),
          "the loss and the update are right, but train_step leaves the model (or some of its modules) in eval mode "
          "({call}): the next step's dropout would be off. Keep it in train mode; evaluate elsewhere (evaluation "
          "restores the mode it found)."),
    Entry("dtype not preserved", None, Output(
        lambda c: any(d != torch.float32 for d in c.dtypes) and dict(dtype=c.dtypes[0]), "right update"),
          "the loss and the update are right, but backward() ran on a {dtype} loss ({call}), the logits being "
          "torch.float32: the loss follows the logits' dtype (a .double() or a float64 tensor in the loss doubles "
          "its memory for nothing). Leave the cast out."),
    # the update differs, in the order of _UPDATE_STAGES
    Entry("model.train() too late", None,
          _sim({"eval mode"}, lambda c: not c.s.train_mode and c.training, "eval update"),
          # the loss told nothing on this draw (eval and train mode gave the same): the update does
          "model.train() comes too late ({call}): the update was computed" + _TOO_LATE),
    Entry("model in eval mode", None,
          _sim({"eval mode"}, lambda c: not c.s.train_mode and not c.training, "eval update"),
          "the update was computed in eval mode ({call}): call model.train() at the start of train_step (before the "
          "forward pass), since an evaluation may have switched dropout off."),
    Entry("no update", "the parameters are not updated",
          Output(lambda c: matches(c.params, c.before, atol=0, rtol=0), "unchanged"), _NO_UPDATE),
    Entry("clip_norm 0 not clipped", "`if clip_norm:` skips the clipping for clip_norm=0.0, a legal bound",
          _sim({"no clip"}, lambda c: c.s.clip == 0, "clip 0"),
          "with clip_norm=0.0 the parameters moved ({call}): clipping to norm 0 zeroes every gradient, so there is "
          "no update, but `if clip_norm:` reads 0.0 as 'no clipping'. Only None means no clipping: `if clip_norm is "
          "not None: nn.utils.clip_grad_norm_(model.parameters(), clip_norm)`."),
    # the gradients left in the model are the right loss's times one number c (stage "gradients"): it names
    # the clipping and the loss scale (an update can coincide with a simulated one: no square root with
    # a gradient norm near 2 halves the step, as a scheduler stepped first does)
    Entry("clipping scales up", "manual clipping rescales gradients that are already below clip_norm", Output(
        lambda c: c.factor is not None and c.factor.clip is not None and c.factor.n2 < c.factor.clip
        and _close(c.factor.c * c.factor.n2, c.factor.clip)
        and dict(n2=c.factor.n2, scaled=c.factor.c * c.factor.n2), "gradients"),
          "your clipping scales small gradients up ({call}): their norm was {n2:.4g}, already below "
          "clip_norm={clip:g}, yet the step used gradients of norm {scaled:.4g}. Clipping only scales down: multiply "
          "by clip_norm / norm only when norm > clip_norm (nn.utils.clip_grad_norm_(model.parameters(), clip_norm) "
          "does exactly this)."),
    Entry("backward on the summed loss", "backward() on the summed loss: gradients N tokens times too large", Output(
        lambda c: c.factor is not None and _close(c.factor.c, c.factor.N) and dict(N=c.factor.N), "gradients"),
          "the step used gradients {N} times too large ({call}; {N} = the number of real target tokens): backward() "
          "ran on the summed loss. Call backward() on the mean over the real tokens, the loss train_step returns."),
    Entry("backward called twice", "backward() run twice on one loss (or on 2 * loss): the gradients doubled",
          Output(lambda c: c.factor is not None and _close(c.factor.c, 2.0), "gradients"),
          "the step used gradients twice as large as the loss's ({call}): backward() ran twice on the same loss "
          "(loss.backward(retain_graph=True) then loss.backward(): the gradients add up), or on 2 * loss. Call "
          "loss.backward() once, on the loss you return."),
    Entry("wrong clipping norm", "gradients clipped by another norm than the global 2-norm",
          Output(lambda c: c.factor is not None and c.factor.norm is not None and dict(how=c.factor.norm),
                 "gradients"),
          "your clipping measures the gradients by {how} ({call}): clip_norm bounds the 2-norm of all gradients "
          "together, sqrt(sum of every entry squared): nn.utils.clip_grad_norm_(model.parameters(), clip_norm) with "
          "its default norm_type=2."),
    # the update of each simulated mistake (stage "update"); the order of the calls is right in the
    # last four, the size of the update is not
    Entry("zero_grad in the wrong place", "gradients zeroed between backward and step",
          _sim({"no zero_grad"}, lambda c: c.grads_empty, "update"),
          "optimizer.zero_grad() is called, but at the end of the step, after optimizer.step() ({call}): the first "
          "update then still adds gradients left over from before the call (say, from a cell that looked at them). "
          "Call it at the start, before loss.backward()."),
    Entry("zero_grad forgotten", "gradients are not zeroed", _sim({"no zero_grad"}, stage="update"),
          "the update used gradients left over from before the call: optimizer.zero_grad() is missing, so every step "
          "adds its gradients to all the previous ones. Call optimizer.zero_grad() before loss.backward(). ({call})"),
    Entry("no update", None, _sim({"zero_grad after backward"}, stage="update"), _NO_UPDATE),
    Entry("scheduler stepped before the optimizer", "scheduler.step() before optimizer.step()",
          _sim({"scheduler before"}, lambda c: c.s.use_scheduler,
                                                              "update"),
          "scheduler.step() runs before optimizer.step(): the first update already uses the second step's rate. "
          "Call optimizer.step() first, then scheduler.step(). ({call})"),
    Entry("optimizer stepped twice", "optimizer.step() called twice in one training step",
          _sim({"step twice"}, stage="update"),
          "the update is twice the reference's: optimizer.step() runs twice in one call. Call it once, after the "
          "clipping. ({call})"),
    Entry("hard-coded clip_norm", "gradients clipped to a fixed norm (1.0) instead of the clip_norm argument",
          _sim({"clip 1.0"}, _clip_not_one, "update"),
          "the gradients are clipped to a norm of 1.0, not to the clip_norm argument: pass clip_norm on, "
          "nn.utils.clip_grad_norm_(model.parameters(), clip_norm). ({call})"),
    Entry("each parameter clipped separately",
          "clip_grad_norm_ applied to each parameter on its own, not to one global norm",
          _sim({"clip each"}, _clip_not_one, "update"),
          "each parameter's gradient is clipped to clip_norm on its own; clip_norm bounds the norm of all the "
          "gradients together (one global norm, one common factor, so the update keeps its direction): call "
          "nn.utils.clip_grad_norm_(model.parameters(), clip_norm) once, on all the parameters. ({call})"),
    Entry("backward on a rescaled loss", "backward() on the loss divided by B while the loss itself is returned",
          _sim({"loss / B"}, stage="update"),
          "the update is the one of (loss / B).backward() with B the batch size: the returned loss is right, but the "
          "gradient comes from another number. The loss is already a mean over the real tokens: call loss.backward() "
          "on it as it is. ({call})"),
    # no clipping in the update (stage "no clip"): the gradients left at norm clip_norm tell a clipping
    # after the step
    Entry("clipping after the step", "gradients clipped after the optimizer step",
          _sim({"no clip"}, lambda c: c.s.clip is not None and c.clipped_after, "no clip"),
          "the gradients are clipped after optimizer.step() ({call}): the update has already used the unclipped "
          "ones. Clip between loss.backward() and optimizer.step()."),
    Entry("clipping missing", "no gradient clipping", _sim({"no clip"}, lambda c: c.s.clip is not None, "no clip"),
          "the gradients are not clipped ({call}; clip_norm={clip} is below their norm): call "
          "nn.utils.clip_grad_norm_(model.parameters(), clip_norm) after loss.backward() and before "
          "optimizer.step()."),
    Entry("clip_grad_value_ instead of clip_grad_norm_", "values clipped instead of the norm",
          _sim({"clip value"}, lambda c: c.s.clip is not None, "clip value"),
          "you clip each gradient entry (clip_grad_value_); clip_norm is a bound on the global norm of all gradients "
          "together: nn.utils.clip_grad_norm_(model.parameters(), clip_norm). ({call})"),
    Entry("only some parameters clipped", "clip_grad_norm_ over a part of the model only (model.encoder.parameters())",
          Output(_partial_clipping, "partial"),
          "your clipping covers only part of the model ({call}): the gradients of {scaled} were scaled to norm "
          "clip_norm={clip:g} on their own, and those of {kept} were left as they were. clip_norm bounds the norm of "
          "all the gradients together: nn.utils.clip_grad_norm_(model.parameters(), clip_norm)."),
    Entry("update scaled", "the update has the reference's direction but another size (no catalogued cause matches)",
          Output(_update_scaled, "scaled"),
          "after {call}, the update points the right way but is {ratio:.3g} times the reference's: the order of the "
          "calls may be right, the size of the step is not. Check that the loss you call backward() on is the one "
          "you return, that clip_norm is passed on (one global norm over all the parameters) and that "
          "optimizer.step() runs once."),
    Entry("values differ", None, Output(lambda c: dict(diff=float((c.params - c.exp_params).abs().max())),
                                        "update differs"),
          "after {call}, the parameters differ from the reference's by up to {diff:.3g}, yet the loss is right: check "
          "the order zero_grad, forward, loss, backward, clip, optimizer.step, scheduler.step."),
    # no update on the first case: did any gradient reach the model's output? (stage "graph cut")
    Entry("detached from the graph", None, Output(lambda c: c.outputs and not c.reached, "graph cut"),
          "no gradient reached the model ({words}): the logits were cut from the graph before the loss (.detach(), "
          ".data, torch.no_grad(), or a copy made trainable with .requires_grad_()), so backward() stops at the "
          "copy, the parameters get no gradient and optimizer.step() changes nothing. Compute the loss from "
          "model(...)'s output directly."),
    # a failed check of a train_step that calls the student's own masked_cross_entropy (stage "helper")
    Entry("calls a failing loss", "train_step calls the student's masked_cross_entropy, which fails its own check",
          Output(lambda c: c.why is not None, "helper"),
          "it calls your masked_cross_entropy, which has not passed its check ({why}): the loss it gets is wrong, so "
          "this check cannot tell whether train_step itself is right. Fix masked_cross_entropy first (its check cell "
          "says more), or continue with the reference: run `from course_utils import masked_cross_entropy`, then "
          "the cell that defines train_step, then this check again."),
])


def _blame_the_loss(fn: Callable[..., Any]) -> None:
    """A train_step that failed and calls the student's own masked_cross_entropy: when that
    one fails its own check, the wrong loss is its fault, whatever train_step does."""
    why = own_helper_failure(fn, "masked_cross_entropy", masked_cross_entropy, check_masked_cross_entropy)
    TRAIN_STEP.detect("helper", SimpleNamespace(why=why), why=why)


@checker("train_step")
def check_train_step(fn: Callable[..., Any]) -> str:
    require_function(fn, "train_step")
    try:
        _check_each_case(fn)
    except (Failure, StudentError):
        _blame_the_loss(fn)
        raise
    return ("loss, parameters and scheduler after two steps; zero_grad, clipping, scheduler, train mode, "
            "scheduler=None")


def _check_each_case(fn: Callable[..., Any]) -> None:
    by_hand = _loss_by_hand(fn)
    for n, (draw, pass_options, words) in enumerate(_STEP_CASES):
        # a draw's setup is shared with the checks that start from the same random state: the student's
        # calls run on copies, and the simulations cached on it are the same for all
        pad_id = randint(1, 9) if draw["pad_id"] == "pad" else draw["pad_id"]
        setup = drawn_once(_draw_step_setup, **{**draw, "pad_id": pad_id})
        words = words.format(s=setup)
        try:
            _compare_step(setup, _run_student(fn, setup, words, pass_options), words, by_hand)
        except Failure as f:
            if f.mistake == "no update" and n == 0:
                _graph_cut(fn, setup, words)
            raise


CATALOGUES = (SHIFT, MCE, NOAM, TRAIN_STEP)
MISTAKES: dict[str, list[str]] = {table.exercise: table.names() for table in CATALOGUES}  # generated


# ---------------------------------------------------------------- hints
register_hints("shift_targets", [
    "The decoder reads a prefix and predicts the next token. Which tokens does it read, and which does it "
    "have to predict?",
    "It reads everything but the last token and predicts everything but the first (<bos>): both have "
    "L_tgt - 1 columns.",
    "Slice along the time axis (axis 1): tgt[:, :-1] and tgt[:, 1:].",
])
register_hints("masked_cross_entropy", [
    "Start from log_probs = logits.log_softmax(dim=-1), shape (B, L, V). The loss of one position is "
    "(1 - eps) * (-log p of the correct word) + eps * (-mean over the V words of log p).",
    "The correct word's log p: log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1), shape (B, L). The "
    "smoothing term: -log_probs.mean(dim=-1), also (B, L). Combine them with eps = label_smoothing.",
    "Padding must count neither in the sum nor in the count: keep the positions where targets != pad_id "
    "(per_position[targets != pad_id]) and take the mean of those only.",
    "To check yourself: F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=pad_id, "
    "label_smoothing=eps) computes the same number (.reshape, not .view: the targets may be a slice).",
])
register_hints("noam_lr", [
    "Read the formula as two curves joined by a min: one rises in proportion to step, the other falls like "
    "1 / sqrt(step). Which one is smaller before the warm-up ends, and which after? In Python, x ** -0.5 is "
    "1 / sqrt(x).",
    "Steps count from 1 here, so step ** -0.5 is fine. (LambdaLR counts from 0: add 1 where you build the "
    "scheduler, not in noam_lr.)",
    "Before the warm-up ends, step * warmup ** -1.5 is the smaller branch (linear growth); after, "
    "step ** -0.5 (decay). They meet at step = warmup: hence min, not max.",
    "The whole formula: factor * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5).",
])
register_hints("train_step", [
    "Follow the eight points of the exercise in order; the easiest to forget are the first two (train mode, "
    "clearing the old gradients) and the clipping, which must sit between backward and the optimizer's step.",
    "Forward with teacher forcing: logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask); "
    "the loss compares them with batch.tgt_out, ignoring pad_id, with label_smoothing.",
    "Clip between backward and step: nn.utils.clip_grad_norm_(model.parameters(), clip_norm). The scheduler "
    "is optional: `if scheduler is not None: scheduler.step()`.",
    "Return loss.item(), a Python float, so the caller can keep a history without holding on to the graph.",
])
