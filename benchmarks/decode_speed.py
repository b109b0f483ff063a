"""Greedy decoding of the test set: full-prefix (naive) vs key/value cache (notebook 07).

Decodes the 3,000 sources of the numbers-to-words test split with
``course_utils.decoding.greedy_decode`` (re-runs the decoder on the whole prefix at each
step) and with ``greedy_decode_cached`` (feeds only the newest token; keys and values
of earlier steps cached), checks that both give exactly the same tokens, and prints the
wall time of each and the speed-up as a markdown table.

Nothing is trained. By default the model has notebook 07's size (``RECIPE["model"]`` of
``course_utils.translator_training``: d_model 64, 2 encoder + 2 decoder layers, 4 heads, d_ff 256)
with random weights, and the output bias of ``<eos>`` is set to -1e4 so that no sequence
ever ends early: every sentence is decoded for the full ``max_len = 20`` steps (19 words
+ ``<eos>`` is the longest target), the case the cache is built for. ``--pretrained``
decodes with the trained translator of notebook 07 instead (``course_utils.translator_checkpoint``,
nothing rigged): each batch stops at its longest sentence, which shrinks both times and
the speed-up. ``--checkpoint PATH`` takes any ``state_dict`` of a ``Transformer`` of the
size given by the flags.

Timing: each repeat decodes the whole test set with both functions, their order
alternating between repeats (interleaved), after one untimed warm-up batch; the table
gives the median over repeats, for batches of 500 sentences (as
``course_utils.translator_training.evaluate`` decodes) and for the whole test split in one batch.
Run from the repository root (about 4 minutes)::

    .venv/bin/python benchmarks/decode_speed.py                # 1 and 2 threads, 7 repeats
    .venv/bin/python benchmarks/decode_speed.py --pretrained   # the trained translator
    .venv/bin/python benchmarks/decode_speed.py --threads 1 --repeats 3 --batch-size 500
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository's course_utils

from machine import load_average, machine_table  # noqa: E402  (benchmarks/machine.py)

from course_utils import Transformer  # noqa: E402
from course_utils.data import (  # noqa: E402
    BOS_ID,
    EOS_ID,
    MAX_TARGET_WORDS,
    PAD_ID,
    NumberWordsDataset,
    collate,
    load_split,
    source_vocab,
    target_vocab,
)
from course_utils.decoding import greedy_decode, greedy_decode_cached  # noqa: E402
from course_utils.translator_checkpoint import load_pretrained, pretrained_info  # noqa: E402
from course_utils.translator_training import RECIPE  # noqa: E402


def build_model(args: argparse.Namespace) -> Transformer:
    if args.pretrained:
        config = pretrained_info()["config"]
        args.d_model, args.heads, args.layers = config["d_model"], config["num_heads"], config["num_layers"]
        args.d_ff, args.norm_first = config["d_ff"], config["norm_first"]  # for the printed description
        model, _, _ = load_pretrained()
        return model.eval()
    torch.manual_seed(args.seed)
    model = Transformer(
        len(source_vocab()),
        len(target_vocab()),
        d_model=args.d_model,
        num_heads=args.heads,
        num_layers=args.layers,
        d_ff=args.d_ff,
        dropout=0.0,
        max_len=RECIPE["model"]["max_len"],
        norm_first=args.norm_first,
    )
    if args.checkpoint:
        model.load_state_dict(torch.load(args.checkpoint, map_location="cpu"))
    else:
        with torch.no_grad():
            model.output_projection.bias[EOS_ID] = -1e4  # never stop early: full-length decoding
    return model.eval()


def make_batches(batch_size: int, sentences: int | None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    dataset = NumberWordsDataset(load_split("test")[:sentences], source_vocab(), target_vocab())
    items = [dataset[i] for i in range(len(dataset))]
    batches = []
    for start in range(0, len(items), batch_size):
        batch = collate(items[start : start + batch_size])
        batches.append((batch.src, batch.src_mask))  # (B, L_src), (B, 1, L_src)
    return batches


def decode_all(fn, model, batches, max_len) -> tuple[float, list[torch.Tensor]]:
    start = time.perf_counter()
    outputs = [fn(model, src, max_len, BOS_ID, EOS_ID, src_mask=mask, pad_id=PAD_ID) for src, mask in batches]
    return time.perf_counter() - start, outputs


def time_both(model, batches, threads: int, args) -> tuple:
    """Decode every batch with both functions, ``args.repeats`` times, interleaved; check
    that the tokens are identical. Returns the medians, their ratio, the median of the
    per-repeat ratios, the steps decoded and every time."""
    torch.set_num_threads(threads)
    for fn in (greedy_decode, greedy_decode_cached):  # warm-up
        fn(model, batches[0][0], args.max_len, BOS_ID, EOS_ID, src_mask=batches[0][1], pad_id=PAD_ID)
    times = {"naive": [], "cached": []}
    for repeat in range(args.repeats):
        order = ["naive", "cached"] if repeat % 2 == 0 else ["cached", "naive"]
        outputs = {}
        for name in order:
            fn = greedy_decode if name == "naive" else greedy_decode_cached
            seconds, outputs[name] = decode_all(fn, model, batches, args.max_len)
            times[name].append(seconds)
        for a, b in zip(outputs["naive"], outputs["cached"]):
            if not torch.equal(a, b):
                raise AssertionError("greedy_decode_cached and greedy_decode gave different tokens")
    steps = max(out.size(1) - 1 for out in outputs["naive"])
    naive, cached = statistics.median(times["naive"]), statistics.median(times["cached"])
    paired = statistics.median(a / b for a, b in zip(times["naive"], times["cached"]))
    return naive, cached, naive / cached, paired, steps, times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    model = RECIPE["model"]  # defaults: notebook 07's model
    parser.add_argument("--d-model", type=int, default=model["d_model"])
    parser.add_argument("--heads", type=int, default=model["num_heads"])
    parser.add_argument("--layers", type=int, default=model["num_layers"], help="per stack (encoder and decoder)")
    parser.add_argument("--d-ff", type=int, default=model["d_ff"])
    parser.add_argument("--norm-first", action=argparse.BooleanOptionalAction, default=model["norm_first"])
    parser.add_argument(
        "--batch-size", type=int, nargs="+", default=[500, 3000],
        help="sentences per call: 500 as course_utils.translator_training.evaluate, 3000 the whole test split at once",
    )  # fmt: skip
    parser.add_argument("--max-len", type=int, default=MAX_TARGET_WORDS + 1)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sentences", type=int, help="decode only the first N test sources (quick runs)")
    weights = parser.add_mutually_exclusive_group()
    weights.add_argument("--pretrained", action="store_true", help="notebook 07's trained translator (course_utils.translator_checkpoint)")  # noqa: E501
    weights.add_argument("--checkpoint", help="state_dict of a trained Transformer of the size given by the flags")
    args = parser.parse_args(argv)

    load_before = load_average()
    model = build_model(args)
    rows = []
    for batch_size in args.batch_size:
        batches = make_batches(batch_size, args.sentences)
        num_sentences = sum(src.size(0) for src, _ in batches)
        for threads in args.threads:
            rows.append((batch_size, threads, *time_both(model, batches, threads, args)))
    load_after = load_average()

    if args.pretrained:
        weights = "notebook 07's pretrained translator (course_utils.translator_checkpoint)"
    elif args.checkpoint:
        weights = f"checkpoint {args.checkpoint}"
    else:
        weights = "random, <eos> bias -1e4 (full length)"
    print(
        f"Greedy decoding of the test split: {num_sentences} sentences, max_len {args.max_len}; "
        f"model d_model {args.d_model}, "
        f"{args.layers}+{args.layers} layers, {args.heads} heads, d_ff {args.d_ff}, "
        f"norm_first={args.norm_first}; weights: {weights}; median of {args.repeats} "
        f"interleaved repeats. Outputs identical: yes (asserted).\n"
    )
    print(
        "| batch | threads | steps decoded | full prefix (s) | KV cache (s) | speed-up (ratio of medians) "
        "| median paired speed-up |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for batch_size, threads, naive, cached, ratio, paired, steps, _ in rows:
        print(f"| {batch_size} | {threads} | {steps} | {naive:.2f} | {cached:.2f} | {ratio:.1f}x | {paired:.1f}x |")
    print()
    for batch_size, threads, *_, times in rows:
        print(
            f"batch {batch_size}, threads {threads}, every repeat: full prefix "
            f"{', '.join(f'{t:.2f}' for t in times['naive'])} s; KV cache {', '.join(f'{t:.2f}' for t in times['cached'])} s"  # noqa: E501
        )
    print()
    print(machine_table(args.threads, load_before, load_after))
    return 0


if __name__ == "__main__":
    sys.exit(main())
