"""Find and measure notebook 07's training recipe (course_utils.translator_training.RECIPE).

Trains the course's own Transformer with ``course_utils.translator_training.fit`` on the
numbers-to-words training split, then greedy-decodes the test split (3,000 pairs) and
the held-out "unseen" split (1,000 pairs). Prints one row per setting: the settings,
training wall seconds (building batches and training steps: no evaluation, no
checkpoints), CPU milliseconds per step (all threads of the process: on a machine
shared with other jobs the wall time grows, the CPU time much less), test exact match,
unseen exact match and test token accuracy, then the machine (benchmarks/machine.py).

    python benchmarks/train_recipe.py                    # the recipe, 2 threads (as CI)
    python benchmarks/train_recipe.py --threads 1 2      # both thread counts
    python benchmarks/train_recipe.py --grid             # the settings that were compared
    python benchmarks/train_recipe.py --set d_model=96 steps=900 lr=2e-3

Goal (issue): >= 99 % exact match on the test split within 75 s of training on the
2-core CI machine.

Measured (torch 2.13 CPU, this project's 2-core Xeon VM, shared with other jobs)
----------------------------------------------------------------------------------
``RECIPE``: d_model 64, 4 heads, 2 + 2 layers, d_ff 256, no dropout, post-norm; Adam
(0.9, 0.98, eps 1e-9), linear warm-up over 100 steps to 3e-3 then linear decay, batch
64, plain shuffling, clipping 1.0, no label smoothing, 2,000 steps. Times are training
only (batches and steps; evaluation excluded), machine otherwise idle unless said. The
README's "Speed" section has the latest table.

* 1,300 steps were tried first: seed 0 reached 99.87 % (33 s on 2 threads), but seeds 0-6
  (1 thread) gave 99.87 / 99.90 / **98.37** / 99.93 / **93.20** / **95.57** / 99.87 %.
  Three of seven seeds missed 99 %: 1,300 steps is at the edge. A different CPU or thread
  count changes the last bits of every step, much like another seed, so a notebook
  asserting >= 99 % with that recipe could fail on another machine.
* ``steps=2000`` (everything else equal): seeds 0-8 all at 99.87-99.93 % (unseen
  99.9-100 %), measured twice: before and after the short-row softmax of
  ``course_utils.attention``, which changes the last bits of every step. ``steps=1800``: the hard seeds 2, 4, 5, 6 at 99.93 / 99.77 / 99.93 /
  99.93 %. ``steps=1600``: seed 4 93.8 %. Hence 2,000.
* 2 threads while other jobs use the cores: torch's threads wait for each other and the
  same steps took 5-30 times longer (up to 1.4 s per step). 1 thread degrades gracefully
  (40-65 ms of CPU per step under the same load).

What was compared (1 thread; test exact match %, by seed), the recipe's other settings
unchanged:

* length bucketing (``bucket=50``): about 30 % faster steps but 82 % (1,200 steps) and
  91 % (1,800 steps) on seed 0, and no variation with it reached 97 %. Plain
  shuffling: 99.9 % at 1,300 steps. So the recipe shuffles plainly.
* seed 0, 1,300 steps: lr 5e-3 99.8; 8 heads 99.7; batch 96 99.8; ``norm_first=True``
  93.2; d_model 96 (1,100 steps) 99.5.
* seeds 2 / 4 / 5: 8 heads (1,600 steps) 97.3 / 99.9 / 99.9; lr 2e-3 (1,600) 93.3 /
  92.6 / 99.9; batch 96 (1,200) 96.2 / 95.8 / 99.9; d_model 96 (1,300) 99.7 / 99.8 /
  99.8 but seed 6 93.0; 1,600 steps 99.8 / 93.8 / 99.2; 1,800 steps 99.9 / 99.8 / 99.9;
  2,000 steps 99.9 / 99.9 / 99.9.

An undertrained model's errors are almost all 7- to 9-digit numbers written without
separators: it has not yet learnt to count the digits (the source has no end token), so
it reads "53978566" as "five hundred thirty nine million ...". When that clicks varies
from seed to seed; more steps, not a bigger model, made it reliable.
"""  # noqa: E501

from __future__ import annotations

import argparse
import copy
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from machine import load_average, machine_table  # noqa: E402  (benchmarks/machine.py)

from course_utils import Transformer  # noqa: E402
from course_utils import data as D  # noqa: E402
from course_utils.translator_training import RECIPE, evaluate, fit  # noqa: E402

MODEL_KEYS = set(RECIPE["model"])

# The variations compared (each row changes the recipe in these keys); see the docstring.
GRID = [
    {},
    {"bucket": 50},
    {"steps": 1300},
    {"steps": 1600},
    {"steps": 1800},
    {"steps": 2000},
    {"steps": 1300, "lr": 5e-3},
    {"steps": 1600, "lr": 2e-3},
    {"steps": 1600, "num_heads": 8},
    {"steps": 1300, "norm_first": True},
    {"steps": 1200, "batch_size": 96},
    {"steps": 1300, "d_model": 96},
]


def _parse_value(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"None": None, "True": True, "False": False}.get(text, text)


def run(changes: dict, threads: int, seed: int = 0) -> dict:
    torch.set_num_threads(threads)
    recipe = copy.deepcopy(RECIPE)
    for key, value in changes.items():
        recipe["model" if key in MODEL_KEYS else "fit"][key] = value
    recipe["fit"]["seed"] = seed
    src_vocab, tgt_vocab = D.source_vocab(), D.target_vocab()
    torch.manual_seed(seed)
    model = Transformer(len(src_vocab), len(tgt_vocab), **recipe["model"])
    history = fit(model, D.load_split("train"), None, progress=False, **recipe["fit"])
    t0 = time.perf_counter()
    test = evaluate(model, D.load_split("test"))
    unseen = evaluate(model, D.load_split("unseen"))
    return {
        "changes": changes,
        "threads": threads,
        "seed": seed,
        "steps": history.steps,
        "train_s": history.train_seconds,
        "cpu_per_step": history.train_cpu_seconds / max(history.steps, 1),
        "test_exact": test["exact_match"],
        "unseen_exact": unseen["exact_match"],
        "test_token_acc": test["token_accuracy"],
        "eval_s": time.perf_counter() - t0,
    }


def row(r: dict) -> str:
    changes = ", ".join(f"{k}={v}" for k, v in r["changes"].items()) or "recipe"
    return (
        f"| {changes:<32} | {r['threads']} | {r['seed']} | {r['steps']:5d} | {r['train_s']:7.1f} | "
        f"{1000 * r['cpu_per_step']:6.1f} | {100 * r['test_exact']:6.2f} | {100 * r['unseen_exact']:6.2f} | "
        f"{100 * r['test_token_acc']:6.2f} | {r['eval_s']:5.1f} |"
    )


HEADER = (
    "| settings (changes to RECIPE)     | threads | seed | steps | train s | CPU ms/step | test exact % "
    "| unseen exact % | test token acc % | eval s |"
)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, nargs="+", default=[2])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--grid", action="store_true", help="run every setting of GRID")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="change the recipe")
    args = parser.parse_args(argv)
    settings = GRID if args.grid else [dict(kv.split("=", 1) for kv in args.set)]
    settings = [{k: _parse_value(v) if isinstance(v, str) else v for k, v in s.items()} for s in settings]
    print(f"RECIPE = {RECIPE}")
    load_before = load_average()
    print(HEADER)
    print("|" + "---|" * (HEADER.count("|") - 1))
    for changes in settings:
        for threads in args.threads:
            for seed in args.seeds:
                print(row(run(changes, threads, seed)), flush=True)
    print()
    print(machine_table(args.threads, load_before, load_average()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
