"""What the benchmark scripts print about the machine they ran on."""

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
