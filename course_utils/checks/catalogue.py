"""The mistake catalogue: each exercise declares its mistakes in ONE ordered table.

An :class:`Entry` says everything about one diagnosis: its name (``CheckResult.mistake``),
its one-line meaning (for the registry and the contract), how it is detected, and the
message the student reads, a template whose named fields the checker fills from the case.
Four ways of detecting, one class each:

- :class:`Reference`: the reference run with the mistake built in (or a candidate output built
  from the case); the student's wrong output is compared with each candidate, in table order.
- :class:`Output`: a test on the student's output (or on the pattern of calls that raised).
- :class:`Raises`: a pattern on the student's exception message.
- :class:`Probe`: one of ``_core``'s shared structural probes (gradients, devices, inputs left
  unchanged, ...) names it with its own words; the entry only lists it for this exercise.

A checker module keeps its tables in ``CATALOGUES`` (notebook order); its loops read them
(:meth:`Catalogue.candidates`, :meth:`Catalogue.detect`, :meth:`Catalogue.fail`). From the
tables come the registry (:func:`registry`, with the generic names of ``_mistakes.py``),
each module's ``MISTAKES`` lists, and the generated section of docs/course-contract.md
(:func:`contract_section`; ``python -m course_tools.build --contract`` rewrites it, a test
fails when it is stale). Adding a diagnosis is one entry here and one test row.

Backs every notebook's checkers (01-11).
"""

from __future__ import annotations

import functools
import re
import textwrap
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

from ._core import fail
from ._mistakes import GENERIC

__all__ = [
    "Entry", "Reference", "Output", "Raises", "Probe", "Catalogue", "GRADIENT_PROBE", "DTYPE_PROBE", "DEVICE_PROBE",
    "registry", "catalogues", "contract_section", "BEGIN", "END", "update_contract", "rewrite_contract", "literal",
]

def literal(text: str) -> str:
    """``text`` as a message template that prints it as it is (no fields: its braces doubled)."""
    return text.replace("{", "{{").replace("}", "}}")


# (fields for the message, zero-argument callable giving the candidate) for one case
Candidate = tuple[dict[str, Any], Callable[[], Any]]


@dataclass(frozen=True)
class Reference:
    """Detected by comparison: ``build(case)`` gives the case's candidates, each ``(fields,
    make)``; none when the mistake cannot show on that case (a mask mistake without a mask).
    ``stage``: which comparison of the check tries it (most tables have one)."""

    build: Callable[[Any], Iterable[Candidate]]
    stage: str | tuple[str, ...] = ""
    kind = "reference"


@dataclass(frozen=True)
class Output:
    """Detected by a test on the student's output: ``test(ctx)`` is falsy, or a dict of fields
    (``True`` for none). ``stage`` names the point of the check that asks (a table can hold
    tests that look at different things)."""

    test: Callable[[Any], Any]
    stage: str | tuple[str, ...] = ""
    kind = "output"


@dataclass(frozen=True)
class Raises:
    """Detected by a pattern on the exception the student's code raised (``str(exc)``), of
    ``types``; the pattern's named groups are fields of the message."""

    pattern: str
    types: tuple[type[BaseException], ...] = (Exception,)
    stage: str = ""
    kind = "exception"

    def match(self, exc: BaseException) -> re.Match[str] | None:
        return re.search(self.pattern, str(exc)) if isinstance(exc, self.types) else None


@dataclass(frozen=True)
class Probe:
    """Detected by a shared structural probe of ``_core`` (``probe``: its function's name),
    which words the message itself."""

    probe: str
    kind = "probe"


@dataclass(frozen=True)
class Entry:
    name: str
    meaning: str | None  # None: the name is declared elsewhere (an earlier table or _mistakes.GENERIC)
    detect: Reference | Output | Raises | Probe
    message: str = ""  # str.format template; its fields come from the checker and the detection

    def say(self, **fields: Any) -> str:
        return self.message.format(**fields)


# the names _core's shared probes report, in any table whose check runs them
GRADIENT_PROBE = [Entry(name, None, Probe("gradient_probe")) for name in ("gradient blocked", "gradient differs",
                                                                         "backward fails")]
DTYPE_PROBE = Entry("dtype not preserved", None, Probe("check_dtype_follows"))
DEVICE_PROBE = Entry("wrong device", None, Probe("check_module_device"))


@dataclass
class Catalogue:
    """One exercise's mistakes, in the order they are tried."""

    exercise: str
    notebook: str
    entries: list[Entry] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._by_name: dict[str, Entry] = {}
        for entry in self.entries:
            self._by_name.setdefault(entry.name, entry)

    def names(self) -> list[str]:
        return list(self._by_name)

    def __getitem__(self, name: str) -> Entry:
        return self._by_name[name]

    def __contains__(self, name: str) -> bool:
        return name in self._by_name

    def of(self, kind: type, stage: str | None = None) -> list[Entry]:
        """The entries detected by ``kind`` (at ``stage``), in table order; a stage with no entry
        is a checker's typo and raises (the decorator reports it), never a silent pass."""
        found = [entry for entry in self.entries
                 if isinstance(entry.detect, kind) and (stage is None or _at(entry.detect, stage))]
        if stage is not None and not found:
            raise KeyError(f"{self.exercise}: no {kind.__name__} entry at stage {stage!r}")
        return found

    def candidates(self, case: Any, stage: str = "", **fields: Any) -> list[tuple[str, str, Any]]:
        """``(name, message, make)`` for every :class:`Reference` entry of ``stage`` that can show
        on ``case``, in table order (the form ``expect_close`` takes); ``make`` is the candidate
        or a zero-argument callable giving it."""
        return [(entry.name, entry.say(**{**fields, **extra}), make)
                for entry in self.of(Reference, stage) for extra, make in entry.detect.build(case)]

    def detect(self, stage: str, ctx: Any, prefix: str = "", **fields: Any) -> None:
        """Fail with the first :class:`Output` entry of ``stage`` whose test holds on ``ctx``."""
        for entry in self.of(Output, stage):
            found = entry.detect.test(ctx)
            if found:
                _fail(entry, prefix, **{**fields, **(found if isinstance(found, dict) else {})})

    def detect_raised(self, exc: BaseException, stage: str = "", prefix: str = "", **fields: Any) -> None:
        """Fail with the first :class:`Raises` entry of ``stage`` whose pattern matches ``exc``."""
        for entry in self.of(Raises, stage):
            found = entry.detect.match(exc)
            if found:
                _fail(entry, prefix, **{**fields, **found.groupdict()})

    def fail(self, name: str, prefix: str = "", **fields: Any) -> NoReturn:
        """Fail with the message of ``name``'s first entry (``prefix`` before it)."""
        _fail(self[name], prefix, **fields)


def _fail(entry: Entry, prefix: str, **fields: Any) -> NoReturn:
    fail(prefix + entry.say(**fields), mistake=entry.name)
    raise AssertionError("unreachable")  # fail raises


def _at(detect: Any, stage: str) -> bool:
    """Whether ``detect`` belongs to ``stage`` (an entry can belong to several, a tuple)."""
    own = getattr(detect, "stage", "")
    return stage in own if isinstance(own, tuple) else stage == own


_CHECKER_MODULES: list[ModuleType] = []  # set once by the package, which imports every checker module


def use_checker_modules(modules: Iterable[ModuleType]) -> None:
    """Called once by ``course_utils.checks`` after importing its checker modules (in notebook
    order): the package hands them over, so this module, which they import, imports none of them."""
    _CHECKER_MODULES[:] = modules


def catalogues() -> list[Catalogue]:
    """Every exercise's table, in notebook order (each checker module's ``CATALOGUES``)."""
    return [table for module in _CHECKER_MODULES for table in getattr(module, "CATALOGUES", ())]


def registry() -> dict[str, str]:
    """Every ``CheckResult.mistake`` a checker can report -> its one-line meaning: the generic
    names of ``_core``'s probes and every table's declared names. Raises if a name is declared
    twice or used undeclared."""
    declared: dict[str, str] = dict(GENERIC)
    used: set[str] = set()
    for table in catalogues():
        for entry in table.entries:
            used.add(entry.name)
            if entry.meaning is not None:
                if entry.name in declared and declared[entry.name] != entry.meaning:
                    raise ValueError(f"{table.exercise}: {entry.name!r} is declared twice with different meanings")
                declared[entry.name] = entry.meaning
    undeclared = sorted(used - set(declared))
    if undeclared:
        raise ValueError(f"table entries with no meaning anywhere: {undeclared}")
    return declared


BEGIN = "<!-- BEGIN GENERATED: mistakes by exercise (python -m course_tools.build --contract) -->"
END = "<!-- END GENERATED: mistakes by exercise -->"


def contract_section() -> str:
    """The contract's lists of named mistakes, one per exercise, from the tables (the text
    between :data:`BEGIN` and :data:`END`): each name in the order tried, with its meaning
    where the course meets it first."""
    registry()  # every name declared once
    wrap = functools.partial(textwrap.wrap, width=100, break_long_words=False, break_on_hyphens=False)
    lines = wrap("Generated from the checkers' tables (`course_utils/checks/catalogue.py`): each exercise's names in "
                 "the order its check tries them, with the meaning where a name first appears. Any checker can also "
                 "report the generic names of the shared probes: " + ", ".join(f'`"{n}"`' for n in GENERIC) + ".")
    lines.append("")
    for table in catalogues():
        declared = {e.name: e.meaning for e in table.entries if e.meaning is not None}
        named = [f'`"{n}"`' + (f" ({declared[n]})" if n in declared else "") for n in table.names() if n not in GENERIC]
        lines += wrap(f"- **`{table.exercise}`** ({table.notebook}): " + "; ".join(named) + ".", subsequent_indent="  ")
    return "\n".join(lines)


def update_contract(text: str) -> str:
    """``text`` (the contract) with its generated section rewritten from the tables."""
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[:start] + "\n" + contract_section() + "\n" + text[end:]


def rewrite_contract(path: Path, check: bool = False) -> int:
    """``python -m course_tools.build --contract [--check]``: rewrite the contract's generated
    section from the tables (with ``check``: only say whether it is stale, exit status 1 if so)."""
    text = path.read_text(encoding="utf-8")
    updated = update_contract(text)
    if updated == text:
        print(f"OK: {path}'s lists of named mistakes match the checkers' tables.")
        return 0
    if check:
        print(f"Out of date: {path}'s lists of named mistakes (run `python -m course_tools.build --contract`).")
        return 1
    path.write_text(updated, encoding="utf-8", newline="\n")
    print(f"updated {path} (lists of named mistakes)")
    return 0
