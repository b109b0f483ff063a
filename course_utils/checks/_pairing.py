"""One pairing engine: the student's module's parameters mapped onto the reference's.

A module's checker (04-09) builds the student's class and the reference with the same
arguments, gives the student's parameters random values and copies them into the
reference, so that the two must compute the same numbers. Parameters pair by the
contract's names (:func:`match_parameters`) or, for the ``Transformer`` whose part names
are the student's choice, by structure (:func:`pair_parameters`); :func:`load_reference`
pairs, names what does not fit (:func:`structure_failure`) and copies.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import torch
from torch import Tensor, nn

from ._core import call_student, describe_shape, fail

Pairs = list[tuple[Tensor, Tensor]]


def randomise_parameters(module: nn.Module) -> None:
    """Matrices ``~ N(0, 1/fan_in)``, biases ``~ N(0, 0.3^2)``, other vectors (norm scales)
    ``~ 1 + N(0, 0.3^2)``: fresh norms (ones, zeros) would hide a swapped scale and shift,
    and deep-copied layers would be indistinguishable."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn_like(p) / math.sqrt(p.shape[-1]))
            elif name.endswith("bias"):
                p.copy_(0.3 * torch.randn_like(p))
            else:
                p.copy_(1 + 0.3 * torch.randn_like(p))


def build_student(cls: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], shown: str) -> nn.Module:
    """``cls(*args, **kwargs)`` in eval mode with random parameters; ``shown`` is the
    arguments as the failure message writes them."""
    model = call_student(cls, *args, context=f"constructing {name}({shown})", **kwargs)
    if not isinstance(model, nn.Module):
        fail(f"{name}(...) should build an nn.Module; got {type(model).__name__}.", mistake="not a class")
    model.eval()
    randomise_parameters(model)
    return model


def match_parameters(
    student: nn.Module, ref: nn.Module, optional_missing: tuple[str, ...] = (), optional_extra: tuple[str, ...] = ()
) -> tuple[Pairs, list[str], list[str], list[tuple[str, str, str]]]:
    """Pair the student's parameters with the reference's by name: ``(pairs, missing,
    unexpected, wrong_shape)``, the (student, reference) pairs, the reference names the
    student lacks (except ``optional_missing`` prefixes), the student names the reference
    lacks (except ``optional_extra``; a paired parameter's other names are fine) and ``(name, student
    shape, reference shape)``. A bare nn.Embedding may stand for TokenEmbedding's."""
    s_params = dict(student.named_parameters(remove_duplicate=False))
    pairs, missing, wrong_shape = [], [], []
    used: set[int] = set()
    for name, rp in ref.named_parameters():
        bare = [name.removesuffix(".embedding.weight") + ".weight"] if name.endswith(".embedding.weight") else []
        key = next((a for a in [name, *bare] if a in s_params), None)
        if key is None:
            if not name.startswith(optional_missing):
                missing.append(name)
            continue
        sp = s_params[key]
        used.add(id(sp))
        if sp.shape != rp.shape:
            wrong_shape.append((name, describe_shape(sp), describe_shape(rp)))
            continue
        pairs.append((sp, rp))
    unexpected = [n for n, p in s_params.items() if id(p) not in used and not n.startswith(optional_extra)]
    return pairs, missing, unexpected, wrong_shape


def _fit_part(chunk: list[tuple[str, Tensor]], part: list[tuple[str, Tensor]]) -> Pairs | None:
    """A run of the student's parameters paired with one top-level part of the reference:
    by position when the shapes follow the same order, else by the reference's names."""
    if [p.shape for _, p in chunk] == [p.shape for _, p in part]:
        return [(sp, rp) for (_, sp), (_, rp) in zip(chunk, part)]
    by_name = dict(chunk)
    first = part[0][0]
    for prefix in {n[: -len(first)] for n in by_name if n.endswith("." + first)}:  # one part: one prefix
        hits = [by_name.get(prefix + r_name) for r_name, _ in part]
        if len(by_name) == len(part) and all(sp is not None and sp.shape == rp.shape for sp, (_, rp) in zip(hits, part)):  # noqa: E501
            return [(sp, rp) for sp, (_, rp) in zip(hits, part)]  # type: ignore[misc]
    return None


def pair_parameters(student: nn.Module, ref: nn.Module, by_structure: bool = False) -> Pairs | None:
    """``(student, reference)`` parameter pairs: by name when the names are the contract's,
    else (``by_structure``) the reference's top-level parts in some order, each matched by
    its shapes; ``None`` when the parameters do not correspond."""
    pairs, missing, unexpected, wrong_shape = match_parameters(student, ref)
    if not (missing or unexpected or wrong_shape):
        return pairs
    if not by_structure:
        return None
    theirs = list(student.named_parameters(remove_duplicate=False))  # tied weights count for each use
    parts = [p for p in (list(c.named_parameters()) for c in ref.children()) if p]
    if sum(len(p) for p in parts) != len(theirs):
        return None
    for order in itertools.permutations(parts):
        pairs, pos = [], 0
        for part in order:
            fit = _fit_part(theirs[pos : pos + len(part)], part)
            if fit is None:
                break
            pairs += fit
            pos += len(part)
        else:
            return pairs
    return None


def _some(names: list[str], k: int = 4) -> str:
    shown = ", ".join(f"`{n}`" for n in names[:k])
    return shown + (f" and {len(names) - k} more" if len(names) > k else "")


def structure_failure(what: str, student: nn.Module, missing: list[str], unexpected: list[str],
                      wrong_shape: list[tuple[str, str, str]], parts: dict[str, str]) -> None:
    """Fail, in plain words, when the student's parameters cannot be paired with the
    reference's by name (``parts``: the contract's submodules and what each one is)."""
    if wrong_shape:
        name, got, want = wrong_shape[0]
        fail(
            f"`{name}` has shape {got}, expected {want} (the reference {what} built with the "
            "same arguments). Check the order of the constructor's arguments and which size "
            "each submodule uses.",
            mistake="wrong parameter shape",
        )
    s_names = [n for n, _ in student.named_parameters(remove_duplicate=False)]
    contract = ", ".join(f"`{p}`" for p in parts)
    if missing:
        tops: dict[str, list[str]] = {}
        for n in missing:
            tops.setdefault(n.split(".")[0], []).append(n)
        lines = [
            (f"`{top}` lacks the parameters {_some(names)}" if any(n.startswith(top + ".") for n in s_names)
             else f"there is no submodule `{top}`") + (f" ({parts[top]})" if top in parts else "")
            for top, names in tops.items()
        ]
        text = f"in your {what}, " + "; ".join(lines) + "."
        if unexpected:
            text += f" Instead it has {_some(unexpected)}: did you name a submodule differently?"
        fail(
            text + f" The checker copies its random weights into the reference by name, so use "
            f"the exercise's submodules: {contract}.",
            mistake="missing submodule",
        )
    if unexpected:
        fail(
            f"your {what} has parameters that the reference does not: {_some(unexpected)}. "
            f"The exercise's submodules are {contract}; keep to them (no extra learnable weights).",
            mistake="unexpected parameters",
        )


def copy_parameters(pairs: Pairs) -> None:
    with torch.no_grad():
        for sp, rp in pairs:
            rp.copy_(sp)


def named(model: nn.Module, pairs: Pairs) -> list[tuple[str, Tensor, Tensor]]:
    """``pairs`` as ``(the student's name, student parameter, reference parameter)``, the
    form :func:`~._core.gradient_probe` names them in."""
    names: dict[int, str] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), name)
    return [(names.get(id(sp), "a parameter"), sp, rp) for sp, rp in pairs]


def load_reference(
    model: nn.Module, ref: nn.Module, what: str, parts: dict[str, str], optional_extra: tuple[str, ...] = ()
) -> list[tuple[str, Tensor, Tensor]]:
    """Pair ``model``'s parameters with ``ref``'s by name (else fail in :func:`structure_failure`'s
    words), copy them into ``ref`` and return the pairs, :func:`named`."""
    pairs, missing, unexpected, wrong_shape = match_parameters(model, ref, optional_extra=optional_extra)
    structure_failure(what, model, missing, unexpected, wrong_shape, parts)
    copy_parameters(pairs)
    return named(model, pairs)
