"""Assertions shared by the checker tests (tests/test_checks_*.py).

Checkers draw random inputs from a seed (``check(student, seed=...)``), so each verdict
is asserted several times: on fixed seeds (the same inputs on every machine and every
run) and on one fresh random seed, which every assertion message names, so a diagnosis
that depends on luck shows and its failure can be replayed with that seed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from course_utils.checks.catalogue import registry

MISTAKES = registry()  # every registered name: the tables, the generic names and those not yet in a table

REPEAT = 3
# Fixed seeds first; a run of `repeat` verdicts uses the first repeat - 1 of them.
SEEDS = tuple(range(1000, 1000 + 64))
STABLE = 20  # draws for the families whose diagnoses must not depend on the draw
# one random seed for the whole session: checkers that share a seed's draw (greedy_decode's model and
# cases) then draw it once for all the tests that ask for it
SESSION_SWEEP = int.from_bytes(os.urandom(4), "little")


def verdicts(check: Callable[..., Any], student: Any, repeat: int | tuple[int, ...] = REPEAT,
             shared_sweep: bool = False) -> list:
    """``repeat`` verdicts: ``repeat - 1`` on fixed seeds, the last on a random seed (the
    session's with ``shared_sweep``, else a fresh one), or one on each seed of a tuple. Every
    mistake name a verdict reports must be in the registry (checks/_mistakes.py)."""
    if isinstance(repeat, tuple):
        seeds = repeat
    else:
        sweep = SESSION_SWEEP if shared_sweep else int.from_bytes(os.urandom(4), "little")
        seeds = (*SEEDS[: repeat - 1], sweep)
    print(f"seeds of these verdicts: {seeds}")  # shown by pytest when the test fails
    results = [check(student, seed=s) for s in seeds]
    for r in results:
        assert r.mistake is None or r.mistake in MISTAKES, f"unregistered mistake name {r.mistake!r}: {_why(r)}"
    return results


def _why(r: Any) -> str:
    return f"(seed {r.seed}) {r.feedback}"


def assert_passes(check: Callable[..., Any], student: Any, repeat: int | tuple[int, ...] = REPEAT) -> None:
    for r in verdicts(check, student, repeat):
        assert r.passed, _why(r)
        assert r.status == "passed" and r.mistake is None, _why(r)
        assert r.feedback.startswith("[OK]"), _why(r)


def assert_mistake(check: Callable[..., Any], student: Any, mistake: str, *words: str,
                   repeat: int | tuple[int, ...] = REPEAT,
                   shared_sweep: bool = False) -> None:
    """The check fails, names ``mistake`` (a registry name) and says each of ``words``."""
    assert mistake in MISTAKES, f"{mistake!r} is not in the registry (a catalogue table or course_utils/checks/_mistakes.py)"  # noqa: E501
    for r in verdicts(check, student, repeat, shared_sweep):
        _assert_named(r, mistake, words, _why(r))


def _assert_named(r: Any, mistake: str, words: tuple[str, ...], why: str) -> None:
    assert r.passed is False, why
    assert r.feedback.startswith("[X]"), why
    assert r.mistake == mistake, why
    assert f"seed {r.seed}" in r.feedback, why  # a failure can be replayed
    for w in words:
        assert w in r.feedback, (w, why)


def assert_family(members: list[tuple[str, Callable[..., Any], Any, str, tuple[str, ...]]], sweep: bool = True) -> None:
    """Every member ``(label, check, student, mistake, words)`` named on ``STABLE`` draws,
    the fixed seeds and the session's sweep (``sweep=False``: the fixed ones only, when
    another test makes the random draw), seed by seed: the members share each seed's draw."""
    if sweep:
        print(f"random seed of this sweep: {SESSION_SWEEP}")
    for seed in SEEDS[: STABLE - 1] + ((SESSION_SWEEP,) if sweep else ()):
        for label, check, student, mistake, words in members:
            r = check(student, seed=seed)
            assert r.mistake is None or r.mistake in MISTAKES, f"unregistered mistake name {r.mistake!r}: {_why(r)}"
            _assert_named(r, mistake, words, f"member {label}, {_why(r)}")


def assert_not_implemented(check: Callable[..., Any], student: Any) -> None:
    r = check(student)
    assert r.passed is False and r.status == "not implemented", r.feedback
    assert r.feedback.startswith("[ ]") and "not implemented yet" in r.feedback


def hand_dropout(x: Any, p: float, training: bool, guard: bool = False) -> Any:
    """A correct dropout written by hand from the paper: a Bernoulli keep-mask and the
    ``1 / (1 - p)`` rescale (``guard``: ``p = 1`` special-cased to zeros, as d2l does).
    The checkers' dropout probes must accept both forms."""
    import torch

    if not training or p == 0:
        return x
    if guard and p == 1:
        return torch.zeros_like(x)
    keep = (torch.rand_like(x) > p).to(x.dtype)
    return keep * x / (1 - p)


def structured_dropout(kind: str, p: float) -> Any:
    """A dropout module with the right p and the 1 / (1 - p) rescale whose draws are wrong
    (trial M): ``"batch"`` one (L, D) mask for every sequence, ``"token"`` one draw per
    position (whole vectors dropped), ``"kept"`` a mask drawn once per shape and reused."""
    import torch
    from torch import nn

    class StructuredDropout(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.p, self.kept = p, {}

        def forward(self, x: Any) -> Any:
            if not self.training or self.p == 0:
                return x
            B, L, D = x.shape
            if kind == "kept":
                if x.shape not in self.kept:
                    self.kept[x.shape] = torch.rand(B, L, D, device=x.device) >= self.p
                keep = self.kept[x.shape]
            else:
                keep = torch.rand(*((L, D) if kind == "batch" else (B, L, 1)), device=x.device) >= self.p
            return x * keep / (1 - self.p)

    return StructuredDropout()
