"""Smoke tests for benchmarks/: each script runs end to end on a tiny configuration and
prints its table (timings are not checked here: speed is measured, never asserted in tests)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    threads = torch.get_num_threads()

    def load(name):
        sys.modules.pop(name, None)
        return importlib.import_module(name)

    yield load
    torch.set_num_threads(threads)  # the scripts set their own


def test_decode_speed_compares_both_decoders(bench, capsys):
    assert bench("decode_speed").main(["--threads", "1", "--repeats", "1", "--sentences", "12", "--batch-size", "5", "12"]) == 0  # noqa: E501
    out = capsys.readouterr().out
    assert "12 sentences" in out and "Outputs identical: yes (asserted)" in out
    rows = [line for line in out.splitlines() if line.startswith("| 5 |") or line.startswith("| 12 |")]
    assert len(rows) == 2 and all(line.count("x |") == 2 for line in rows), out


def test_decode_speed_with_the_pretrained_translator(bench, capsys):
    assert bench("decode_speed").main(["--threads", "1", "--repeats", "1", "--sentences", "8", "--batch-size", "8", "--pretrained"]) == 0  # noqa: E501
    assert "pretrained translator" in capsys.readouterr().out


def test_train_step_speed_times_both_models(bench, capsys):
    assert bench("train_step_speed").main(["--threads", "1", "--steps", "2", "--warmup", "1", "--batch-size", "8"]) == 0
    out = capsys.readouterr().out
    assert "239,333 parameters each" in out  # notebook 07's model, the same size in both
    assert any(line.startswith("| 1 |") for line in out.splitlines()), out


def test_train_recipe_trains_and_scores(bench, capsys):
    assert bench("train_recipe").main(["--threads", "1", "--set", "steps=3", "batch_size=8", "warmup=1"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| steps=3, batch_size=8, warmup=1"))
    assert "|     3 |" in row, row


def test_gpt_train_trains_over_seeds(bench, capsys):
    assert bench("gpt_train").main(["--threads", "1", "--seeds", "0", "1", "--set", "steps=3", "batch_size=4",
                                    "warmup=1", "d_model=16", "num_layers=1", "d_ff=32", "max_len=16"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith(("| 1 | 0 | 3 |", "| 1 | 1 | 3 |"))]
    assert len(rows) == 2 and all(row.count("|") == 8 for row in rows), out
    assert "1 thread(s), 2 seeds, nats/char: mean" in out and "shipped checkpoint" in out


def test_gpt_step_speed_times_the_three_models(bench, capsys):
    assert bench("gpt_step_speed").main(["--threads", "1", "--steps", "2", "--warmup", "1", "--batch-size", "2",
                                         "--d-model", "16", "--d-ff", "32", "--layers", "1", "--context", "8"]) == 0
    out = capsys.readouterr().out
    assert "parameters each" in out  # the same size in all three (asserted by the script)
    rows = [line for line in out.splitlines() if line.startswith("| 1 |")]
    assert [row.split("|")[2].strip() for row in rows] == ["wall", "CPU"], out


def test_bpe_speed_trains_and_compares_encoders(bench, capsys):
    pytest.importorskip("transformers")
    assert bench("bpe_speed").main(["--merges", "20", "--chars", "20000", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "| 0 |" in out and "| 20 |" in out  # one training repeat, 20 merges learned
    assert "every encoder's ids identical: asserted" in out
    rows = [line for line in out.splitlines() if line.startswith(("| course,", "| Hugging Face"))]
    assert len(rows) >= 4 and all(row.count("|") == 7 for row in rows), out


def test_modern_ablation_trains_each_variant_for_the_same_cpu_budget(bench, capsys):
    args = ["--budget", "0.1", "--seeds", "0", "--variants", "gpt2", "rope", "llama",
            "--set", "d_model=16", "num_layers=1", "max_len=16", "batch_size=4", "warmup=1"]
    assert bench("modern_ablation").main(args) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith(("| gpt2 | 0 |", "| rope | 0 |", "| llama | 0 |"))]
    assert len(rows) == 3 and all(row.count("|") == 8 for row in rows), out
    assert "budget 0.1 CPU s per run" in out and "val loss min-max" in out


def test_bpe_vs_chars_trains_both_models(bench, capsys):
    assert bench("bpe_vs_chars").main(["--seeds", "0", "--steps", "2", "--vocab", "280", "--chars", "20000"]) == 0
    out = capsys.readouterr().out
    assert "chars seed 0: loss" in out and "  bpe seed 0: loss" in out, out
    assert out.count("nats/char mean") == 2 and "characters per token" in out, out
