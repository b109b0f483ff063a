"""Notebook 09's language model on BPE tokens against characters (notebook 11, section 6).

The same ``GPT`` (``FAST_RECIPE``'s model: 4 blocks of width 128, a context of 64 tokens) and the
same training (``FAST_RECIPE``'s optimiser and schedule, ``--steps`` steps of 32 windows) on tiny
Shakespeare's training split, once with notebook 09's characters (65 ids) and once with a
byte-level BPE trained on the same split (``course_utils.tokenizer.train_bpe``, ``--vocab``
tokens). A step costs about the same in both (the same number of windows of 64 positions; the
BPE model's output layer is larger), so equal steps are about equal time: the script prints the
CPU time per step of each run to show how equal.

A BPE token holds several characters, so its loss per token is not comparable with a
character's. Both are turned into **nats per character** of the validation text:
``loss per token * tokens / characters`` (the validation split encoded whole; for characters the
factor is 1). The loss per token is ``evaluate_loss``'s (8 fixed batches of validation windows).
A window of 64 BPE tokens also sees more text than 64 characters: the script prints how much.

    python benchmarks/bpe_vs_chars.py                       # seeds 0 1 2, 300 steps, vocab 1024
    python benchmarks/bpe_vs_chars.py --seeds 0 --steps 100

Measured 2026-11-28 (``nice -n 10 .venv/bin/python benchmarks/bpe_vs_chars.py --steps 200``), one
thread, on the shared 2-core AMD EPYC VM (load average about 8-10: the wall seconds, 127-210 s a
run, say little; the CPU time per step is the steadier figure). 768 merges trained on the
training split (1,016,242 characters) in 3.4 s; the validation split is 99,152 characters,
43,719 BPE tokens: 2.27 characters per token, a window of 64 tokens about 145 characters.

====== =======  ============  ============  ===========
seed   tokens   nats/token    nats/char     CPU ms/step
====== =======  ============  ============  ===========
0      chars    2.320         2.320         205
0      bpe      4.489         1.979         229
1      chars    2.309         2.309         206
1      bpe      4.487         1.978         229
2      chars    2.320         2.320         205
2      bpe      4.522         1.994         229
====== =======  ============  ============  ===========

Mean over the seeds: characters 2.316 nats/char (range 2.309-2.320), BPE 1.984 (1.978-1.994):
0.33 lower after the same 200 steps, at 12 % more CPU per step. Notebook 11 quotes this table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import cpu_model, load_average  # noqa: E402

from course_utils.gpt import GPT  # noqa: E402
from course_utils.gpt_training import FAST_RECIPE, CharTokenizer, evaluate_loss, fit_gpt, split_text  # noqa: E402
from course_utils.stories import load_shakespeare  # noqa: E402
from course_utils.tokenizer import BPETokenizer, train_bpe  # noqa: E402


def run(kind: str, train_ids: torch.Tensor, valid_ids: torch.Tensor, vocab_size: int, per_char: float, seed: int,
        steps: int) -> dict[str, float]:
    torch.manual_seed(seed)
    model = GPT(vocab_size, **FAST_RECIPE["model"])
    fit = dict(FAST_RECIPE["fit"], steps=steps, seed=seed, eval_every=steps)
    cpu = time.process_time()
    history = fit_gpt(model, train_ids, **fit)
    cpu = time.process_time() - cpu
    loss = evaluate_loss(model, valid_ids)
    return {"kind": kind, "seed": seed, "loss_token": loss, "loss_char": loss * per_char,
            "cpu_ms_step": 1000 * cpu / steps, "wall_s": history["train_seconds"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--vocab", type=int, default=1024, help="BPE vocabulary size (256 bytes + merges)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--chars", type=int, default=None, help="only the text's first CHARS characters (a smoke test)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    text = load_shakespeare()[:args.chars]
    train_text, valid_text = split_text(text)
    chars = CharTokenizer(text)
    start = time.perf_counter()
    vocab, merges = train_bpe(train_text, args.vocab)
    print(f"BPE: {len(merges)} merges trained on {len(train_text):,} characters in {time.perf_counter() - start:.1f} s")
    bpe = BPETokenizer(vocab, merges)
    data = {
        "chars": (torch.tensor(chars.encode(train_text)), torch.tensor(chars.encode(valid_text)), len(chars)),
        "bpe": (torch.tensor(bpe.encode(train_text)), torch.tensor(bpe.encode(valid_text)), len(vocab)),
    }
    per_char = {kind: len(valid) / len(valid_text) for kind, (_, valid, _) in data.items()}
    print(f"validation text: {len(valid_text):,} characters, {len(data['bpe'][1]):,} BPE tokens "
          f"({1 / per_char['bpe']:.2f} characters per token): a window of 64 tokens reads about "
          f"{64 / per_char['bpe']:.0f} characters")

    rows = []
    for seed in args.seeds:
        for kind, (train_ids, valid_ids, size) in data.items():
            row = run(kind, train_ids, valid_ids, size, per_char[kind], seed, args.steps)
            rows.append(row)
            print(f"{kind:>5} seed {seed}: loss {row['loss_token']:.3f} nats/token = {row['loss_char']:.3f} nats/char, "
                  f"{row['cpu_ms_step']:.0f} ms CPU per step, {row['wall_s']:.0f} s wall", flush=True)
    for kind in data:
        got = [r for r in rows if r["kind"] == kind]
        losses = [r["loss_char"] for r in got]
        print(f"{kind:>5}: nats/char mean {statistics.mean(losses):.3f} (range {min(losses):.3f}-{max(losses):.3f}), "
              f"CPU ms/step mean {statistics.mean(r['cpu_ms_step'] for r in got):.0f}")
    print(f"machine: {cpu_model()}, load average {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
