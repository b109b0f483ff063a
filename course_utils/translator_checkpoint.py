"""The pretrained numbers-to-words translator (backs notebook 07).

Notebook 07 trains a small :class:`~course_utils.Transformer` in a minute or two. A
student who skips that cell (``TRAIN = False``) loads this checkpoint instead, and every
later cell works the same::

    model, src_vocab, tgt_vocab = load_pretrained()
    predict(model, "1,234.5")   # course_utils.translator_training.predict
    # 'one thousand two hundred thirty four point five'

The file
--------
``course_utils/pretrained/numbers_translator.pt`` ships inside the package (package data:
a pip install, as in Colab, includes it). It is a ``torch.save`` of a plain dict, readable
with ``torch.load(..., weights_only=True)``:

* ``"format"``: 1;
* ``"config"``: the ``Transformer`` keyword arguments (vocabulary sizes and
  ``RECIPE["model"]``);
* ``"state_dict"``: the float32 weights;
* ``"vocab"``: the ``itos`` lists of both vocabularies (checked against
  :func:`~course_utils.data.source_vocab` and :func:`~course_utils.data.target_vocab` on
  loading);
* ``"history"``: the training history (for the curves of notebook 07 when it did not
  train), as ``History.state()`` writes it: the series, ``eval_steps``, ``steps``, the
  training seconds;
* ``"meta"``: how it was made: the ``RECIPE``, the seed, the thread count, the torch
  version, the training time, and the exact match measured on the test and unseen splits.

How it was made
---------------
Exactly as notebook 07's training cell does it: ``torch.manual_seed(RECIPE["fit"]["seed"])``,
``Transformer(len(src_vocab), len(tgt_vocab), **RECIPE["model"])``, then
``fit(model, load_split("train"), load_split("valid"), **RECIPE["fit"])``, with
``torch.set_num_threads(1)`` (the notebook's setting; the thread count changes the last
bits of every step, and so the exact weights). So on the machine that wrote it, the
notebook's trained model and this checkpoint have the same weights.

The shipped file: RECIPE of ``course_utils.translator_training`` (d_model 64, 4 heads, 2 + 2 layers,
2,000 steps of 64 pairs, peak lr 3e-3, seed 0), torch 2.13.0 on CPU (AMD EPYC, AVX2),
1 thread, 139 s of training; 239,333 parameters, about 1 MB. Greedy decoding: exact match 99.87 % on the test
split (4 mistakes out of 3,000) and 100 % on the unseen split (``meta`` holds the exact
values). To rewrite or verify::

    python -m course_utils.translator_checkpoint --write   # train (about 1.5 minutes) and save
    python -m course_utils.translator_checkpoint --check   # load, decode the test split, print the scores

``tests/test_pretrained.py`` checks that the file loads, is small, and still translates
(>= 99 % exact match on a slice of the test split).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import torch

from .data import Vocab, load_split, source_vocab, target_vocab
from .model import Transformer

CHECKPOINT = Path(__file__).resolve().parent / "pretrained" / "numbers_translator.pt"
FORMAT = 1
THREADS = 1  # the notebook's torch.set_num_threads


def _read(path: str | Path | None = None) -> dict[str, Any]:
    path = CHECKPOINT if path is None else Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"no pretrained checkpoint at {path}; write it with "
            "`python -m course_utils.translator_checkpoint --write`, "
            "or reinstall the course package (the file ships with it)"
        )
    state = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError(f"{path} is not a format-{FORMAT} numbers_translator checkpoint")
    return state


def load_pretrained(
    device: str | torch.device | None = None, path: str | Path | None = None
) -> tuple[Transformer, Vocab, Vocab]:
    """The trained translator, in eval mode, and its two vocabularies.

    Returns ``(model, src_vocab, tgt_vocab)``: a :class:`~course_utils.Transformer` with
    float32 weights on ``device`` (default: the CPU), the source (characters) and target
    (words) vocabularies of :mod:`course_utils.data`. Raises ``ValueError`` when the
    checkpoint's vocabularies differ from those of :mod:`course_utils.data` (a checkpoint
    from another version of the data).
    """
    state = _read(path)
    src_vocab, tgt_vocab = source_vocab(), target_vocab()
    for name, vocab in (("source", src_vocab), ("target", tgt_vocab)):
        if list(state["vocab"][name]) != vocab.itos:
            raise ValueError(
                f"the checkpoint's {name} vocabulary differs from course_utils.data's "
                f"({len(state['vocab'][name])} vs {len(vocab)} tokens): retrain it with "
                "`python -m course_utils.translator_checkpoint --write`"
            )
    model = Transformer(**state["config"])
    model.load_state_dict({k: v.float() for k, v in state["state_dict"].items()})
    model.eval()
    if device is not None:
        model.to(device)
    return model, src_vocab, tgt_vocab


def pretrained_info(path: str | Path | None = None) -> dict[str, Any]:
    """How the checkpoint was made: ``config`` and ``meta`` (recipe, seed, threads, torch
    version, training seconds, measured exact match)."""
    state = _read(path)
    return {"config": dict(state["config"]), **dict(state["meta"])}


def pretrained_history(path: str | Path | None = None):
    """The checkpoint's training history, as :func:`course_utils.translator_training.fit` returned it
    (a :class:`~course_utils.translator_training.History`: the series, ``eval_steps``, ``steps``)."""
    from .translator_training import History

    return History.from_state(_read(path)["history"])


def train_and_save(path: str | Path | None = None, progress: bool = True) -> dict[str, Any]:
    """Train with ``RECIPE`` exactly as notebook 07 does, measure, and save the checkpoint.

    Returns the ``meta`` dict written.
    """
    from .translator_training import RECIPE, evaluate, fit

    path = CHECKPOINT if path is None else Path(path)
    torch.set_num_threads(THREADS)
    src_vocab, tgt_vocab = source_vocab(), target_vocab()
    seed = RECIPE["fit"]["seed"]
    torch.manual_seed(seed)  # the initial weights, as in the notebook
    config = dict(src_vocab_size=len(src_vocab), tgt_vocab_size=len(tgt_vocab), **RECIPE["model"])
    model = Transformer(**config)
    start = time.perf_counter()
    history = fit(model, load_split("train"), load_split("valid"), progress=progress, **RECIPE["fit"])
    wall = time.perf_counter() - start
    test = evaluate(model, load_split("test"))
    unseen = evaluate(model, load_split("unseen"))
    meta = {
        "recipe": {k: dict(v) for k, v in RECIPE.items()},
        "seed": seed,
        "threads": THREADS,
        "torch_version": str(torch.__version__),  # a plain str: weights_only loading
        "fit_seconds": round(wall, 1),
        "train_seconds": round(history.train_seconds, 1),
        "test_exact_match": test["exact_match"],
        "test_token_accuracy": test["token_accuracy"],
        "unseen_exact_match": unseen["exact_match"],
        "unseen_token_accuracy": unseen["token_accuracy"],
    }
    state = {
        "format": FORMAT,
        "config": config,
        "state_dict": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()},
        "vocab": {"source": list(src_vocab.itos), "target": list(tgt_vocab.itos)},
        "history": history.state(),
        "meta": meta,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(state, path)
    return meta


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m course_utils.translator_checkpoint",
        description="Write or check notebook 07's pretrained numbers-to-words translator.",
    )
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", action="store_true", help="train with RECIPE (about 1.5 minutes) and save")
    group.add_argument("--check", action="store_true", help="load and measure the saved checkpoint")
    parser.add_argument("--path", type=Path, default=None, help=f"checkpoint file (default {CHECKPOINT})")
    args = parser.parse_args(argv)
    path = CHECKPOINT if args.path is None else args.path
    if args.write:
        meta = train_and_save(path)
        print(f"wrote {path} ({path.stat().st_size:,} bytes)")
        for key, value in meta.items():
            print(f"  {key}: {value}")
        return 0
    from .translator_training import evaluate

    torch.set_num_threads(THREADS)
    model, _, _ = load_pretrained(path=path)
    info = pretrained_info(path)
    print(f"{path} ({path.stat().st_size:,} bytes), trained with torch {info['torch_version']}, "
          f"{info['threads']} thread(s), {info['train_seconds']} s")
    for split in ("test", "unseen"):
        result = evaluate(model, load_split(split))
        print(f"  {split}: exact match {result['exact_match']:.4f} (saved {info[f'{split}_exact_match']:.4f}), "
              f"token accuracy {result['token_accuracy']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["CHECKPOINT", "load_pretrained", "pretrained_history", "pretrained_info", "train_and_save"]
