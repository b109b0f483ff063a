"""Notebook 10's side-by-side: GPT-2's block, then each of Llama's four changes alone, then all four.

Every variant is notebook 09's model size (width 128, 4 heads, 4 blocks, context 64, batch 32,
tiny Shakespeare, AdamW 3e-3 with 50 warm-up steps and a cosine decay over the steps that fit,
weight decay 0.1, clipping at 1) trained for the same budget of CPU time (``--budget`` CPU
seconds, 1 thread by default): each run first times 12 steps of its variant (after 3 warm-ups),
then trains the steps that fit the budget at that pace (the schedule decays over them). CPU time,
not wall time: on a machine shared with other jobs the wall time grows with their load, the CPU
time of a step much less. Per run it prints the parameters, the steps, the CPU milliseconds per
step and the validation loss (``evaluate_loss`` on 32 fixed batches of the held-out text); then
mean and range per variant.

Variants (each changes one thing of ``gpt2``; all use the same attention kernel, so speed
differences come from the change itself):

* ``gpt2``: LayerNorm, learned positions, GELU MLP (``d_ff`` 512), multi-head attention, biases;
* ``rmsnorm``: RMSNorm instead of LayerNorm;
* ``rope``: rotary positions instead of the learned table;
* ``swiglu``: SwiGLU (``d_ff`` 352 = ``swiglu_hidden_width(128, 32)``) instead of the GELU MLP;
* ``gqa``: 2 key/value heads for the 4 query heads;
* ``llama``: all four, no biases (``course_utils.llama.Llama`` with the output layer tied, as GPT-2's).

    python benchmarks/modern_ablation.py                              # 6 variants x seeds 0 1 2, 30 CPU s each
    python benchmarks/modern_ablation.py --budget 60 --parallel 3     # runs side by side (cores permitting)

Measured (torch 2.13 CPU, the course's 2-core AMD EPYC VM shared with other jobs, load average 8-10;
28 Nov 2026, ``nice -n 10 python benchmarks/modern_ablation.py --budget 30 --threads 1``, about 40 min
wall; the CPU time per step is what the load changes least):

| variant | parameters | steps (mean) | CPU ms/step (mean) | val loss mean | val loss min-max |
|---|---:|---:|---:|---:|---:|
| gpt2 | 809,856 | 146 | 202 | 2.389 | 2.381-2.398 |
| rmsnorm | 808,704 | 149 | 199 | 2.386 | 2.377-2.396 |
| rope | 801,664 | 144 | 212 | 2.140 | 2.129-2.156 |
| swiglu | 823,680 | 148 | 202 | 2.379 | 2.364-2.391 |
| gqa | 743,808 | 151 | 195 | 2.381 | 2.375-2.392 |
| llama | 746,752 | 153 | 195 | 2.075 | 2.067-2.090 |

Seeds 0, 1, 2 each. At this short budget (about 150 steps) RoPE alone is 0.25 nats better than GPT-2's
block, far outside the seed spread (about 0.02); RMSNorm, SwiGLU and GQA alone are within it; all four
together are best. Notebook 10 quotes this table and says what it does not show.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from course_utils.gpt import init_gpt2_weights  # noqa: E402
from course_utils.gpt_training import evaluate_loss, fit_gpt, prepare_data  # noqa: E402
from course_utils.layers import FeedForward, LayerNorm  # noqa: E402
from course_utils.llama import GroupedQueryAttention, Llama, RMSNorm, SwiGLU, rotary_tables, swiglu_hidden_width  # noqa: E402

VARIANTS = ("gpt2", "rmsnorm", "rope", "swiglu", "gqa", "llama")
SIZE = dict(d_model=128, num_heads=4, num_layers=4, max_len=64)
FIT = dict(steps=900, batch_size=32, lr=3e-3, warmup=50, weight_decay=0.1, clip_norm=1.0, eval_every=10**9)


class Block(nn.Module):
    """GPT-2's pre-norm block with one part swapped: ``x + attn(norm1(x))``, ``x + ff(norm2(x))``."""

    def __init__(self, D: int, H: int, norm: type, ff: nn.Module, n_kv_heads: int):
        super().__init__()
        self.norm1, self.norm2 = norm(D), norm(D)
        self.self_attn = GroupedQueryAttention(D, H, n_kv_heads, bias=True)
        self.feed_forward = ff

    def forward(self, x: Tensor, cos: Tensor | None, sin: Tensor | None) -> Tensor:
        x = x + self.self_attn(self.norm1(x), cos, sin)  # (B, L, D)
        return x + self.feed_forward(self.norm2(x))


class Variant(nn.Module):
    """Notebook 09's GPT with one of Llama's changes: ``forward(tokens (B, L)) -> logits (B, L, V)``."""

    def __init__(self, vocab_size: int, change: str, d_model: int, num_heads: int, num_layers: int, max_len: int):
        super().__init__()
        D, self.max_len = d_model, max_len
        norm = RMSNorm if change == "rmsnorm" else LayerNorm
        kv = num_heads // 2 if change == "gqa" else num_heads
        self.token_embedding = nn.Embedding(vocab_size, D)
        if change == "rope":
            cos, sin = rotary_tables(D // num_heads, max_len)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)
        else:
            self.position_embedding = nn.Embedding(max_len, D)
            self.rope_cos = self.rope_sin = None
        self.blocks = nn.ModuleList(
            Block(D, num_heads, norm, SwiGLU(D, swiglu_hidden_width(D, 32)) if change == "swiglu" else FeedForward(D, 4 * D, 0.0, "gelu_tanh"),  # noqa: E501
                  kv) for _ in range(num_layers))
        self.norm = norm(D)
        self.lm_head = nn.Linear(D, vocab_size, bias=False)
        init_gpt2_weights(self)
        self.lm_head.weight = self.token_embedding.weight  # tied, as GPT-2's

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.token_embedding(tokens)  # (B, L, D)
        if self.rope_cos is None:
            x = x + self.position_embedding(torch.arange(tokens.size(1)))
        for block in self.blocks:
            x = block(x, self.rope_cos, self.rope_sin)
        return self.lm_head(self.norm(x))  # (B, L, V)


def build(change: str, vocab_size: int, size: dict) -> nn.Module:
    if change == "llama":
        return Llama(vocab_size, n_kv_heads=size["num_heads"] // 2, multiple_of=32, tie_weights=True, **size)
    return Variant(vocab_size, change, **size)


def cpu_pace(change: str, vocab_size: int, size: dict, fit: dict, train: Tensor, probe: int = 12) -> float:
    """CPU seconds per training step of a fresh model of ``change``, over ``probe`` steps after 3 warm-ups."""
    torch.manual_seed(1234)
    model = build(change, vocab_size, size)
    fit_gpt(model, train, None, **dict(fit, steps=3))
    start = time.process_time()
    fit_gpt(model, train, None, **dict(fit, steps=probe))
    return (time.process_time() - start) / probe


_data = functools.lru_cache(maxsize=1)(prepare_data)  # the same text for every run of one process: encoded once


def run_one(change: str, seed: int, budget: float, threads: int, size: dict, fit: dict) -> dict:
    """Train ``change`` from ``seed`` for the steps that fit ``budget`` CPU seconds at its own pace."""
    torch.set_num_threads(threads)
    tokenizer, train, valid = _data()
    pace = cpu_pace(change, len(tokenizer), size, fit, train)
    steps = max(fit["warmup"] + 1, int(budget / pace))
    torch.manual_seed(seed)
    model = build(change, len(tokenizer), size)
    params = sum(p.numel() for p in model.parameters())
    cpu, wall = time.process_time(), time.perf_counter()
    fit_gpt(model, train, None, seed=seed, **dict(fit, steps=steps))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {"variant": change, "seed": seed, "params": params, "steps": steps, "ms_per_step": 1000 * cpu / steps,
            "cpu_s": cpu, "wall_s": wall, "val_loss": evaluate_loss(model, valid, batches=32)}


def _spawn(change: str, seed: int, args: argparse.Namespace) -> subprocess.Popen:
    cmd = [sys.executable, __file__, "--one", change, str(seed), "--budget", str(args.budget), "--threads",
           str(args.threads), "--set", *args.set]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)


def _settings(pairs: list[str]) -> tuple[dict, dict]:
    size, fit = dict(SIZE), dict(FIT)
    for pair in pairs:
        key, _, value = pair.partition("=")
        target = size if key in size else fit if key in fit else None
        if target is None:
            raise SystemExit(f"unknown setting {key!r}")
        target[key] = type(target[key])(float(value))
    return size, fit


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--budget", type=float, default=30.0, help="CPU seconds of training per run")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--parallel", type=int, default=1, help="runs at a time (separate processes)")
    parser.add_argument("--set", nargs="*", default=[], help="size/fit overrides, e.g. d_model=32 (tests)")
    parser.add_argument("--one", nargs=2, metavar=("VARIANT", "SEED"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    size, fit = _settings(args.set)
    if args.one:
        print(json.dumps(run_one(args.one[0], int(args.one[1]), args.budget, args.threads, size, fit)), flush=True)
        return 0
    jobs = [(v, s) for s in args.seeds for v in args.variants]  # seed by seed: load drift hits every variant
    results = []
    if args.parallel <= 1:
        results = [run_one(v, s, args.budget, args.threads, size, fit) for v, s in jobs]
    else:
        for i in range(0, len(jobs), args.parallel):
            procs = [_spawn(v, s, args) for v, s in jobs[i : i + args.parallel]]
            results += [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    print(f"budget {args.budget:g} CPU s per run, {args.threads} thread(s), {args.parallel} run(s) at a time, "
          f"torch {torch.__version__}")
    print("| variant | seed | parameters | steps | CPU ms/step | wall s | val loss |\n|---|---:|---:|---:|---:|---:|---:|")  # noqa: E501
    for r in results:
        print(f"| {r['variant']} | {r['seed']} | {r['params']:,} | {r['steps']} | {r['ms_per_step']:.0f} | "
              f"{r['wall_s']:.0f} | {r['val_loss']:.3f} |")
    print("\n| variant | parameters | steps (mean) | CPU ms/step (mean) | val loss mean | val loss min-max |\n"
          "|---|---:|---:|---:|---:|---:|")
    for v in args.variants:
        rs = [r for r in results if r["variant"] == v]
        losses = [r["val_loss"] for r in rs]
        print(f"| {v} | {rs[0]['params']:,} | {statistics.mean(r['steps'] for r in rs):.0f} | "
              f"{statistics.mean(r['ms_per_step'] for r in rs):.0f} | {statistics.mean(losses):.3f} | "
              f"{min(losses):.3f}-{max(losses):.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
