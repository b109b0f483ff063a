"""docs/course-contract.md is the course's public interface: every exported name, every
checker, and every argument of an exercise is in it."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

import course_utils
from course_utils import checks

REPO = Path(__file__).resolve().parents[1]
CONTRACT = (REPO / "docs" / "course-contract.md").read_text(encoding="utf-8")
# the table of exercises: | notebook | `name` | signature and result |
ROWS = dict(re.findall(r"^\| \d{2} \| `(\w+)` \| (.+) \|$", CONTRACT, re.M))


def mentioned(name: str) -> bool:
    return re.search(rf"`{re.escape(name)}[`(]", CONTRACT) is not None


@pytest.mark.parametrize("name", course_utils.__all__)
def test_every_exported_name_is_in_the_contract(name):
    assert mentioned(name), f"course_utils exports {name}, which docs/course-contract.md does not describe"


@pytest.mark.parametrize("name", checks.__all__)
def test_every_checker_is_in_the_contract(name):
    assert mentioned(name), f"course_utils.checks exports {name}, which docs/course-contract.md does not list"


def test_there_are_checkers_and_exercises_to_compare():
    assert sum(name.startswith("check_") for name in checks.__all__) >= 20
    assert len(ROWS) >= 20 and set(ROWS) <= set(course_utils.__all__)


@pytest.mark.parametrize("name", sorted(ROWS))
def test_every_argument_of_an_exercise_is_in_its_row(name):
    obj = getattr(course_utils, name)
    signature = inspect.signature(obj.__init__ if inspect.isclass(obj) else obj)
    for parameter in signature.parameters.values():
        if parameter.name == "self" or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        row = ROWS[name]
        if parameter.default is inspect.Parameter.empty:
            assert re.search(rf"\b{parameter.name}\b", row), f"{name}: the contract's row lacks `{parameter.name}`"
            continue
        written = re.search(rf"\b{parameter.name}=(\(\)|[^,)`;]+)", row)  # the first: the signature's; () whole
        assert written, f"{name}: the contract's row lacks `{parameter.name}={parameter.default!r}`"
        assert ast.literal_eval(written.group(1)) == parameter.default, (
            f"{name}: the contract says {written.group(0)}, the code's default is {parameter.default!r}")


def test_a_mention_must_be_the_name_itself():
    assert mentioned("Encoder") and not mentioned("Encode") and not mentioned("no_such_name")


def test_the_readme_links_the_contract():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "(docs/course-contract.md)" in readme


def test_the_lists_of_named_mistakes_are_generated_from_the_tables():
    """The section between the markers is what `python -m course_tools.build --contract` writes."""
    from course_utils.checks import catalogue

    assert catalogue.BEGIN in CONTRACT and catalogue.END in CONTRACT
    assert catalogue.update_contract(CONTRACT) == CONTRACT, (
        "docs/course-contract.md's lists of named mistakes are stale: run `python -m course_tools.build --contract`")
    for table in catalogue.catalogues():
        assert f"**`{table.exercise}`**" in CONTRACT


def test_the_contract_command_finds_and_rewrites_a_stale_section(tmp_path, capsys):
    from course_tools import build
    from course_utils.checks import catalogue

    stale = tmp_path / "contract.md"
    start, end = CONTRACT.index(catalogue.BEGIN) + len(catalogue.BEGIN), CONTRACT.index(catalogue.END)
    stale.write_text(CONTRACT[:start] + "\n- an old list\n" + CONTRACT[end:], encoding="utf-8")
    build.CONTRACT, saved = stale, build.CONTRACT
    try:
        assert build.main(["--contract", "--check"]) == 1 and "Out of date" in capsys.readouterr().out
        assert "- an old list" in stale.read_text(encoding="utf-8")  # --check writes nothing
        assert build.main(["--contract"]) == 0
        assert stale.read_text(encoding="utf-8") == CONTRACT
        assert build.main(["--contract", "--check"]) == 0
    finally:
        build.CONTRACT = saved
