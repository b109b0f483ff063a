"""Training notebook 10's Llama-style model on tiny Shakespeare, and its shipped checkpoint.

The data, the loop and the loss are notebook 09's (:mod:`course_utils.gpt_training`: the
character tokenizer, the held-out last 10 % of the lines, :func:`~course_utils.gpt_training.fit_gpt`
and :func:`~course_utils.gpt_training.evaluate_loss`), so the two models are compared on the same
footing. :data:`LLAMA_RECIPE` is notebook 09's ``FAST_RECIPE`` with the modern block (width 128,
4 heads, here 2 key/value heads, 4 blocks, a context of 64 characters, 900 steps); the notebook
trains it with ``TRAIN = True`` within a time budget, and :func:`load_pretrained_llama` loads its
full run, ``course_utils/pretrained/shakespeare_llama.pt`` (``python -m course_utils.llama_training
--write`` retrains it).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from .gpt_training import (
    CharTokenizer,
    checkpoint_info,
    fit_gpt,
    prepare_data,
    read_checkpoint,
    write_and_report,
    write_checkpoint,
)
from .llama import Llama

CHECKPOINT = Path(__file__).resolve().parent / "pretrained" / "shakespeare_llama.pt"
FORMAT = 1

# notebook 09's FAST_RECIPE with the modern block: d_ff = swiglu_hidden_width(128, multiple_of=32) = 352
# (three matrices of 128 x 352 hold about the parameters of notebook 09's two of 128 x 512), 2 key/value
# heads for the 4 query heads. The shipped checkpoint is this recipe's full run; TRAIN = True in the
# notebook trains the same recipe within a time budget (fewer steps when they would not fit).
LLAMA_RECIPE: dict[str, dict[str, Any]] = {
    "model": dict(d_model=128, num_heads=4, n_kv_heads=2, num_layers=4, d_ff=352, max_len=64),
    "fit": dict(steps=900, batch_size=32, lr=3e-3, warmup=50, weight_decay=0.1, clip_norm=1.0, seed=0,
                eval_every=150),
}


def train_llama(recipe: dict[str, dict[str, Any]] | None = None, threads: int | None = None,
                max_seconds: float | None = None,
                progress: bool = False) -> tuple[Llama, CharTokenizer, dict[str, Any]]:
    """Train ``recipe`` (default :data:`LLAMA_RECIPE`) from its seed: ``(model, tokenizer, history)``."""
    recipe = LLAMA_RECIPE if recipe is None else recipe
    if threads is not None:
        torch.set_num_threads(threads)
    tokenizer, train, valid = prepare_data()
    torch.manual_seed(recipe["fit"]["seed"])
    model = Llama(len(tokenizer), **recipe["model"])
    history = fit_gpt(model, train, valid, progress=progress, max_seconds=max_seconds, **recipe["fit"])
    return model, tokenizer, history


def save_llama(model: Llama, tokenizer: CharTokenizer, history: dict[str, Any], meta: dict[str, Any],
               path: str | Path = CHECKPOINT) -> Path:
    """Weights in float16 (float32 again on loading), with the config, the characters and the record."""
    config = {"vocab_size": model.vocab_size, **LLAMA_RECIPE["model"]}
    return write_checkpoint(path, FORMAT, config, model.state_dict(), tokenizer, history, meta)


def _read(path: str | Path | None = None) -> tuple[dict[str, Any], CharTokenizer]:
    return read_checkpoint(CHECKPOINT if path is None else path, FORMAT, "course_utils.llama_training")


def load_pretrained_llama(path: str | Path | None = None, **parts: Any) -> tuple[Llama, CharTokenizer, dict[str, Any]]:
    """``(model in eval mode, tokenizer, history)`` of the shipped Shakespeare Llama.

    ``parts`` (``block``, ``norm``, ``rotary_tables``, ``apply_rotary``: see :class:`Llama`) build
    the model from other pieces, a notebook's own; the weights load by the contract's names, so
    their parameters must carry them (a part's own buffers, a stored ``eps`` say, keep their
    values). A ``ValueError`` names the weights that do not fit.
    """
    state, tokenizer = _read(path)
    model = Llama(**state["config"], **parts)
    missing, unexpected = model.load_state_dict({k: v.float() for k, v in state["state_dict"].items()}, strict=False)
    buffers = {name for name, _ in model.named_buffers()}
    missing = [name for name in missing if name not in buffers]
    if missing or unexpected:
        raise ValueError(f"the shipped weights do not fit this model: it lacks {missing[:4]} and has no place for "
                         f"{unexpected[:4]}. Its parameters must have the exercises' names (blocks.0.norm1.weight, "
                         "blocks.0.self_attn.w_q.weight, blocks.0.feed_forward.w1.weight, ...)")
    return model.eval(), tokenizer, dict(state["history"])


def pretrained_llama_info(path: str | Path | None = None) -> dict[str, Any]:
    """The checkpoint's config and record (recipe, threads, torch, steps, seconds, final loss)."""
    return checkpoint_info(CHECKPOINT if path is None else path, FORMAT, "course_utils.llama_training")


def main(argv: Sequence[str] | None = None) -> int:
    return write_and_report(
        argv, "train and save notebook 10's Shakespeare Llama", "LLAMA_RECIPE", LLAMA_RECIPE, CHECKPOINT,
        lambda args: train_llama(threads=args.threads, max_seconds=args.max_seconds, progress=True), save_llama,
        time_budget=True)


if __name__ == "__main__":
    sys.exit(main())
