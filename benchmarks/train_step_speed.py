"""One training step: the course's Transformer vs one built on ``nn.Transformer`` (notebook 07).

Both models have the same size, by default notebook 07's (``RECIPE["model"]`` of
``course_utils.translator_training``: d_model 64, 2 encoder + 2 decoder layers, 4 heads, d_ff 256,
no dropout, post-norm; flags change any of these), and the same wrapping:
``course_utils.TokenEmbedding`` for source and target, ``course_utils.PositionalEncoding``
and an ``nn.Linear`` output layer. Only the encoder-decoder stack differs:
``course_utils.Encoder``/``Decoder`` (our ``MultiHeadAttention``, ``LayerNorm``,
``FeedForward``) against ``nn.TransformerEncoder``/``nn.TransformerDecoder``.
``nn.Transformer`` always adds a final norm to both stacks; the post-norm comparison
leaves them out (as the course's post-norm model does), so both have exactly the same
parameters (asserted).

A step is: forward on one batch of training pairs (64 by default, the recipe's batch
size; ``collate`` of the numbers-to-words training split), masked cross-entropy
(``ignore_index=<pad>``), ``zero_grad``, backward, and the recipe's Adam
(``course_utils.translator_training.make_optimizer``). The masks are built once, outside the timed
step (they come with the batch): ours from ``collate`` (``True`` = may attend), torch's
converted to its polarity (``True`` = blocked). Both models train on the same batch in
the same process; after a warm-up the steps are timed in pairs, the order inside a pair
alternating, and the table gives the medians and their ratio (the issue's target:
course / torch <= 1.1).

    .venv/bin/python benchmarks/train_step_speed.py                 # 1 and 2 threads
    .venv/bin/python benchmarks/train_step_speed.py --steps 200     # the README's table
    .venv/bin/python benchmarks/train_step_speed.py --profile       # where the time goes
    .venv/bin/python benchmarks/train_step_speed.py --swap-layernorm   # diagnosis
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

from machine import add_timing_arguments, load_average, machine_table, profile_steps  # noqa: E402  (benchmarks/machine.py)

from course_utils import PositionalEncoding, TokenEmbedding, Transformer, count_parameters  # noqa: E402
from course_utils.data import PAD_ID, NumberWordsDataset, collate, load_split, source_vocab, target_vocab  # noqa: E402
from course_utils.translator_training import RECIPE, make_optimizer  # noqa: E402


class TorchTransformer(nn.Module):
    """The course's wrapping (embeddings, positional encoding, output layer) around
    ``nn.TransformerEncoder``/``nn.TransformerDecoder``; masks in torch's polarity."""

    def __init__(self, V_src, V_tgt, d_model, num_heads, num_layers, d_ff, dropout, max_len, norm_first):
        super().__init__()
        self.src_embedding = TokenEmbedding(V_src, d_model)
        self.tgt_embedding = TokenEmbedding(V_tgt, d_model)
        self.positional_encoding = PositionalEncoding(d_model, max_len, dropout)
        enc_layer = nn.TransformerEncoderLayer(d_model, num_heads, d_ff, dropout, batch_first=True, norm_first=norm_first)  # noqa: E501
        dec_layer = nn.TransformerDecoderLayer(d_model, num_heads, d_ff, dropout, batch_first=True, norm_first=norm_first)  # noqa: E501
        # final norms only in pre-norm, as in course_utils (nn.Transformer would always add them)
        self.encoder = nn.TransformerEncoder(
            enc_layer, num_layers, norm=nn.LayerNorm(d_model) if norm_first else None, enable_nested_tensor=False
        )
        self.decoder = nn.TransformerDecoder(dec_layer, num_layers, norm=nn.LayerNorm(d_model) if norm_first else None)
        self.output_projection = nn.Linear(d_model, V_tgt)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def forward(self, src, tgt, src_pad, tgt_pad, causal_blocked):
        """``src_pad (B, L_src)``, ``tgt_pad (B, L_tgt)``: True = padding (ignored);
        ``causal_blocked (L_tgt, L_tgt)``: True = future (blocked)."""
        memory = self.encoder(self.positional_encoding(self.src_embedding(src)), src_key_padding_mask=src_pad)
        y = self.positional_encoding(self.tgt_embedding(tgt))  # (B, L_tgt, D)
        out = self.decoder(
            y, memory, tgt_mask=causal_blocked, tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=src_pad
        )  # (B, L_tgt, D)
        return self.output_projection(out)  # (B, L_tgt, V_tgt)


def swap_layernorm(model: nn.Module) -> int:
    """Diagnosis only: replace every course ``LayerNorm`` by ``nn.LayerNorm`` with the same
    weights (one fused kernel), to measure how much of a gap the layer norm makes.
    Returns the number replaced."""
    from course_utils import LayerNorm

    count = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, LayerNorm):
                replacement = nn.LayerNorm(child.d_model, eps=child.eps)
                replacement.load_state_dict(child.state_dict())
                setattr(parent, name, replacement)
                count += 1
    return count


def build(args):
    V_src, V_tgt = len(source_vocab()), len(target_vocab())
    config = dict(
        d_model=args.d_model, num_heads=args.heads, num_layers=args.layers, d_ff=args.d_ff,
        dropout=args.dropout, max_len=RECIPE["model"]["max_len"], norm_first=args.norm_first,
    )  # fmt: skip
    torch.manual_seed(args.seed)
    ours = Transformer(V_src, V_tgt, **config)
    if args.swap_layernorm:
        swap_layernorm(ours)
    torch.manual_seed(args.seed)
    theirs = TorchTransformer(V_src, V_tgt, **config)
    n_ours, n_theirs = count_parameters(ours), count_parameters(theirs)
    if n_ours != n_theirs:
        raise AssertionError(f"different sizes: course {n_ours:,} vs torch {n_theirs:,} parameters")

    pairs = load_split("train")
    g = torch.Generator().manual_seed(args.seed)
    index = torch.randperm(len(pairs), generator=g)[: args.batch_size].tolist()
    dataset = NumberWordsDataset([pairs[i] for i in index], source_vocab(), target_vocab())
    batch = collate([dataset[i] for i in range(len(dataset))])
    L = batch.tgt_in.size(1)
    torch_masks = (
        batch.src == PAD_ID,  # (B, L_src), True = padding
        batch.tgt_in == PAD_ID,  # (B, L_tgt), True = padding
        torch.ones(L, L, dtype=torch.bool).triu(1),  # (L_tgt, L_tgt), True = future
    )
    opt_ours = make_optimizer(ours, lr=1e-4)  # the recipe's Adam (fit uses it)
    opt_theirs = make_optimizer(theirs, lr=1e-4)
    V = V_tgt

    def step_ours():
        logits = ours(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)  # (B, L_tgt, V)
        loss = F.cross_entropy(logits.reshape(-1, V), batch.tgt_out.reshape(-1), ignore_index=PAD_ID)
        opt_ours.zero_grad(set_to_none=True)
        loss.backward()
        opt_ours.step()

    def step_theirs():
        logits = theirs(batch.src, batch.tgt_in, *torch_masks)  # (B, L_tgt, V)
        loss = F.cross_entropy(logits.reshape(-1, V), batch.tgt_out.reshape(-1), ignore_index=PAD_ID)
        opt_theirs.zero_grad(set_to_none=True)
        loss.backward()
        opt_theirs.step()

    ours.train()
    theirs.train()
    return step_ours, step_theirs, batch, n_ours


def time_steps(step_ours, step_theirs, warmup: int, steps: int) -> tuple[list[float], list[float]]:
    for _ in range(warmup):
        step_ours()
        step_theirs()
    t_ours, t_theirs = [], []
    for i in range(steps):
        order = [(step_ours, t_ours), (step_theirs, t_theirs)]
        for fn, times in order if i % 2 == 0 else order[::-1]:
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    return t_ours, t_theirs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    model, fit = RECIPE["model"], RECIPE["fit"]  # defaults: notebook 07's model and batch size
    parser.add_argument("--d-model", type=int, default=model["d_model"])
    parser.add_argument("--heads", type=int, default=model["num_heads"])
    parser.add_argument("--layers", type=int, default=model["num_layers"], help="per stack (encoder and decoder)")
    parser.add_argument("--d-ff", type=int, default=model["d_ff"])
    parser.add_argument("--dropout", type=float, default=model["dropout"])
    parser.add_argument("--norm-first", action=argparse.BooleanOptionalAction, default=model["norm_first"])
    parser.add_argument("--batch-size", type=int, default=fit["batch_size"])
    add_timing_arguments(parser)
    parser.add_argument(
        "--swap-layernorm", action="store_true", help="diagnosis: the course model with nn.LayerNorm in place of its own"  # noqa: E501
    )
    args = parser.parse_args(argv)

    load_before = load_average()
    step_ours, step_theirs, batch, n_params = build(args)
    rows = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        t_ours, t_theirs = time_steps(step_ours, step_theirs, args.warmup, args.steps)
        ours, theirs = statistics.median(t_ours), statistics.median(t_theirs)
        paired = statistics.median(a / b for a, b in zip(t_ours, t_theirs))
        rows.append((threads, ours, theirs, ours / theirs, paired))
    load_after = load_average()

    B, L_src = batch.src.shape
    if args.swap_layernorm:
        print("DIAGNOSIS RUN: the course model uses nn.LayerNorm instead of its own LayerNorm.\n")
    print(
        f"One training step (forward, loss, backward, Adam), batch {B} of the training split "
        f"(L_src {L_src}, L_tgt {batch.tgt_in.size(1)}); d_model {args.d_model}, "
        f"{args.layers}+{args.layers} layers, {args.heads} heads, d_ff {args.d_ff}, dropout {args.dropout}, "
        f"norm_first={args.norm_first}, {n_params:,} parameters each; {args.steps} interleaved "
        f"steps per model after {args.warmup} warm-up steps.\n"
    )
    print("| threads | course (ms) | nn.Transformer (ms) | ratio of medians | median paired ratio |")
    print("|---:|---:|---:|---:|---:|")
    for threads, ours, theirs, ratio, paired in rows:
        print(f"| {threads} | {ours * 1e3:.1f} | {theirs * 1e3:.1f} | {ratio:.2f} | {paired:.2f} |")
    print()
    print(machine_table(args.threads, load_before, load_after))
    if args.profile:
        torch.set_num_threads(args.threads[0])
        profile_steps({"course Transformer": step_ours, "nn.Transformer": step_theirs}, count=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
