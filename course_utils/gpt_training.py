"""Training notebook 09's character-level language model on tiny Shakespeare, and its checkpoint.

* :class:`CharTokenizer`: one id per character of the text (the notebook builds the same
  one in a line: the sorted set of characters).
* :func:`random_windows`: a batch of ``B`` random windows of ``L + 1`` characters; the model
  reads the first ``L`` and predicts the last ``L`` (the same tensor shifted by one).
* :func:`language_model_loss`: next-token cross-entropy of a model's logits.
* :func:`fit_gpt`: AdamW, a linear warm-up then a cosine decay, gradient clipping; returns
  the history of losses.
* :data:`GPT_RECIPE`: the shipped checkpoint's recipe (4 blocks of width 128, a context of 128
  characters, 8,000 steps: about an hour on 1 thread); :func:`load_pretrained_gpt` loads
  ``course_utils/pretrained/shakespeare_gpt.pt``, the model it trains
  (``python -m course_utils.gpt_training --write`` retrains it).
* :data:`FAST_RECIPE`: what the notebook trains with ``TRAIN = True`` (the same model with a
  context of 64 characters, 900 steps: about two minutes on 2 threads; ``benchmarks/gpt_train.py``
  measures its time and loss over seeds).

The models read only the contract's parts of a ``GPT`` (the context length from its position
table), so a student's own ``GPT`` trains and evaluates here too. The last 10 % of the lines
of the text are held out for validation.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ._validate import check_rank
from .gpt import GPT, context_length, vocabulary_size
from .modes import eval_mode
from .stories import load_shakespeare

CHECKPOINT = Path(__file__).resolve().parent / "pretrained" / "shakespeare_gpt.pt"
FORMAT = 2
VALID_FRACTION = 0.1

# The shipped checkpoint (trained offline on 1 thread: the meta of the file says how long).
GPT_RECIPE: dict[str, dict[str, Any]] = {
    "model": dict(d_model=128, num_heads=4, num_layers=4, d_ff=512, dropout=0.0, max_len=128),
    "fit": dict(steps=8000, batch_size=32, lr=2e-3, warmup=200, weight_decay=0.1, clip_norm=1.0, seed=0,
                eval_every=500),
}
# TRAIN = True in the notebook: the same model with half the context, 900 steps (benchmarks/gpt_train.py).
FAST_RECIPE: dict[str, dict[str, Any]] = {
    "model": dict(GPT_RECIPE["model"], max_len=64),
    "fit": dict(steps=900, batch_size=32, lr=3e-3, warmup=50, weight_decay=0.1, clip_norm=1.0, seed=0,
                eval_every=150),
}


class CharTokenizer:
    """Characters <-> ids: ``itos`` is the sorted list of the text's distinct characters."""

    def __init__(self, text: str):
        self.itos = sorted(set(text))
        self.stoi = {c: i for i, c in enumerate(self.itos)}

    def __len__(self) -> int:
        return len(self.itos)

    def __repr__(self) -> str:
        return f"CharTokenizer({len(self)} characters)"

    def encode(self, text: str) -> list[int]:
        unknown = sorted(set(text) - set(self.stoi))
        if unknown:
            raise ValueError(f"characters not in the vocabulary: {unknown!r}")
        return [self.stoi[c] for c in text]

    def decode(self, ids: Sequence[int] | Tensor) -> str:
        if isinstance(ids, Tensor):
            ids = ids.tolist()
        return "".join(self.itos[i] for i in ids)


def split_text(text: str) -> tuple[str, str]:
    """``(train, valid)``: the last ``VALID_FRACTION`` of the lines (whole lines) for validation."""
    lines = text.splitlines(keepends=True)
    cut = len(lines) - max(1, int(len(lines) * VALID_FRACTION))
    return "".join(lines[:cut]), "".join(lines[cut:])


def random_windows(data: Tensor, batch_size: int, length: int, generator: torch.Generator | None = None) -> Tensor:
    """``(B, length + 1)`` windows of ``data (N,)`` at random offsets: input ``[:, :-1]``, targets ``[:, 1:]``."""
    starts = torch.randint(0, data.numel() - length - 1, (batch_size,), generator=generator)  # (B,)
    return data[starts[:, None] + torch.arange(length + 1)]  # (B, length + 1)


def language_model_loss(logits: Tensor, tokens: Tensor) -> Tensor:
    """Next-token cross-entropy (nats): position ``t`` of ``logits (B, L, V)`` predicts ``tokens[:, t + 1]``.

    ``tokens`` is either the model's input ``(B, L)``, whose last position has no target and
    is left out (the mean is over ``B * (L - 1)`` predictions), or a window ``(B, L + 1)`` of
    which the model read the first ``L`` (``logits = model(window[:, :-1])``, as
    :func:`fit_gpt` trains): every position has its target, ``B * L`` predictions.
    """
    check_rank("logits", logits, 3, "(B, L, V)")
    check_rank("tokens", tokens, 2, "(B, L) or (B, L + 1)")
    B, L, V = logits.shape
    if tokens.size(0) != B or tokens.size(1) not in (L, L + 1):
        raise ValueError(f"tokens must be (B, L) = ({B}, {L}) (the model's input) or (B, L + 1) = ({B}, {L + 1}) "
                         f"(a window) for logits of shape {tuple(logits.shape)}, got {tuple(tokens.shape)}")
    if tokens.size(1) == L:
        logits = logits[:, :-1]  # (B, L - 1, V): the last position has no target
    return torch.nn.functional.cross_entropy(logits.reshape(-1, V), tokens[:, 1:].reshape(-1))


def lr_at(step: int, steps: int, lr: float, warmup: int) -> float:
    """Linear warm-up over ``warmup`` steps, then a cosine decay to 0 at ``steps`` (step from 1)."""
    if step <= warmup:
        return lr * step / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return lr * 0.5 * (1 + math.cos(math.pi * progress))


@torch.no_grad()
def evaluate_loss(model: torch.nn.Module, data: Tensor, batches: int = 8, batch_size: int = 32, seed: int = 1) -> float:
    """Mean next-token loss (nats per character) on ``batches`` fixed random windows of ``data``."""
    g = torch.Generator().manual_seed(seed)
    with eval_mode(model):
        losses = []
        for _ in range(batches):
            w = random_windows(data, batch_size, context_length(model), g)  # (B, L + 1)
            losses.append(float(language_model_loss(model(w[:, :-1]), w)))
        return sum(losses) / len(losses)


def fit_gpt(
    model: torch.nn.Module,
    train: Tensor,
    valid: Tensor | None = None,
    steps: int = 800,
    batch_size: int = 32,
    lr: float = 3e-3,
    warmup: int = 50,
    weight_decay: float = 0.01,
    clip_norm: float | None = 1.0,
    seed: int = 0,
    eval_every: int = 100,
    progress: bool = False,
    interruptible: bool = False,
    max_seconds: float | None = None,
) -> dict[str, Any]:
    """Train ``model`` on random windows of ``train (N,)`` (token ids) for ``steps`` steps.

    Returns ``{"train_loss": [...], "val_loss": [...], "eval_steps": [...], "train_seconds": s}``:
    the loss of every step, the validation loss every ``eval_every`` steps and at the end
    (when ``valid`` is given), and the time spent in training steps only. ``progress``: print
    the loss, the seconds per step and an estimate of the time left after the first
    :data:`FIRST_REPORT` steps and at every validation. ``interruptible``: a
    ``KeyboardInterrupt`` (Jupyter's Kernel -> Interrupt) ends training early instead of
    raising: the model keeps what it learned, a line says so, the validation loss is taken
    once more, and ``history["interrupted_at"]`` holds the last step done. ``max_seconds``: a
    time budget (wall clock, validations included). Every :data:`FIRST_REPORT` steps, at
    every validation and at the planned last step, the run is planned again at the pace so
    far: as many steps as fit in the budget, never more than ``steps`` (at least
    ``FIRST_REPORT + 1``), so a run cut short by a slow start grows back when the pace
    improves; the plan changes only by 10 % or more, and a line says so (a smaller change
    keeps the plan printed last, so the progress lines count to it), and the learning-rate
    schedule decays over the planned length;
    ``history["steps"]`` holds the steps planned last.
    """
    if max_seconds is not None and (isinstance(max_seconds, bool) or not isinstance(max_seconds, (int, float))):
        raise TypeError(f"max_seconds should be a number of seconds or None; got {type(max_seconds).__name__}")
    if max_seconds is not None and not max_seconds > 0:
        raise ValueError(f"max_seconds should be a positive number of seconds; got {max_seconds!r}")
    g = torch.Generator().manual_seed(seed)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}], lr=lr
    )
    history: dict[str, Any] = {"train_loss": [], "val_loss": [], "eval_steps": [], "train_seconds": 0.0,
                               "steps": steps}
    began, step, requested = time.perf_counter(), 0, steps
    try:
        while step < steps:
            step += 1
            start = time.perf_counter()
            model.train()
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step, steps, lr, warmup)
            windows = random_windows(train, batch_size, context_length(model), g)  # (B, L + 1)
            loss = language_model_loss(model(windows[:, :-1]), windows)  # windows (B, L + 1)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if clip_norm is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
            optimizer.step()
            history["train_seconds"] += time.perf_counter() - start
            history["train_loss"].append(loss.item())
            if max_seconds is not None and (step % FIRST_REPORT == 0 or step % eval_every == 0 or step == steps):
                steps = _fit_budget(history, step, steps, requested, time.perf_counter() - began, max_seconds)
            evaluate = valid is not None and (step % eval_every == 0 or step == steps)
            if evaluate:
                history["val_loss"].append(evaluate_loss(model, valid))
                history["eval_steps"].append(step)
            if progress and (evaluate or step == min(FIRST_REPORT, steps)):
                _report(history, step, steps)
    except KeyboardInterrupt:
        if not interruptible:
            raise
        done = len(history["train_loss"])  # steps whose update is complete
        history["interrupted_at"] = done
        print(f"training interrupted at step {done} of {steps}: the model keeps what it learned in those steps",
              flush=True)
        if valid is not None and history["eval_steps"][-1:] != [done]:
            history["val_loss"].append(evaluate_loss(model, valid))
            history["eval_steps"].append(done)
    model.eval()
    return history


FIRST_REPORT = 20  # fit_gpt's first progress line: enough steps for a fair time per step


def _fit_budget(history: dict[str, Any], step: int, steps: int, requested: int, elapsed: float,
                max_seconds: float) -> int:
    """The steps :func:`fit_gpt` plans after ``step`` steps in ``elapsed`` seconds, ``steps``
    planned so far: as many as fit in ``max_seconds`` at this pace, at most ``requested``, when
    that changes the plan by 10 % or more (a line says so); else ``steps``, the plan printed."""
    fit = min(requested, max(step, FIRST_REPORT + 1, int(max_seconds / (elapsed / step))))
    if abs(fit - steps) >= 0.1 * steps:
        if fit == requested:
            print(f"at {elapsed / step:.2f} s per step, all {requested} steps fit in {max_seconds:g} s again: "
                  f"training {fit} steps", flush=True)
        else:
            print(f"at {elapsed / step:.2f} s per step, {requested} steps would take about "
                  f"{requested * elapsed / step / 60:.0f} min: training {fit} steps instead, to stay within "
                  f"{max_seconds:g} s (fewer steps: a higher loss)", flush=True)
    else:  # a change under 10 %: the announced plan stands (its printed length is the one trained)
        return steps
    history["steps"] = fit
    return fit


def _report(history: dict[str, Any], step: int, steps: int) -> None:
    """One progress line of :func:`fit_gpt`: losses, seconds per step, time left at that pace."""
    per_step = history["train_seconds"] / step
    validation = f", validation loss {history['val_loss'][-1]:.3f}" if history["eval_steps"][-1:] == [step] else ""
    left = per_step * (steps - step)
    time_left = ("done" if step == steps else f"about {left:.0f} s left" if left < 120
                 else f"about {left / 60:.0f} min left")
    print(f"step {step:>5} of {steps}: train loss {history['train_loss'][-1]:.3f}{validation}, "
          f"{per_step:.2f} s per step, {time_left}", flush=True)


def prepare_data(text: str | None = None) -> tuple[CharTokenizer, Tensor, Tensor]:
    """``(tokenizer, train ids (N,), valid ids (M,))`` for tiny Shakespeare (or ``text``)."""
    text = load_shakespeare() if text is None else text
    tokenizer = CharTokenizer(text)
    train, valid = split_text(text)
    return tokenizer, torch.tensor(tokenizer.encode(train)), torch.tensor(tokenizer.encode(valid))


def train_recipe(recipe: dict[str, dict[str, Any]] | None = None, threads: int | None = None,
                 progress: bool = False) -> tuple[GPT, CharTokenizer, dict[str, Any]]:
    """Train ``recipe`` (default :data:`GPT_RECIPE`) from its seed: ``(model, tokenizer, history)``."""
    recipe = GPT_RECIPE if recipe is None else recipe
    if threads is not None:
        torch.set_num_threads(threads)
    tokenizer, train, valid = prepare_data()
    torch.manual_seed(recipe["fit"]["seed"])
    model = GPT(len(tokenizer), **recipe["model"])
    history = fit_gpt(model, train, valid, progress=progress, **recipe["fit"])
    return model, tokenizer, history


# ---------------------------------------------------------------- the shipped checkpoint
def save_checkpoint(model: GPT, tokenizer: CharTokenizer, history: dict[str, Any], meta: dict[str, Any],
                    path: str | Path = CHECKPOINT) -> Path:
    """Weights in float16 (half the size; float32 again on loading), without the tied copy."""
    state = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}
    config = {"vocab_size": vocabulary_size(model), **GPT_RECIPE["model"]}
    return write_checkpoint(path, FORMAT, config, state, tokenizer, history, meta)


def write_checkpoint(path: str | Path, format: int, config: dict[str, Any], state_dict: dict[str, Any],
                     tokenizer: CharTokenizer, history: dict[str, Any], meta: dict[str, Any]) -> Path:
    """A shipped Shakespeare checkpoint (notebooks 09 and 10): the weights in float16, the model's
    config, the characters, the training history and the run's record."""
    torch.save({"format": format, "config": config, "state_dict": {k: v.half() for k, v in state_dict.items()},
                "itos": tokenizer.itos, "history": history, "meta": meta}, path)
    return Path(path)


def read_checkpoint(path: str | Path, format: int, module: str) -> tuple[dict[str, Any], CharTokenizer]:
    """``(the checkpoint's dict, tiny Shakespeare's tokenizer)`` of a file :func:`write_checkpoint`
    wrote; ``module`` is the one whose ``--write`` retrains it (named in the errors)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}; write it with `python -m {module} --write`")
    state = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(state, dict) or state.get("format") != format:
        raise ValueError(f"{path} is not a format-{format} checkpoint of {module}")
    tokenizer = CharTokenizer(load_shakespeare())
    if tokenizer.itos != list(state["itos"]):
        raise ValueError("the checkpoint's characters differ from tiny Shakespeare's: retrain it")
    return state, tokenizer


def _read(path: str | Path | None = None) -> tuple[dict[str, Any], CharTokenizer]:
    return read_checkpoint(CHECKPOINT if path is None else path, FORMAT, "course_utils.gpt_training")


def load_pretrained_gpt(path: str | Path | None = None) -> tuple[GPT, CharTokenizer, dict[str, Any]]:
    """``(model in eval mode, tokenizer, history)`` of the shipped Shakespeare model."""
    state, tokenizer = _read(path)
    model = GPT(**state["config"])
    weights = {k: v.float() for k, v in state["state_dict"].items()}
    weights["lm_head.weight"] = weights["token_embedding.weight"]
    model.load_state_dict(weights)
    return model.eval(), tokenizer, dict(state["history"])


def pretrained_gpt_info(path: str | Path | None = None) -> dict[str, Any]:
    """The checkpoint's config and record (recipe, threads, torch, steps, seconds, final loss)."""
    return checkpoint_info(CHECKPOINT if path is None else path, FORMAT, "course_utils.gpt_training")


def checkpoint_info(path: str | Path, format: int, module: str) -> dict[str, Any]:
    """A shipped checkpoint's config and the record :func:`write_and_report` wrote with it."""
    state, _ = read_checkpoint(path, format, module)
    return {"config": dict(state["config"]), **dict(state["meta"])}


def write_and_report(
    argv: Sequence[str] | None,
    description: str,
    recipe_name: str,
    recipe: dict[str, Any],
    checkpoint: Path,
    train: Callable[[argparse.Namespace], tuple[torch.nn.Module, CharTokenizer, dict[str, Any]]],
    save: Callable[[torch.nn.Module, CharTokenizer, dict[str, Any], dict[str, Any]], Path],
    time_budget: bool = False,
) -> int:
    """The ``main`` of a module that ships a checkpoint (``python -m course_utils.gpt_training
    --write``, ``... llama_training --write``): ``--threads`` (1), ``--max-seconds`` where
    ``time_budget``; ``train(args)`` runs the recipe, ``save`` writes the model with its record
    (recipe, threads, torch, steps, seconds, final validation loss), which is printed. Without
    ``--write``: the help."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--write", action="store_true", help=f"train {recipe_name} and write {checkpoint.name}")
    parser.add_argument("--threads", type=int, default=1)
    if time_budget:
        parser.add_argument("--max-seconds", type=float, default=None, help="a time budget (fewer steps if needed)")
    args = parser.parse_args(argv)
    if not args.write:
        parser.print_help()
        return 0
    start = time.perf_counter()
    model, tokenizer, history = train(args)
    meta = {"recipe": recipe, "threads": args.threads, "torch": str(torch.__version__), "steps": history["steps"],
            "train_seconds": round(history["train_seconds"], 1), "wall_seconds": round(time.perf_counter() - start, 1),
            "final_val_loss": round(history["val_loss"][-1], 4)}
    path = save(model, tokenizer, history, meta)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB): {meta}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return write_and_report(argv, "train and save notebook 09's Shakespeare model", "GPT_RECIPE", GPT_RECIPE,
                            CHECKPOINT, lambda args: train_recipe(threads=args.threads, progress=True),
                            save_checkpoint)


if __name__ == "__main__":
    sys.exit(main())
