"""One training step: notebook 09's ``GPT`` against the same model built from torch's fused parts.

Three models of the same size, by default notebook 09's (``GPT_RECIPE["model"]`` of
``course_utils.gpt_training``; flags change any of it), with the same parameters (asserted):

* **course**: ``course_utils.GPT`` (``GPTBlock``: the course's ``MultiHeadAttention``,
  ``LayerNorm``, ``FeedForward`` with the tanh-GELU, a causal mask built in every block);
* **torch layer**: the same embeddings, final norm and tied output layer around
  ``nn.TransformerEncoder`` of ``nn.TransformerEncoderLayer(norm_first=True,
  activation=tanh-GELU, batch_first=True)``, run with ``mask=<causal>, is_causal=True`` (its
  attention then goes through ``F.scaled_dot_product_attention`` with the causal flag);
* **nanoGPT**: nanoGPT's block (one fused ``c_attn`` ``D -> 3D`` linear,
  ``F.scaled_dot_product_attention(q, k, v, is_causal=True)``, ``nn.LayerNorm``,
  ``nn.GELU(approximate="tanh")``).

A step is what ``course_utils.gpt_training.fit_gpt`` does: forward on one batch of random
windows of the training text (``random_windows``, the recipe's batch size and context),
next-token cross-entropy, ``zero_grad``, backward, gradient clipping to norm 1, and AdamW
(decay on the matrices only, as ``fit_gpt``). Every model trains on the same batch in the
same process; after a warm-up the steps are timed in rounds, the order inside a round
rotating, and the table gives each model's median and the ratios of the medians (the
issue's target: course / torch <= 1.1). On a shared, loaded machine only ratios measured
in one run, interleaved like this, are worth comparing.

    .venv/bin/python benchmarks/gpt_step_speed.py                 # 1 and 2 threads
    .venv/bin/python benchmarks/gpt_step_speed.py --steps 100     # the README's table
    .venv/bin/python benchmarks/gpt_step_speed.py --profile       # where the time goes

Measured (torch 2.13 CPU, this project's 2-core AMD EPYC VM, load average 10-12 from other jobs)
-------------------------------------------------------------------------------------------------
``--steps 40``, ratio of the medians of the CPU time per step (wall time in brackets): 1 thread,
course / torch layer 1.03 (1.03), course / nanoGPT 1.14 (1.14): 61.3, 59.6 and 53.9 ms of CPU;
2 threads 1.53 (1.56) and 1.27 (1.21), where each thread spends most of its time waiting for the
other on the busy machine (673 ms of CPU per course step against 61 on one thread). Before
``course_utils.fastpaths``' path 4 (the fused causal attention) the course / torch layer ratio
on 1 thread was 1.24 (a short run) and 1.15. A second run (``--steps 30 --threads 2 1``, load
average 5.5-8): 1 thread 1.04 (1.06) and 1.15 (1.13); 2 threads 0.85 (0.95) and 1.25 (1.26): on
this machine two threads give no stable figure. The README's "Speed" section has the table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository's course_utils
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import add_timing_arguments, load_average, machine_table, profile_steps  # noqa: E402

from course_utils import count_parameters  # noqa: E402
from course_utils.gpt import GPT, init_gpt2_weights  # noqa: E402
from course_utils.gpt_training import GPT_RECIPE, prepare_data, random_windows  # noqa: E402


def tanh_gelu(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="tanh")


class _Wrapping(nn.Module):
    """The course GPT's embeddings, final norm and tied output layer around ``self.blocks``."""

    def __init__(self, V: int, D: int, dropout: float, max_len: int):
        super().__init__()
        self.max_len = max_len
        self.token_embedding = nn.Embedding(V, D)
        self.position_embedding = nn.Embedding(max_len, D)
        self.dropout = nn.Dropout(dropout)
        self.norm = nn.LayerNorm(D)
        self.lm_head = nn.Linear(D, V, bias=False)

    def _init_and_tie(self) -> None:
        init_gpt2_weights(self)  # as course_utils.GPT
        self.lm_head.weight = self.token_embedding.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        L = tokens.size(1)
        x = self.dropout(self.token_embedding(tokens) + self.position_embedding(torch.arange(L)))  # (B, L, D)
        return self.lm_head(self.norm(self.run_blocks(x)))  # (B, L, V)


class TorchLayerGPT(_Wrapping):
    """``nn.TransformerEncoder`` of pre-norm ``nn.TransformerEncoderLayer`` with a causal mask."""

    def __init__(self, V, d_model, num_heads, num_layers, d_ff, dropout, max_len):
        super().__init__(V, d_model, dropout, max_len)
        layer = nn.TransformerEncoderLayer(d_model, num_heads, d_ff, dropout, activation=tanh_gelu,
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)
        self._init_and_tie()

    def run_blocks(self, x):
        L = x.size(1)
        blocked = torch.ones(L, L, dtype=torch.bool).triu(1)  # (L, L): torch's polarity, True = future
        return self.blocks(x, mask=blocked, is_causal=True)  # (B, L, D)


class NanoBlock(nn.Module):
    """nanoGPT's block: fused ``c_attn``, ``scaled_dot_product_attention(is_causal=True)``."""

    def __init__(self, D, H, d_ff, dropout):
        super().__init__()
        self.H, self.dropout = H, dropout
        self.ln_1, self.ln_2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.c_attn, self.c_proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.mlp = nn.Sequential(nn.Linear(D, d_ff), nn.GELU(approximate="tanh"), nn.Linear(d_ff, D), nn.Dropout(dropout))  # noqa: E501
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x):
        B, L, D = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(D, dim=2)  # (B, L, D) each
        q, k, v = (t.view(B, L, self.H, D // self.H).transpose(1, 2) for t in (q, k, v))  # (B, H, L, d_k)
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True)
        x = x + self.resid_dropout(self.c_proj(y.transpose(1, 2).reshape(B, L, D)))
        return x + self.mlp(self.ln_2(x))  # (B, L, D)


class NanoGPT(_Wrapping):
    def __init__(self, V, d_model, num_heads, num_layers, d_ff, dropout, max_len):
        super().__init__(V, d_model, dropout, max_len)
        self.blocks = nn.ModuleList(NanoBlock(d_model, num_heads, d_ff, dropout) for _ in range(num_layers))
        self._init_and_tie()

    def run_blocks(self, x):
        for block in self.blocks:
            x = block(x)
        return x


MODELS = {"course": GPT, "torch layer": TorchLayerGPT, "nanoGPT": NanoGPT}


def build(args):
    tokenizer, train, _ = prepare_data()
    V = len(tokenizer)  # the training text's characters
    config = dict(d_model=args.d_model, num_heads=args.heads, num_layers=args.layers, d_ff=args.d_ff,
                  dropout=args.dropout, max_len=args.context)
    g = torch.Generator().manual_seed(args.seed)
    windows = random_windows(train, args.batch_size, args.context, g)  # (B, L + 1)
    inputs, targets = windows[:, :-1], windows[:, 1:].reshape(-1)  # (B, L), (B * L,)
    steps, sizes = {}, {}
    for name, cls in MODELS.items():
        torch.manual_seed(args.seed)
        model = cls(V, **config).train()
        sizes[name] = count_parameters(model)
        decay = [p for p in model.parameters() if p.dim() >= 2]
        no_decay = [p for p in model.parameters() if p.dim() < 2]
        optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                                       {"params": no_decay, "weight_decay": 0.0}], lr=1e-4)

        def step(model=model, optimizer=optimizer):
            logits = model(inputs)  # (B, L, V)
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()

        steps[name] = step
    if len(set(sizes.values())) != 1:
        raise AssertionError(f"different sizes: {sizes}")
    return steps, sizes["course"], V


def time_steps(steps: dict, warmup: int, count: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Wall and CPU seconds (``time.process_time``: every thread of this process) of each step."""
    for _ in range(warmup):
        for step in steps.values():
            step()
    names = list(steps)
    wall, cpu = {name: [] for name in steps}, {name: [] for name in steps}
    for i in range(count):
        for name in names[i % len(names):] + names[: i % len(names)]:  # rotate who goes first
            start, start_cpu = time.perf_counter(), time.process_time()
            steps[name]()
            cpu[name].append(time.process_time() - start_cpu)
            wall[name].append(time.perf_counter() - start)
    return wall, cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    model, fit = GPT_RECIPE["model"], GPT_RECIPE["fit"]  # defaults: notebook 09's model and batch
    parser.add_argument("--d-model", type=int, default=model["d_model"])
    parser.add_argument("--heads", type=int, default=model["num_heads"])
    parser.add_argument("--layers", type=int, default=model["num_layers"])
    parser.add_argument("--d-ff", type=int, default=model["d_ff"])
    parser.add_argument("--dropout", type=float, default=model["dropout"])
    parser.add_argument("--context", type=int, default=model["max_len"], help="L, the model's max_len")
    parser.add_argument("--batch-size", type=int, default=fit["batch_size"])
    add_timing_arguments(parser)
    args = parser.parse_args(argv)

    load_before = load_average()
    steps, n_params, V = build(args)
    rows = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        wall, cpu = time_steps(steps, args.warmup, args.steps)
        for kind, times in (("wall", wall), ("CPU", cpu)):
            rows.append((threads, kind, {name: statistics.median(t) for name, t in times.items()}))
    load_after = load_average()

    print(
        f"One training step (forward, cross-entropy, backward, clipping, AdamW), batch {args.batch_size} "
        f"windows of {args.context} characters (V = {V}); d_model {args.d_model}, {args.layers} blocks, "
        f"{args.heads} heads, d_ff {args.d_ff}, dropout {args.dropout}, {n_params:,} parameters each; "
        f"{args.steps} interleaved steps per model after {args.warmup} warm-up steps. Medians of the wall "
        "time and of the CPU time (all threads of the process; on a loaded machine the steadier of the two).\n"
    )
    print("| threads | median of | course (ms) | torch layer (ms) | nanoGPT (ms) | course / torch layer | course / nanoGPT |")  # noqa: E501
    print("|---:|---|---:|---:|---:|---:|---:|")
    for threads, kind, m in rows:
        print(f"| {threads} | {kind} | {m['course'] * 1e3:.1f} | {m['torch layer'] * 1e3:.1f} | {m['nanoGPT'] * 1e3:.1f} | "  # noqa: E501
              f"{m['course'] / m['torch layer']:.2f} | {m['course'] / m['nanoGPT']:.2f} |")
    print()
    print(machine_table(args.threads, load_before, load_after))
    if args.profile:
        torch.set_num_threads(args.threads[0])
        profile_steps(steps, count=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
