"""Find and measure notebook 07's training recipe (course_utils.training.RECIPE).

Trains the course's own Transformer with ``course_utils.training.fit`` on the
numbers-to-words training split, then greedy-decodes the test split (3,000 pairs) and
the held-out "unseen" split (1,000 pairs). Prints one row per setting: the settings,
training wall seconds (training steps only: no evaluation, no checkpoints), CPU
seconds per step (all threads of the process: on a machine shared with other jobs the
wall time grows, the CPU time much less), test exact match, unseen exact match and
test token accuracy.

    python benchmarks/train_recipe.py                    # the recipe, 2 threads (as CI)
    python benchmarks/train_recipe.py --threads 1 2      # both thread counts
    python benchmarks/train_recipe.py --grid             # the settings that were compared
    python benchmarks/train_recipe.py --set d_model=96 steps=900 lr=2e-3

Goal (issue): >= 99 % exact match on the test split within 75 s of training on the
2-core CI machine.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from course_utils import Transformer  # noqa: E402
from course_utils import data as D  # noqa: E402
from course_utils.training import RECIPE, evaluate, fit  # noqa: E402

MODEL_KEYS = set(RECIPE["model"])

# The variations compared (each row changes the recipe in these keys).
GRID = [
    {},
    {"steps": 1000},
    {"steps": 1500},
    {"bucket": 0},
    {"lr": 2e-3},
    {"lr": 5e-3},
    {"schedule": "inverse_sqrt"},
    {"label_smoothing": 0.1},
    {"batch_size": 128, "steps": 700},
    {"d_model": 96, "steps": 1000},
    {"d_model": 128, "steps": 800},
    {"dropout": 0.1},
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
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, load average {os.getloadavg()}")
    print(HEADER)
    for changes in settings:
        for threads in args.threads:
            for seed in args.seeds:
                print(row(run(changes, threads, seed)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
