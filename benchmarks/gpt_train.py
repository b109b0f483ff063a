"""Measure notebook 09's training runs on tiny Shakespeare (course_utils.gpt_training).

Trains ``FAST_RECIPE`` (what the notebook trains with ``TRAIN = True``) from several seeds and
prints, per run: the threads, the seed, training wall seconds (steps only: the validation passes
excluded), CPU seconds and CPU milliseconds per step (all threads of the process), and the final
validation loss (nats per character, ``evaluate_loss``'s 8 fixed batches); then the mean and the
range over the seeds, the shipped checkpoint's own record (``GPT_RECIPE``: its threads, seconds
and final validation loss, read from the file, not retrained) and the machine (machine.py).

On a machine shared with other jobs the wall time grows with the load and says little; the CPU
time per step grows much less (with 2 threads, a waiting thread may spin and add CPU time too:
measure on 1 thread when the machine is busy).

    python benchmarks/gpt_train.py                          # FAST_RECIPE, seeds 0 1 2, 2 threads
    python benchmarks/gpt_train.py --threads 1 --seeds 0 1 2
    python benchmarks/gpt_train.py --set steps=600 lr=0.004

Goal (issue 22): ``TRAIN = True`` trains in at most 120 s on 2 threads to a validation loss of
at most 2.0 nats per character. The README's "Speed" section has the latest numbers.

Measured (torch 2.13 CPU, this project's 2-core AMD EPYC VM)
------------------------------------------------------------
``FAST_RECIPE`` (d_model 128, 4 heads, 4 blocks, d_ff 512, context 64, batch 32, AdamW 3e-3 with 50
warm-up steps and a cosine decay, weight decay 0.1, 900 steps; 809,856 parameters),
``python benchmarks/gpt_train.py --threads 1 --seeds S`` for S = 0, 1, 2 (seed 0 alone, then seeds 1
and 2 at the same time), 28 Nov 2026, on a machine shared with about ten other jobs (load average
about 10 on 2 cores, so the wall seconds say nothing: 1,800 s and more for 190 s of CPU):

| seed | val loss | CPU ms/step | CPU s | wall s (loaded) |
|---:|---:|---:|---:|---:|
| 0 | 1.768 | 214 | 193 | 1802 |
| 1 | 1.775 | 211 | 190 | 1595 |
| 2 | 1.773 | 211 | 190 | 1595 |

So validation loss 1.768-1.775 nats per character (mean 1.772) over seeds 0, 1, 2; 211-214 ms of CPU per step on 1 thread (900 steps: 190-193 s of CPU). On 2 quiet threads this model measured 0.116 s per step (12:12 UTC the same day,
before the load): 900 steps in about 105 s, within the 120-s goal. The same model with a context of
128, 8,000 steps (``GPT_RECIPE``, the shipped checkpoint, 1 thread at high priority):
3359 s of training steps (3379 s wall), final validation loss
1.569 (1.567 on 64 batches).
"""  # noqa: E501

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import load_average, machine_table  # noqa: E402

from course_utils.gpt import GPT  # noqa: E402
from course_utils.gpt_training import FAST_RECIPE, fit_gpt, prepare_data, pretrained_gpt_info  # noqa: E402


def _parse_settings(pairs: list[str]) -> tuple[dict, dict]:
    model, fit = dict(FAST_RECIPE["model"]), dict(FAST_RECIPE["fit"])
    for pair in pairs:
        key, _, value = pair.partition("=")
        target = model if key in model else fit if key in fit else None
        if target is None:
            raise SystemExit(f"unknown setting {key!r}; known: {sorted(model) + sorted(fit)}")
        target[key] = type(target[key])(float(value)) if isinstance(target[key], (int, float)) else value
    return model, fit


def run(threads: int, seed: int, model_cfg: dict, fit_cfg: dict) -> dict:
    torch.set_num_threads(threads)
    tokenizer, train, valid = prepare_data()
    fit_cfg = dict(fit_cfg, seed=seed, eval_every=fit_cfg["steps"])  # one validation pass, at the end
    torch.manual_seed(seed)
    model = GPT(len(tokenizer), **model_cfg)
    cpu = time.process_time()
    history = fit_gpt(model, train, valid, **fit_cfg)
    cpu_s = time.process_time() - cpu  # includes the one validation pass
    return {"threads": threads, "seed": seed, "train_s": history["train_seconds"], "cpu_s": cpu_s,
            "cpu_ms_step": cpu_s / fit_cfg["steps"] * 1000, "val": history["val_loss"][-1]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[2])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="override FAST_RECIPE entries")
    args = parser.parse_args(argv)
    model_cfg, fit_cfg = _parse_settings(args.set)
    load_before = load_average()
    print("model:", ", ".join(f"{k}={v}" for k, v in model_cfg.items()))
    print("fit:", ", ".join(f"{k}={v}" for k, v in fit_cfg.items()))
    print("| threads | seed | steps | train wall s | CPU s | CPU ms/step | val loss |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for threads in args.threads:
        rows = []
        for seed in args.seeds:
            r = run(threads, seed, model_cfg, fit_cfg)
            rows.append(r)
            print(f"| {threads} | {seed} | {fit_cfg['steps']} | {r['train_s']:.1f} | {r['cpu_s']:.1f} | "
                  f"{r['cpu_ms_step']:.0f} | {r['val']:.3f} |", flush=True)
        for key, unit in (("val", "nats/char"), ("cpu_ms_step", "CPU ms/step"), ("train_s", "wall s")):
            values = [r[key] for r in rows]
            print(f"  {threads} thread(s), {len(values)} seeds, {unit}: mean {statistics.mean(values):.3f}, "
                  f"min {min(values):.3f}, max {max(values):.3f}")
    try:
        info = pretrained_gpt_info()
        print(f"\nshipped checkpoint (GPT_RECIPE, read from the file): {info['threads']} thread(s), "
              f"{info['train_seconds']} s of training steps ({info.get('wall_seconds', '?')} s wall), "
              f"final validation loss {info['final_val_loss']:.3f}")
    except (FileNotFoundError, ValueError) as error:
        print(f"\nshipped checkpoint: {error}")
    print()
    print(machine_table(args.threads, load_before, load_average()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
