"""The translator's training run (backs notebook 07): ``fit``, its ``History``, evaluation, the ``RECIPE``.

It trains a :class:`~course_utils.Transformer` on numbers-to-words with the exercise
references of :mod:`course_utils.training` (or the student's own functions, chosen by
:mod:`course_utils.student_functions`):

* :func:`evaluate`, :func:`predict`, :func:`mistakes` - greedy decoding of a split:
  exact-sequence match and token accuracy, predictions, the table of errors.
* :func:`fit` - the training loop: seeded shuffling (optionally bucketed by length),
  a progress bar, validation, history for
  :func:`course_utils.plotting.plot_training_curves`, checkpoints and exact resume.
  It is four small steps: :class:`FitConfig` (every setting, checked before any work),
  :meth:`_Run.resume` / :meth:`_Run.save` (the checkpoint) and :func:`_train_loop`.
* :data:`RECIPE` - the settings notebook 07 trains with (``benchmarks/train_recipe.py``
  measured them); the shipped model it made is :mod:`course_utils.translator_checkpoint`.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from . import data as _data
from ._validate import check_int, check_optional_function, is_number
from .data import Batch, NumberWordsDataset, Vocab, collate
from .decoding import greedy_decode_cached
from .model import make_src_mask, make_tgt_mask
from .modes import eval_mode
from .training import REFERENCES, SCHEDULES, masked_cross_entropy, train_step_with_loss, warmup_schedule

# --------------------------------------------------------------------------- the recipe

# What notebook 07 trains: `Transformer(len(src_vocab), len(tgt_vocab), **RECIPE["model"])`,
# then `fit(model, train, valid, **RECIPE["fit"])`; fit's own defaults are RECIPE["fit"].
# benchmarks/train_recipe.py measured it on the 2-core CPU (seed 0): 60 s of training on 2
# threads, 83 s on 1 (the README's table), 99.87-99.93 % exact match on the test split. 2,000 steps because
# 1,300 steps were at the edge (3 of 7 seeds below 99 %), while 2,000 reached >= 99.87 % on
# all 9 seeds tried. Plain shuffling: length buckets make steps 30 % faster, learning far slower.
RECIPE: dict[str, dict[str, Any]] = {
    "model": dict(d_model=64, num_heads=4, num_layers=2, d_ff=256, dropout=0.0, max_len=32, norm_first=False),
    "fit": dict(
        steps=2000,
        batch_size=64,
        lr=3e-3,
        warmup=100,
        schedule="linear",
        label_smoothing=0.0,
        clip_norm=1.0,
        bucket=0,
        seed=0,
    ),
}

# Decoding budget for this task: 19 words + <eos>.
DECODE_MAX_LEN = _data.MAX_TARGET_WORDS + 1


# --------------------------------------------------------------------------- evaluation


def _model_device(model: nn.Module) -> torch.device:
    try:
        return next(model.parameters()).device
    except StopIteration:
        return torch.device("cpu")


def _as_dataset(
    data: Any, src_vocab: Vocab | None, tgt_vocab: Vocab | None
) -> tuple[NumberWordsDataset, Vocab, Vocab]:
    if isinstance(data, NumberWordsDataset):
        return data, data.src_vocab, data.tgt_vocab
    src_vocab = src_vocab or _data.source_vocab()
    tgt_vocab = tgt_vocab or _data.target_vocab()
    if isinstance(data, (str, bytes)) or not isinstance(data, Iterable):
        raise TypeError(
            f"expected a list of (source, target) pairs or a NumberWordsDataset, got {type(data).__name__}"
        )
    pairs = list(data)
    for i, pair in enumerate(pairs):
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2 and all(isinstance(s, str) for s in pair)):
            raise TypeError(f"pairs[{i}] must be a (source, target) pair of str, got {pair!r}")
    return NumberWordsDataset(pairs, src_vocab, tgt_vocab), src_vocab, tgt_vocab


def _length_order(lengths: Sequence[int]) -> list[int]:
    # decode similar lengths together: less padding, and a batch stops as soon as its
    # longest sequence has ended
    return sorted(range(len(lengths)), key=lambda i: lengths[i])


@torch.no_grad()
def _decode_ids(
    model: nn.Module, sources: Sequence[Tensor], batch_size: int, max_len: int, pad_id: int = _data.PAD_ID
) -> list[list[int]]:
    """Greedy outputs (ids after ``<bos>``, up to and without ``<eos>``), in input order."""
    check_int("batch_size", batch_size, low=1)
    check_int("max_len", max_len, low=1)
    device = _model_device(model)
    order = _length_order([len(s) for s in sources])
    outputs: list[list[int]] = [[] for _ in sources]
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        src = nn.utils.rnn.pad_sequence([sources[i] for i in rows], batch_first=True, padding_value=pad_id)
        src = src.to(device)  # (B, L_src)
        src_mask = make_src_mask(src, pad_id)  # (B, 1, L_src)
        out = greedy_decode_cached(
            model, src, max_len, _data.BOS_ID, _data.EOS_ID, src_mask=src_mask, pad_id=pad_id
        )  # (B, T)
        for i, row in zip(rows, out[:, 1:].tolist()):
            outputs[i] = row[: row.index(_data.EOS_ID)] if _data.EOS_ID in row else row
    return outputs


def evaluate(
    model: nn.Module,
    data: Any,
    src_vocab: Vocab | None = None,
    tgt_vocab: Vocab | None = None,
    batch_size: int = 500,
    max_len: int = DECODE_MAX_LEN,
) -> dict[str, float | int]:
    """Greedy-decode every source of ``data`` and score it against its target.

    Args:
        data: ``(source, target)`` text pairs (``load_split("test")``), a
            :class:`~course_utils.data.NumberWordsDataset`, or an iterable of
            :class:`~course_utils.data.Batch` (a ``DataLoader`` with ``collate``).
        src_vocab, tgt_vocab: default to the task's vocabularies.
        batch_size: sources decoded at once (sorted by length first).
        max_len: most tokens generated per source (words + ``<eos>``).

    Returns:
        ``{"exact_match": fraction of outputs equal to their target (every word and the
        end), "token_accuracy": fraction of target tokens (words and ``<eos>``, padding
        excluded) predicted at their position, "n": number of examples}``. Decodes with
        ``greedy_decode_cached`` (the same tokens as ``greedy_decode``, faster).
    """
    sources, golds = _sources_and_targets(data, src_vocab, tgt_vocab)
    outputs = _decode_ids(model, sources, batch_size, max_len)
    exact = correct = total = 0
    for out, gold in zip(outputs, golds):
        exact += out == gold
        reference = gold + [_data.EOS_ID]  # (n + 1,) the words, then the end
        produced = out + [_data.EOS_ID]  # an output cut by max_len gets an <eos> it never made
        if len(out) >= max_len:
            produced = out
        correct += sum(p == g for p, g in zip(produced, reference))
        total += len(reference)
    n = len(golds)
    return {
        "exact_match": exact / n if n else float("nan"),
        "token_accuracy": correct / total if total else float("nan"),
        "n": n,
    }


def _sources_and_targets(
    data: Any, src_vocab: Vocab | None, tgt_vocab: Vocab | None
) -> tuple[list[Tensor], list[list[int]]]:
    """Source id tensors and target word ids (no ``<bos>``/``<eos>``/padding)."""
    if isinstance(data, Batch):
        data = [data]
    items = list(data) if not isinstance(data, NumberWordsDataset) else None
    if items is not None and items and isinstance(items[0], Batch):
        sources, golds = [], []
        for batch in items:
            for src, tgt in zip(batch.src.cpu(), batch.tgt.cpu()):
                sources.append(src[src != _data.PAD_ID])
                golds.append(_strip(tgt.tolist()))
        return sources, golds
    dataset, _, _ = _as_dataset(data if items is None else items, src_vocab, tgt_vocab)
    return [s for s, _ in dataset.items], [_strip(t.tolist()) for _, t in dataset.items]


def _strip(ids: list[int]) -> list[int]:
    """Word ids of an encoded target: drop ``<bos>``, stop at ``<eos>``, drop padding."""
    words = []
    for i in ids:
        if i == _data.EOS_ID:
            break
        if i not in (_data.BOS_ID, _data.PAD_ID):
            words.append(i)
    return words


def predict(
    model: nn.Module,
    texts: str | Sequence[str],
    src_vocab: Vocab | None = None,
    tgt_vocab: Vocab | None = None,
    batch_size: int = 500,
    max_len: int = DECODE_MAX_LEN,
) -> str | list[str]:
    """The model's words for one source string (returns a str) or a list of them (a list).

    ``predict(model, "1,234.5") -> "one thousand two hundred thirty four point five"``
    (once trained). A character outside the source vocabulary raises ``ValueError``.
    """
    src_vocab = src_vocab or _data.source_vocab()
    tgt_vocab = tgt_vocab or _data.target_vocab()
    single = isinstance(texts, str)
    texts = [texts] if single else list(texts)
    for i, text in enumerate(texts):
        if not isinstance(text, str) or not text:
            raise ValueError(f"texts[{i}] must be a non-empty str, got {text!r}")
    sources = [torch.tensor(src_vocab.encode(t), dtype=torch.long) for t in texts]
    outputs = _decode_ids(model, sources, batch_size, max_len) if texts else []
    words = [tgt_vocab.decode(ids) for ids in outputs]
    return words[0] if single else words


def mistakes(
    model: nn.Module,
    pairs: Sequence[tuple[str, str]],
    src_vocab: Vocab | None = None,
    tgt_vocab: Vocab | None = None,
    limit: int | None = None,
    batch_size: int = 500,
    max_len: int = DECODE_MAX_LEN,
) -> list[tuple[str, str, str]]:
    """``(source, expected, got)`` for every pair the model gets wrong (at most ``limit``)."""
    if limit is not None:
        check_int("limit", limit, low=0)
    pairs = list(pairs)
    got = predict(model, [s for s, _ in pairs], src_vocab, tgt_vocab, batch_size, max_len)
    wrong = [(s, t, g) for (s, t), g in zip(pairs, got) if g != t]
    return wrong if limit is None else wrong[:limit]


# --------------------------------------------------------------------------- fit


class History(dict):
    """``fit``'s result: ``{"train_loss": [one per step], "val_loss": [...],
    "val_accuracy": [exact match ...], "val_token_accuracy": [...]}`` (the validation
    series have one value per evaluation), ready for
    :func:`course_utils.plotting.plot_training_curves`.

    Attributes: ``eval_steps`` (the step of each evaluation), ``steps`` (steps done),
    ``train_seconds`` (wall time building batches and in :func:`~course_utils.training.train_step`: no
    evaluation, no checkpoints), ``train_cpu_seconds`` (the process's CPU time in the
    same, all threads together).
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.eval_steps: list[int] = []
        self.steps = 0
        self.train_seconds = 0.0
        self.train_cpu_seconds = 0.0

    def state(self) -> dict[str, Any]:
        """Plain lists, ints and floats (``torch.load(weights_only=True)`` reads them);
        :meth:`from_state` gives the history back."""
        return {
            "series": {k: list(v) for k, v in self.items()},
            "eval_steps": list(self.eval_steps),
            "steps": self.steps,
            "train_seconds": self.train_seconds,
            "train_cpu_seconds": self.train_cpu_seconds,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> History:
        h = cls({k: list(v) for k, v in state["series"].items()})
        h.eval_steps = list(state["eval_steps"])
        h.steps = int(state["steps"])
        # timings are absent from states written before they were recorded
        h.train_seconds = float(state.get("train_seconds", 0.0))
        h.train_cpu_seconds = float(state.get("train_cpu_seconds", 0.0))
        return h


def epoch_batches(
    lengths: Sequence[int], batch_size: int, generator: torch.Generator, bucket: int = 0
) -> list[list[int]]:
    """One epoch's batches of example indices, drawn from ``generator`` only.

    A random permutation of the examples, cut into full batches (the last partial batch
    is dropped, so every epoch has ``len(lengths) // batch_size`` batches). With
    ``bucket > 0``, each window of ``bucket`` batches' worth of examples is first sorted
    by ``lengths`` (less padding: faster steps) and the batches are then shuffled, so
    consecutive batches still come from all over the data.
    """
    check_int("batch_size", batch_size, low=1)
    check_int("bucket", bucket, low=0)
    n = len(lengths)
    num_batches = n // batch_size
    perm = torch.randperm(n, generator=generator).tolist()
    if bucket:
        window = bucket * batch_size
        perm = [i for s in range(0, n, window) for i in sorted(perm[s : s + window], key=lambda j: lengths[j])]
    batches = [perm[b * batch_size : (b + 1) * batch_size] for b in range(num_batches)]
    if bucket:
        batches = [batches[b] for b in torch.randperm(num_batches, generator=generator).tolist()]
    return batches


@dataclass
class _Position:
    """Where the data order stands: the epoch, the batch within it, and the generator
    state at the start of the epoch (redrawing from it gives the same order)."""

    epoch: int
    batch: int
    epoch_state: Tensor


@dataclass(frozen=True)
class FitConfig:
    """The settings of one :func:`fit` run, one object: ``FitConfig()`` is the recipe
    (``RECIPE["fit"]``, the fields' defaults), ``FitConfig(steps=500, lr=1e-3)`` changes two,
    ``dataclasses.replace(config, seed=1)`` one more. Every field is checked when the object
    is made: a wrong value raises ``ValueError`` (a wrong type of ``checkpoint_path``,
    ``resume``: ``TypeError``) naming the field, what it got and what it takes.

    Fields:
        steps, epochs: how long to train, at most one of them (``epochs`` counts full
            passes of ``len(train) // batch_size`` batches); neither: the recipe's
            ``RECIPE["fit"]["steps"]``.
        batch_size: examples per step.
        lr, warmup, schedule, total_steps, factor: the learning rate follows
            :func:`~course_utils.training.warmup_schedule` with this shape; ``lr`` is the optimizer's ``lr`` (the
            peak for ``"linear"``, ``"inverse_sqrt"`` and ``"constant"``, a multiplier of
            the formula for ``"noam"``, so use ``lr=1.0`` there). ``"linear"`` decays to 0
            at ``total_steps``, by default the end of this run.
        label_smoothing, clip_norm: passed to :func:`~course_utils.training.train_step`.
        bucket: batches per length-sorting window (:func:`epoch_batches`); 0 = plain shuffle.
        seed: seeds the data order (a ``torch.Generator`` of its own) and torch's global
            generator (dropout). The model's initial weights are the caller's.
        weight_decay: Adam's L2 penalty (0 in the recipe).
        checkpoint_path: where to save, at the end of every epoch and of the run: the
            model, optimizer and scheduler states, the step, the history, the data-order
            generator's state and torch's random state.
        resume: continue from ``checkpoint_path`` when it exists (same settings: a
            different one raises ``ValueError``). A run interrupted after ``k`` steps and
            resumed gives the same parameters as one that never stopped (same thread
            count). To stop early on purpose with ``schedule="linear"``, fix
            ``total_steps``, since by default it follows ``steps``.
        eval_every: validate every this many steps; ``None``: at the end of every epoch.
            The last step is always validated.
        eval_batch_size: sources decoded at once during validation.
        progress: ``True``: a ``tqdm`` progress bar (a widget in Jupyter when ipywidgets is
            installed); ``"text"``: a plain text bar on standard output, which a saved
            notebook keeps in its finished state; ``False``: none.
    """

    steps: int | None = None
    epochs: int | None = None
    batch_size: int = RECIPE["fit"]["batch_size"]
    lr: float = RECIPE["fit"]["lr"]
    warmup: int = RECIPE["fit"]["warmup"]
    schedule: str = RECIPE["fit"]["schedule"]
    total_steps: int | None = None
    factor: float = 1.0
    label_smoothing: float = RECIPE["fit"]["label_smoothing"]
    clip_norm: float | None = RECIPE["fit"]["clip_norm"]
    bucket: int = RECIPE["fit"]["bucket"]
    seed: int = RECIPE["fit"]["seed"]
    weight_decay: float = 0.0
    checkpoint_path: str | os.PathLike | None = None
    resume: bool = False
    eval_every: int | None = None
    eval_batch_size: int = 500
    progress: bool | str = True

    def __post_init__(self) -> None:
        _check_fit_config(self)

    @property
    def num_steps(self) -> int | None:
        """The steps asked for: ``steps``, the recipe's when neither ``steps`` nor ``epochs``
        is given, ``None`` when ``epochs`` decides (the training set's size is needed)."""
        if self.epochs is not None:
            return None
        return RECIPE["fit"]["steps"] if self.steps is None else self.steps


FIT_SETTINGS = tuple(f.name for f in dataclasses.fields(FitConfig))


def fit(
    model: nn.Module,
    train_pairs: Any,
    valid_pairs: Any | None = None,
    config: FitConfig | None = None,
    *,
    src_vocab: Vocab | None = None,
    tgt_vocab: Vocab | None = None,
    train_step: Callable[..., float] | None = None,
    shift_targets: Callable[[Tensor], tuple[Tensor, Tensor]] | None = None,
    masked_cross_entropy: Callable[..., Tensor] | None = None,
    noam_lr: Callable[..., float] | None = None,
    **settings: Any,
) -> History:
    """Train ``model`` with Adam and :func:`~course_utils.training.train_step`; return its :class:`History`.

    Args:
        model: a :class:`~course_utils.Transformer` for the two vocabularies; trained on
            the device of its parameters.
        train_pairs, valid_pairs: ``(source, target)`` text pairs (or
            :class:`~course_utils.data.NumberWordsDataset`); ``valid_pairs=None``: no
            validation.
        config: the run's :class:`FitConfig`; ``None``: the recipe's, ``FitConfig()``.
        **settings: fields of :class:`FitConfig` (``steps=500``, ``**RECIPE["fit"]``, ...)
            that replace the config's; a name that is not a field raises ``TypeError``.
        src_vocab, tgt_vocab: the vocabularies, when ``train_pairs`` are texts (``None``:
            the course's, :mod:`course_utils.data`).
        train_step, shift_targets, masked_cross_entropy, noam_lr: the four exercises of
            notebook 07, to train with the student's own (``None``: the reference; see
            :func:`~course_utils.student_functions.choose_functions`). ``train_step`` is called like
            :func:`~course_utils.training.train_step`;
            ``shift_targets`` makes every batch's ``tgt_in``/``tgt_out`` (and with them
            ``tgt_mask``); ``masked_cross_entropy`` is the loss of the reference step (a
            student's ``train_step`` calls the loss it calls); ``noam_lr`` is the formula
            of ``schedule="noam"`` (the recipe's ``"linear"`` does not use it). Functions
            that compute what the reference does give the same parameters. The validation
            loss is always the reference's.

    Returns:
        A :class:`History` (a dict of lists plus timing attributes).
    """
    c = _fit_config(config, settings)
    tqdm, bar_options = _progress_bar(c.progress)
    step_fn, shift_fn = _student_step(train_step, shift_targets, masked_cross_entropy)

    train_set, src_vocab, tgt_vocab = _as_dataset(train_pairs, src_vocab, tgt_vocab)
    if len(train_set) < c.batch_size:
        raise ValueError(f"batch_size={c.batch_size} is larger than the training set ({len(train_set)} pairs)")
    valid_set = None if valid_pairs is None else _as_dataset(valid_pairs, src_vocab, tgt_vocab)[0]
    per_epoch = len(train_set) // c.batch_size
    num_steps = c.num_steps if c.epochs is None else c.epochs * per_epoch
    horizon = c.total_steps if c.total_steps is not None else num_steps
    if c.schedule == "linear" and horizon <= c.warmup:
        raise ValueError(
            f"schedule='linear' decays until total_steps={horizon}, which must be larger than warmup={c.warmup}"
        )
    # the settings a resumed run must share with the run it continues
    shared = dict(batch_size=c.batch_size, lr=float(c.lr), warmup=c.warmup, schedule=c.schedule,
                  total_steps=horizon if c.schedule == "linear" else None, label_smoothing=float(c.label_smoothing),
                  clip_norm=None if c.clip_norm is None else float(c.clip_norm), bucket=c.bucket, seed=c.seed,
                  weight_decay=float(c.weight_decay), num_examples=len(train_set))

    optimizer = make_optimizer(model, c.lr, c.weight_decay)
    scheduler = warmup_schedule(optimizer, c.warmup, c.schedule, d_model=getattr(model, "d_model", None),
                                factor=c.factor, total_steps=shared["total_steps"],
                                noam=check_optional_function("noam_lr", noam_lr))
    run = _Run(model, optimizer, scheduler, torch.Generator().manual_seed(c.seed),
               None if c.checkpoint_path is None else Path(c.checkpoint_path), shared)
    if c.resume and run.path is not None and run.path.is_file():
        run.resume()
    else:
        torch.manual_seed(c.seed)  # dropout masks

    bar = tqdm(total=num_steps, initial=min(run.step, num_steps), disable=not c.progress, desc="training",
               unit="step", **bar_options)
    try:
        _train_loop(run, train_set, valid_set, num_steps, per_epoch, step_fn, shift_fn, bar,
                    label_smoothing=c.label_smoothing, clip_norm=c.clip_norm, eval_every=c.eval_every,
                    eval_batch_size=c.eval_batch_size)
    finally:
        bar.close()
    model.eval()
    return run.history


def _fit_config(config: Any, settings: dict[str, Any]) -> FitConfig:
    """``config`` (``None``: the recipe's) with ``settings`` (fit's keywords) in place of its fields."""
    if config is None:
        config = FitConfig()
    elif not isinstance(config, FitConfig):
        raise TypeError(f"config must be a FitConfig (or None for the recipe's), got {type(config).__name__}")
    unknown = [name for name in settings if name not in FIT_SETTINGS]
    if unknown:
        raise TypeError(f"fit() got an unexpected keyword argument {unknown[0]!r}; its settings are the fields "
                        f"of FitConfig: {', '.join(FIT_SETTINGS)}")
    return dataclasses.replace(config, **settings) if settings else config


def _progress_bar(progress: bool | str) -> tuple[Any, dict[str, Any]]:
    """The ``tqdm`` class and its options for ``fit(progress=...)`` (checked by :class:`FitConfig`)."""
    if progress == "text":
        import sys

        from tqdm.std import tqdm

        return tqdm, dict(file=sys.stdout, mininterval=5.0)  # few updates: a short saved output
    from tqdm.auto import tqdm

    return tqdm, {}


def _check_fit_config(c: FitConfig) -> None:
    """Reject a wrong setting of :class:`FitConfig` before any work, naming it."""
    if c.steps is not None and c.epochs is not None:
        raise ValueError(f"give steps or epochs, not both (got steps={c.steps!r}, epochs={c.epochs!r})")
    for name, low in (("steps", 0), ("epochs", 0), ("total_steps", 1), ("eval_every", 1)):
        if getattr(c, name) is not None:
            check_int(name, getattr(c, name), low=low)
    for name, low in (("batch_size", 1), ("warmup", 1), ("bucket", 0), ("seed", 0), ("eval_batch_size", 1)):
        check_int(name, getattr(c, name), low=low)
    if not (is_number(c.lr) and c.lr > 0):
        raise ValueError(f"lr must be a positive number, got {c.lr!r}")
    if not (is_number(c.factor) and c.factor > 0):
        raise ValueError(f"factor must be a positive number, got {c.factor!r}")
    if not (is_number(c.weight_decay) and c.weight_decay >= 0):
        raise ValueError(f"weight_decay must be a non-negative number, got {c.weight_decay!r}")
    if c.clip_norm is not None and not (is_number(c.clip_norm) and c.clip_norm > 0):
        raise ValueError(f"clip_norm must be a positive number or None, got {c.clip_norm!r}")
    if not (is_number(c.label_smoothing) and 0.0 <= c.label_smoothing <= 1.0):
        raise ValueError(f"label_smoothing must be in [0, 1], got {c.label_smoothing!r}")
    if c.schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {c.schedule!r}")
    if c.checkpoint_path is not None and not isinstance(c.checkpoint_path, (str, os.PathLike)):
        raise TypeError(f"checkpoint_path must be a path (str or os.PathLike) or None, "
                        f"got {type(c.checkpoint_path).__name__}")
    if not isinstance(c.resume, bool):
        raise TypeError(f"resume must be True or False, got {c.resume!r}")
    if c.resume and c.checkpoint_path is None:
        raise ValueError("resume=True needs a checkpoint_path")
    if c.progress not in (True, False, "text"):
        raise ValueError(f"progress must be True, False or 'text', got {c.progress!r}")


def _student_step(
    train_step: Any, shift_targets: Any, masked_cross_entropy: Any
) -> tuple[Callable[..., float], Callable[[Tensor], tuple[Tensor, Tensor]] | None]:
    """The step function ``fit`` calls, and the shift it applies to every batch (``None``:
    the batches' own ``tgt_in``/``tgt_out``, which is the reference's shift)."""
    step_fn = check_optional_function("train_step", train_step)
    shift_fn = check_optional_function("shift_targets", shift_targets)
    loss_fn = (check_optional_function("masked_cross_entropy", masked_cross_entropy)
               or REFERENCES["masked_cross_entropy"])
    if step_fn is None:
        def step_fn(model, batch, optimizer, scheduler, pad_id, label_smoothing, clip_norm):  # noqa: ANN001
            return train_step_with_loss(model, batch, optimizer, scheduler, pad_id, label_smoothing, clip_norm, loss_fn)
    return step_fn, shift_fn


@dataclass
class _Run:
    """What one :func:`fit` call trains and where it stands: the step, the history, the
    data order's position; :meth:`save` and :meth:`resume` write and read all of it."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    generator: torch.Generator  # the data order's own generator
    path: Path | None  # the checkpoint; None: no saving
    config: dict[str, Any]  # the settings a resumption must share
    step: int = 0
    history: History = dataclasses.field(
        default_factory=lambda: History(train_loss=[], val_loss=[], val_accuracy=[], val_token_accuracy=[])
    )
    position: _Position | None = None

    def __post_init__(self) -> None:
        if self.position is None:
            self.position = _Position(epoch=0, batch=0, epoch_state=self.generator.get_state())

    def save(self) -> None:
        """Write everything an exact resumption needs (no-op without a path)."""
        if self.path is None:
            return
        state = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "step": self.step,
            "epoch": self.position.epoch,
            "batch": self.position.batch,
            "epoch_generator_state": self.position.epoch_state,
            "torch_rng_state": torch.get_rng_state(),
            "history": self.history.state(),
            "config": self.config,
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        torch.save(state, tmp)
        os.replace(tmp, self.path)  # never a half-written checkpoint

    def resume(self) -> None:
        """Continue from the checkpoint at ``path``; ``ValueError`` if its settings differ."""
        state = torch.load(self.path, map_location="cpu", weights_only=True)
        saved = state["config"]
        changed = {k: (saved.get(k), v) for k, v in self.config.items() if saved.get(k) != v}
        if changed:
            raise ValueError(
                "cannot resume with different settings (checkpoint value, now): "
                + ", ".join(f"{k}={a!r} -> {b!r}" for k, (a, b) in changed.items())
            )
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.step = int(state["step"])
        self.history = History.from_state(state["history"])
        self.position = _Position(int(state["epoch"]), int(state["batch"]), state["epoch_generator_state"])
        torch.set_rng_state(state["torch_rng_state"])


def _train_loop(
    run: _Run,
    train_set: NumberWordsDataset,
    valid_set: NumberWordsDataset | None,
    num_steps: int,
    per_epoch: int,
    step_fn: Callable[..., float],
    shift_fn: Callable[[Tensor], tuple[Tensor, Tensor]] | None,
    bar: Any,
    *,
    label_smoothing: float,
    clip_norm: float | None,
    eval_every: int | None,
    eval_batch_size: int,
) -> None:
    """Train ``run`` up to ``num_steps``: epochs of seeded batches, validation every
    ``eval_every`` steps (else at each epoch's end) and at the end, a checkpoint at each
    epoch's end and at the end."""
    model, history = run.model, run.history
    device = _model_device(model)
    lengths = [len(t) * 64 + len(s) for s, t in train_set.items]  # sort by target, then source length

    def validate() -> None:
        if valid_set is None or (history.eval_steps and history.eval_steps[-1] == run.step):
            return
        result = evaluate(model, valid_set, batch_size=eval_batch_size)
        history["val_loss"].append(_teacher_forced_loss(model, valid_set, label_smoothing, eval_batch_size))
        history["val_accuracy"].append(result["exact_match"])
        history["val_token_accuracy"].append(result["token_accuracy"])
        history.eval_steps.append(run.step)
        bar.set_postfix(loss=f"{history['train_loss'][-1]:.3f}" if history["train_loss"] else "-",
                        val_acc=f"{result['exact_match']:.3f}")

    while run.step < num_steps:
        run.generator.set_state(run.position.epoch_state)
        batches = epoch_batches(lengths, run.config["batch_size"], run.generator, run.config["bucket"])
        for b in range(run.position.batch, per_epoch):
            if run.step >= num_steps:
                break
            wall, cpu = time.perf_counter(), time.process_time()
            batch = collate([train_set[i] for i in batches[b]]).to(device)
            if shift_fn is not None:
                batch = shifted_batch(batch, shift_fn)
            loss = step_fn(model, batch, run.optimizer, run.scheduler, _data.PAD_ID, label_smoothing, clip_norm)
            history.train_seconds += time.perf_counter() - wall
            history.train_cpu_seconds += time.process_time() - cpu
            history["train_loss"].append(loss)
            run.step += 1
            history.steps = run.step
            run.position.batch = b + 1
            bar.update(1)
            if run.step % 10 == 0:
                bar.set_postfix(loss=f"{loss:.3f}", refresh=False)
            if eval_every is not None and run.step % eval_every == 0:
                validate()
        if run.position.batch >= per_epoch:  # the epoch is complete: the next starts here
            run.position = _Position(run.position.epoch + 1, 0, run.generator.get_state())
            if eval_every is None:
                validate()
            run.save()
    validate()
    run.save()


def shifted_batch(
    batch: Batch, shift_targets: Callable[[Tensor], tuple[Tensor, Tensor]], pad_id: int = _data.PAD_ID
) -> Batch:
    """``batch`` with ``tgt_in``, ``tgt_out`` (and from them ``tgt_mask``, ``num_tokens``)
    made by ``shift_targets(batch.tgt)`` instead of by :func:`~course_utils.data.collate`."""
    tgt_in, tgt_out = shift_targets(batch.tgt)  # (B, L_tgt - 1) each
    return dataclasses.replace(
        batch,
        tgt_in=tgt_in,
        tgt_out=tgt_out,
        tgt_mask=make_tgt_mask(tgt_in, pad_id),  # (B, L_tgt - 1, L_tgt - 1)
        num_tokens=int((tgt_out != pad_id).sum()),
    )


def make_optimizer(model: nn.Module, lr: float, weight_decay: float = 0.0) -> torch.optim.Adam:
    """Adam with the paper's ``betas=(0.9, 0.98)``, ``eps=1e-9``.

    Uses the fused implementation when this torch has it for the model's device (one
    kernel for all parameters: about 15 % faster per step for the notebook's small model
    on a CPU), else ``foreach``; all three give the same training up to float rounding.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    kwargs = dict(lr=lr, betas=(0.9, 0.98), eps=1e-9, weight_decay=weight_decay)
    try:
        return torch.optim.Adam(params, fused=True, **kwargs)
    except (RuntimeError, TypeError, ValueError):  # torch < 2.4 on a CPU: no fused Adam
        return torch.optim.Adam(params, foreach=True, **kwargs)


@torch.no_grad()
def _teacher_forced_loss(
    model: nn.Module, dataset: NumberWordsDataset, label_smoothing: float, batch_size: int
) -> float:
    """The loss on ``dataset`` with teacher forcing, mean over all its target tokens."""
    device = _model_device(model)
    total, count = 0.0, 0
    order = _length_order([len(t) for _, t in dataset.items])
    with eval_mode(model):
        for start in range(0, len(order), batch_size):
            batch = collate([dataset.items[i] for i in order[start : start + batch_size]]).to(device)
            logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)  # (B, L_tgt - 1, V)
            loss = masked_cross_entropy(logits, batch.tgt_out, _data.PAD_ID, label_smoothing)
            total += float(loss) * batch.num_tokens
            count += batch.num_tokens
    return total / count


__all__ = [
    "RECIPE",
    "DECODE_MAX_LEN",
    "History",
    "evaluate",
    "predict",
    "mistakes",
    "epoch_batches",
    "FitConfig",
    "fit",
    "shifted_batch",
    "make_optimizer",
]
