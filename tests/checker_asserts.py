"""Assertions shared by the checker tests (tests/test_checks_*.py).

Checkers draw fresh random inputs on every call, so each verdict is asserted several
times: a diagnosis that depends on luck would flip within a few repeats.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

REPEAT = 3


def verdicts(check: Callable[[Any], Any], student: Any, repeat: int = REPEAT) -> list:
    return [check(student) for _ in range(repeat)]


def assert_passes(check: Callable[[Any], Any], student: Any, repeat: int = REPEAT) -> None:
    for r in verdicts(check, student, repeat):
        assert r.passed, r.feedback
        assert r.status == "passed" and r.mistake is None
        assert r.feedback.startswith("[OK]")


def assert_mistake(check: Callable[[Any], Any], student: Any, mistake: str, *words: str, repeat: int = REPEAT) -> None:
    """The check fails, names ``mistake`` (the catalogue name) and says each of ``words``."""
    for r in verdicts(check, student, repeat):
        assert r.passed is False, r.feedback
        assert r.feedback.startswith("[X]"), r.feedback
        assert r.mistake == mistake, r.feedback
        for w in words:
            assert w in r.feedback, (w, r.feedback)


def assert_not_implemented(check: Callable[[Any], Any], student: Any) -> None:
    r = check(student)
    assert r.passed is False and r.status == "not implemented", r.feedback
    assert r.feedback.startswith("[ ]") and "not implemented yet" in r.feedback
