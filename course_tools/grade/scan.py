"""Stage: the static scan. Reads a cell without running it: the code as Python
(:func:`parse_cell`, IPython's magics turned into calls), the names it defines and imports, and
(:func:`scan_exercise_cell`) what an exercise cell does that graded code has no reason to do,
each with its line, and whether it takes the exercise's answer from ``course_utils``. A second
line of defence: the kernel side refuses such things as they happen."""

from __future__ import annotations

import ast
import functools
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path


@functools.lru_cache(maxsize=4096)  # load_course asks about each cell once per exercise
def parse_cell(source: str) -> ast.Module | None:
    """The cell's code as Python (IPython's magics turned into calls), or None (shared:
    callers only read the tree)."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        transformed = TransformerManager().transform_cell(source)
        # IPython drops leading blank lines: put them back, so that line numbers are the cell's
        blank = len(source.splitlines()) - len(source.lstrip("\n \t").splitlines())
        if not source.lstrip("\n \t"):
            blank = 0
        source = "\n" * max(0, blank - (len(transformed.splitlines()) - len(transformed.lstrip("\n \t").splitlines()))) + transformed  # noqa: E501
    except Exception:  # noqa: BLE001 - then parse it as it is
        pass
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError):
        return None


def defined_names(source: str) -> set[str]:
    """Names a cell defines at top level with ``def`` or ``class``."""
    tree = parse_cell(source)
    if tree is None:
        return set(re.findall(r"^(?:async\s+def|def|class)\s+(\w+)", source, re.MULTILINE))
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def import_aliases(tree: ast.AST) -> dict[str, str]:
    """``{bound name: dotted path}`` for the imports in ``tree`` (``import torch.nn as nn``
    -> ``nn: torch.nn``; ``from course_utils import causal_mask as cm`` -> ``cm:
    course_utils.causal_mask``)."""
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    return aliases


# Modules an exercise cell may import (anything under them); course_utils too, except
# its private modules.
ALLOWED_IMPORTS = {"torch", "math", "numpy", "typing", "dataclasses", "functools", "itertools", "collections",
                   "copy", "einops", "__future__", "course_utils", "operator", "abc", "enum", "numbers",
                   "warnings", "sys", "time"}  # sys: its risky parts (frames, modules, hooks) are flagged where used;
# time: a check that sleeps is stopped by the checkers' time limit
PROTECTED_ROOTS = {"torch", "course_utils", "builtins", "numpy", "math", "sys", "os", "IPython", "ipykernel"}
DANGEROUS_ATTRS = {
    "__globals__", "__closure__", "__code__", "__builtins__", "__dict__", "__subclasses__", "__bases__", "__mro__",
    "__getattribute__", "__import__", "__loader__", "__spec__", "__func__", "__self__", "__wrapped__",
    "__defaults__", "__kwdefaults__", "__traceback__", "f_back", "f_globals", "f_locals", "f_code", "f_builtins",
    "tb_frame", "tb_next", "gi_frame", "cr_frame", "ag_frame", "_getframe", "settrace", "setprofile",
    "addaudithook", "modules", "_current_frames", "_RESULT_LISTENERS", "_core",
}
DYNAMIC_CALLS = {"eval", "exec", "compile", "__import__", "globals", "locals", "vars", "breakpoint", "get_ipython",
                 "input", "exit", "quit"}
BASE_ALIASES = {"torch": "torch", "nn": "torch.nn", "F": "torch.nn.functional", "course_utils": "course_utils",
                "builtins": "builtins", "__builtins__": "builtins"}


def _dotted(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """``torch.testing.assert_close`` for an attribute chain whose root is an imported name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Subscript):
        return _dotted(node.value, aliases)
    if isinstance(node, ast.Name) and node.id in aliases:
        return ".".join([aliases[node.id], *reversed(parts)])
    return None


def _targets(node: ast.AST) -> Iterable[ast.AST]:
    if isinstance(node, (ast.Tuple, ast.List)):
        for elt in node.elts:
            yield from _targets(elt)
    elif isinstance(node, ast.Starred):
        yield from _targets(node.value)
    else:
        yield node


def _import_problem(module: str, names: list[str]) -> str | None:
    root = module.split(".")[0]
    if root not in ALLOWED_IMPORTS:
        return f"imports {module}"
    if root == "course_utils":
        if any(p.startswith("_") for p in module.split(".")[1:]):
            return f"imports {module} (the course's internals)"
        private = [n for n in names if n.startswith("_")]
        if private:
            return f"imports {module}.{private[0]} (the checkers' internals)"
    return None


@dataclass
class CellScan:
    flags: list[dict] = field(default_factory=list)  # {line, code, what}
    reference: str | None = None  # how the cell uses the reference (with its line), or None


def scan_exercise_cell(source: str, exercise: str, aliases: dict[str, str] | None = None) -> CellScan:
    """Read an exercise cell without running it: what it does that graded code has no
    reason to do (each with its line), and whether it takes the exercise's answer from
    ``course_utils``. ``aliases``: names the course's own cells import."""
    scan = CellScan()
    lines = source.splitlines()

    def code(n):
        return lines[n - 1].strip() if 0 < n <= len(lines) else ""

    def add(node_or_line, what):
        n = node_or_line if isinstance(node_or_line, int) else getattr(node_or_line, "lineno", 0)
        scan.flags.append({"line": n, "code": code(n), "what": what})

    for n, line in enumerate(lines, start=1):
        if re.match(r"\s*(%|!)", line):
            add(n, "runs an IPython magic or shell command")
    tree = parse_cell(source)
    if tree is None:
        return scan
    names = {**BASE_ALIASES, **(aliases or {}), **import_aliases(tree)}

    def protected(node):
        dotted = _dotted(node, names)
        return dotted if dotted and dotted.split(".")[0] in PROTECTED_ROOTS else None

    def is_reference(dotted):
        return dotted and dotted.split(".")[0] == "course_utils" and dotted.split(".")[-1] == exercise

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                problem = _import_problem(a.name, [])
                if problem:
                    add(node, problem)
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            problem = _import_problem(module, [a.name for a in node.names]) if not node.level else \
                f"imports {module} (a relative import)"
            if problem:
                add(node, problem)
            if module.split(".")[0] == "course_utils" and any(a.name == exercise for a in node.names):
                scan.reference = scan.reference or f"line {node.lineno}: `{code(node.lineno)}`"
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for target in (t for top in targets for t in _targets(top)):
                if isinstance(target, (ast.Attribute, ast.Subscript)):
                    dotted = protected(target)
                    if dotted:
                        add(node, f"assigns to {dotted}")
                elif isinstance(target, ast.Name) and target.id in ("__import__", "__builtins__", "get_ipython"):
                    add(node, f"redefines {target.id}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            fn, args = node.func.id, node.args
            if fn in DYNAMIC_CALLS:
                add(node, f"calls {fn}()")
            elif fn in ("setattr", "delattr") and args:
                target = protected(args[0])
                if target:
                    add(node, f"{fn} on {target}")
                elif len(args) > 1 and not isinstance(args[1], ast.Constant):
                    add(node, f"{fn} with a computed name")
            elif fn in ("getattr", "hasattr") and len(args) > 1 and isinstance(args[1], ast.Constant):
                attr = args[1].value
                if attr in DANGEROUS_ATTRS:
                    add(node, f"reads .{attr}")
                if is_reference(f"{_dotted(args[0], names)}.{attr}"):
                    scan.reference = scan.reference or f"line {node.lineno}: `{code(node.lineno)}`"
            elif fn == "open":
                path = args[0] if args else None
                if not (isinstance(path, ast.Constant) and isinstance(path.value, str)
                        and not os.path.isabs(path.value) and ".." not in Path(path.value).parts):
                    add(node, "opens a file outside its folder (or at a computed path)")
        elif isinstance(node, ast.Attribute):
            if node.attr in DANGEROUS_ATTRS:
                add(node, f"uses .{node.attr}")
            dotted = _dotted(node, names)
            if dotted and dotted.split(".")[0] == "course_utils" and any(
                    p.startswith("_") and not p.startswith("__") for p in dotted.split(".")[1:]):
                add(node, f"touches {dotted} (the course's internals)")
            if is_reference(dotted) and not isinstance(getattr(node, "ctx", None), ast.Store):
                scan.reference = scan.reference or f"line {node.lineno}: `{code(node.lineno)}`"
        elif isinstance(node, ast.Name) and node.id in ("__builtins__", "_RESULT_LISTENERS"):
            add(node, f"uses {node.id}")
    seen, unique = set(), []
    for f in scan.flags:  # one finding per line and kind
        if (f["line"], f["what"]) not in seen:
            seen.add((f["line"], f["what"]))
            unique.append(f)
    scan.flags = sorted(unique, key=lambda f: f["line"])
    return scan


