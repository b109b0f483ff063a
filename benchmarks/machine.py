"""What the benchmark scripts print about the machine they ran on, and where a step's time goes."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import torch


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_average() -> str:
    try:
        return " / ".join(f"{x:.2f}" for x in os.getloadavg()) + " (1 / 5 / 15 min)"
    except OSError:
        return "unknown"


def machine_table(threads: list[int], load_before: str, load_after: str) -> str:
    rows = [
        ("CPU", cpu_model()),
        ("cores (os.cpu_count)", str(os.cpu_count())),
        ("torch", torch.__version__),
        ("torch threads", ", ".join(map(str, threads))),
        ("Python", platform.python_version()),
        ("load average before", load_before),
        ("load average after", load_after),
    ]
    lines = ["| machine | |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rows]
    return "\n".join(lines)


def profile_steps(steps: dict, count: int) -> None:
    """torch.profiler's table (self CPU time) of ``count`` calls of each ``{name: step}``, after 3 warm-up calls."""
    from torch.profiler import ProfilerActivity, profile

    for name, fn in steps.items():
        for _ in range(3):
            fn()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(count):
                fn()
        print(f"\n### {name}: {count} steps, torch.profiler, sorted by self CPU time\n")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))


def add_timing_arguments(parser) -> None:
    """The training-step benchmarks' common flags: --warmup, --steps, --threads, --seed, --profile."""
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=40, help="timed steps per model and thread count")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", action="store_true", help="also print torch.profiler tables")
