"""Measure notebook 09's training run (course_utils.gpt_training.GPT_RECIPE).

Trains the fables language model from its seed and prints, per thread count: training wall
seconds (steps only: the validation passes excluded), CPU milliseconds per step (all threads
of the process: on a machine shared with other jobs the wall time grows much more than the
CPU time), the final training and validation loss (nats per character), the share of real
words in a greedy and a T = 0.8 sample, and a sample; then the machine (benchmarks/machine.py).

    python benchmarks/gpt_train.py                 # the recipe on 2 threads
    python benchmarks/gpt_train.py --threads 1 2   # both
    python benchmarks/gpt_train.py --set steps=400 d_model=48

Goal (issue 15): a loss and samples good enough to read as the fables' style within 90 s of
training on 2 threads. The README's "Speed" section has the latest numbers.

Measured (torch 2.13 CPU, this project's 2-core AMD EPYC VM, shared with other jobs)
------------------------------------------------------------------------------------
``GPT_RECIPE`` (d_model 64, 4 heads, 3 blocks, d_ff 256, context 64, batch 32, AdamW 3e-3 with
50 warm-up steps and a cosine decay, 800 steps): 1 thread 74.3 s of training, 95 ms CPU per step
(load average 3.0 before); 2 threads 107.0 s (load 2.4: the other core was busy, and torch's two
threads wait for each other). Both: train loss 0.224, validation loss 0.229 nats per character,
98 % real words greedy, 96 % at T = 0.8. At load 5, 100 steps took 8.8 s on 1 thread and 77.6 s
on 2. A first recipe (d_model 96, context 96, 600 steps) cost about 2.7x the CPU per step and was
dropped.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import load_average, machine_table  # noqa: E402

from course_utils.gpt import GPT, generate  # noqa: E402
from course_utils.gpt_training import GPT_RECIPE, fit_gpt, prepare_data  # noqa: E402
from course_utils.stories import load_text  # noqa: E402


def _parse_settings(pairs: list[str]) -> tuple[dict, dict]:
    model, fit = dict(GPT_RECIPE["model"]), dict(GPT_RECIPE["fit"])
    for pair in pairs:
        key, _, value = pair.partition("=")
        target = model if key in model else fit if key in fit else None
        if target is None:
            raise SystemExit(f"unknown setting {key!r}; known: {sorted(model) + sorted(fit)}")
        target[key] = type(target[key])(float(value)) if isinstance(target[key], (int, float)) else value
    return model, fit


def real_word_share(text: str, known: set[str]) -> float:
    words = re.findall(r"[a-z]+", text.lower())
    return sum(w in known for w in words) / max(1, len(words))


def run(threads: int, model_cfg: dict, fit_cfg: dict) -> tuple[list[str], str]:
    torch.set_num_threads(threads)
    tokenizer, train, valid = prepare_data()
    torch.manual_seed(fit_cfg["seed"])
    model = GPT(len(tokenizer), **model_cfg)
    cpu = time.process_time()
    history = fit_gpt(model, train, valid, eval_every=fit_cfg["steps"], **fit_cfg)
    cpu_ms = (time.process_time() - cpu) / fit_cfg["steps"] * 1000  # includes the one validation pass
    known = set(re.findall(r"[a-z]+", load_text().lower()))
    prompt = torch.tensor([tokenizer.encode("Once upon a time")] * 4)  # (4, L0)
    greedy = generate(model, prompt[:1], 200, temperature=0)
    sampled = generate(model, prompt, 200, temperature=0.8, generator=torch.Generator().manual_seed(0))
    greedy_share = real_word_share(tokenizer.decode(greedy[0]), known)
    sampled_share = sum(real_word_share(tokenizer.decode(row), known) for row in sampled) / len(sampled)
    row = [str(threads), str(fit_cfg["steps"]), f"{history['train_seconds']:.1f}", f"{cpu_ms:.0f}",
           f"{sum(history['train_loss'][-20:]) / 20:.3f}", f"{history['val_loss'][-1]:.3f}",
           f"{greedy_share:.0%}", f"{sampled_share:.0%}"]
    return row, tokenizer.decode(sampled[0])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[2])
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="override GPT_RECIPE entries")
    args = parser.parse_args(argv)
    model_cfg, fit_cfg = _parse_settings(args.set)
    load_before = load_average()
    print("model:", ", ".join(f"{k}={v}" for k, v in model_cfg.items()))
    print("fit:", ", ".join(f"{k}={v}" for k, v in fit_cfg.items()))
    print("| threads | steps | train s | CPU ms/step | train loss (last 20) | val loss | real words greedy | "
          "real words T=0.8 |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    samples = []
    for threads in args.threads:
        row, sample = run(threads, model_cfg, fit_cfg)
        print("| " + " | ".join(row) + " |", flush=True)
        samples.append(sample)
    print(f"\nsample (T = 0.8, seed 0, {args.threads[-1]} threads):\n{samples[-1]}\n")
    print(machine_table(args.threads, load_before, load_average()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
