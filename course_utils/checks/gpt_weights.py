"""Checker for notebook 09's last exercise: ``load_gpt2_weights(model, state_dict)``, GPT-2's
checkpoint layout (Hugging Face ``GPT2LMHeadModel``) copied into the course's ``GPT``.

The checker builds a small random ``GPT2Config`` with ``transformers`` (offline: nothing is
downloaded), randomises every weight of the ``GPT2LMHeadModel`` (biases and norms too, so that
one forgotten shows), hands a copy of its state dict to the student's function with a course
``GPT`` of the same sizes, and compares each parameter with the mapping
(:func:`course_utils.gpt_weights.convert_gpt2_state_dict`), then the logits and greedy tokens with
``GPT2LMHeadModel``'s. Where ``transformers`` is not importable the state dict is a random
course ``GPT`` written in GPT-2's layout (:func:`course_utils.gpt_weights.gpt2_state_dict`) and the
logits are that model's; the verdict says which. Last, a model with a shorter context than
the checkpoint's must be refused (an error), not loaded with the position table cut.
The exercise's mistakes are one table (:mod:`.catalogue`), ``LOAD``, in the order the check tries
them; ``MISTAKES`` lists their names, and tests/test_checks_gpt_weights.py pins each one on 20
seeds.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch
from torch import Tensor, nn

from ..generation import generate
from ..gpt import GPT
from ..gpt_weights import convert_gpt2_state_dict, gpt2_state_dict
from ._core import (
    StudentError,
    call_student,
    checker,
    describe_shape,
    expect_close,
    matches,
    raised,
    randint,
    register_hints,
    require_function,
    student_line,
)
from ._pairing import randomise_parameters
from .catalogue import Catalogue, Entry, Output, Probe

__all__ = ["check_load_gpt2_weights"]

_FIX_COPY = ("with torch.no_grad(): model.blocks[i].self_attn.w_q.weight.copy_(w_q.t()), and so on for each "
             "parameter")


@dataclass
class _Source:
    state: dict[str, Tensor]  # GPT2LMHeadModel.state_dict()'s layout
    logits: Callable[[Tensor], Tensor]  # tokens (B, L) -> (B, L, V)
    against: str  # what the verdict says it compared with


def _dims() -> tuple[int, int, int, int, int, int]:
    """``V, D, H, N, d_ff, P`` with ``D, 3D, d_ff, V, P`` all different (a size in an error
    message then names the tensor)."""
    while True:
        H, d_k, N = randint(2, 3), randint(3, 5), randint(2, 3)
        D, d_ff, V, P = H * d_k, randint(16, 30), randint(31, 44), randint(7, 12)
        if len({D, 3 * D, d_ff, V, P}) == 5:
            return V, D, H, N, d_ff, P


@contextmanager
def _quiet(transformers: Any) -> Iterator[None]:
    """transformers' advice (an attention mask, generation settings) kept out of the verdict's output."""
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        yield
    finally:
        transformers.logging.set_verbosity(verbosity)


def _hugging_face(V: int, D: int, H: int, N: int, d_ff: int, P: int) -> _Source | None:
    try:
        import transformers
    except ImportError:
        return None
    with _quiet(transformers):
        config = transformers.GPT2Config(vocab_size=V, n_positions=P, n_embd=D, n_layer=N, n_head=H, n_inner=d_ff,
                                         activation_function="gelu_new", layer_norm_epsilon=1e-5, resid_pdrop=0.0,
                                         embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0,
                                         pad_token_id=0)
        hf = transformers.GPT2LMHeadModel(config).eval()
    randomise_parameters(hf)  # GPT-2 starts its biases at 0 and its norms at 1: a forgotten one would not show
    state = {name: t.detach().clone() for name, t in hf.state_dict().items()}

    def logits(tokens: Tensor) -> Tensor:
        with torch.no_grad(), _quiet(transformers):
            return hf(tokens).logits  # (B, L, V)

    return _Source(state, logits, "Hugging Face's GPT2LMHeadModel of a random GPT2Config")


def _course_source(V: int, D: int, H: int, N: int, d_ff: int, P: int) -> _Source:
    source = GPT(V, D, H, N, d_ff, 0.0, P).eval()
    randomise_parameters(source)
    state = {name: t.clone() for name, t in gpt2_state_dict(source).items()}

    def logits(tokens: Tensor) -> Tensor:
        with torch.no_grad():
            return source(tokens)  # (B, L, V)

    return _Source(state, logits, "a random course GPT written in GPT-2's layout (transformers is not installed, "
                                  "so not Hugging Face's model itself)")


def _source(*dims: int) -> _Source:
    return _hugging_face(*dims) or _course_source(*dims)


def _call_facts(exc: BaseException, state: dict[str, Tensor], D: int, d_ff: int) -> SimpleNamespace:
    text = str(exc)
    key = exc.args[0] if isinstance(exc, KeyError) and exc.args and isinstance(exc.args[0], str) else ""
    shape_error = isinstance(exc, RuntimeError) and ("size" in text or "shape" in text)
    return SimpleNamespace(exc=exc, text=text, key=key, D=D, d_ff=d_ff, shape_error=shape_error,
                           sizes={int(n) for n in re.findall(r"\d+", text)} if shape_error else set(),
                           prefixed="transformer." + key in state)


def _split_wrongly(c: Any) -> bool:
    """c_attn split along the wrong axis or into pieces of the wrong size (trial r09): fewer or more
    than three pieces (``w.split(D, dim=0)`` on ``(D, 3D)``, ``w.t().split(D, dim=1)``), a bias split
    along an axis it lacks, or pieces that do not fit ``(D, D)`` (``w.chunk(3, dim=0)``, ``w.split(3,
    dim=1)``): their sizes, ``D`` against a third of ``D`` or 3, show in the copy's error."""
    exc, text, D = c.exc, c.text, c.D
    line = student_line(exc) or ""
    splitting = any(word in line for word in ("split", "chunk", "unbind", "c_attn"))
    pieces = {len(t) for t in torch.arange(D).chunk(3)} | {3}  # the sizes of a wrong axis's or width's pieces
    pair = re.search(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\)", text)
    sizes = {int(pair[1]), int(pair[2])} if pair else set()
    unpacks = ": for " not in line and not line.startswith("for ")  # a loop's own tuples: not this
    return bool((isinstance(exc, ValueError) and unpacks and re.search(r"values to unpack \(expected 3\b", text))
                or (isinstance(exc, IndexError) and (splitting or "range of [-1, 0]" in text))  # the 1-D bias, dim=1
                or (isinstance(exc, RuntimeError) and D in sizes and len(sizes) == 2 and sizes - {D} <= pieces))


def _gpt2_name(name: str) -> str:
    """Where a course parameter comes from in GPT-2's layout, for the messages."""
    parts = {"token_embedding.weight": "transformer.wte.weight", "position_embedding.weight": "transformer.wpe.weight",
             "norm.weight": "transformer.ln_f.weight", "norm.bias": "transformer.ln_f.bias"}
    if name in parts:
        return parts[name]
    _, i, rest = name.split(".", 2)
    for ours, theirs in (("self_attn.w_q", "attn.c_attn (its first D outputs)"),
                         ("self_attn.w_k", "attn.c_attn (its second D outputs)"),
                         ("self_attn.w_v", "attn.c_attn (its last D outputs)"), ("self_attn.w_o", "attn.c_proj"),
                         ("feed_forward.linear1", "mlp.c_fc"), ("feed_forward.linear2", "mlp.c_proj"),
                         ("norm1", "ln_1"), ("norm2", "ln_2")):
        if rest.startswith(ours + "."):
            return f"transformer.h.{i}.{theirs}.{rest.rsplit('.', 1)[1]}"
    return name


def _same(a: Tensor, b: Tensor) -> bool:
    return matches(a, b, atol=1e-6, rtol=1e-5)


def _transposed_only(c: Any) -> bool:
    got, want = c.got, c.want
    return got.dim() == 2 and got.shape == want.t().shape and _same(got, want.t()) and got.shape != want.shape


def _rows_cut(c: Any) -> dict[str, int] | None:
    if c.name != "position_embedding.weight" or c.got.shape != c.want.shape:
        return None
    rows = (c.got - c.want).abs().amax(dim=1) <= 1e-6  # (P,): the rows copied
    return dict(kept=int(rows.int().argmin()), P=c.want.size(0)) if bool(rows[0]) and not bool(rows.all()) else None


def _is_norm(name: str) -> bool:
    return ".norm" in name or name.startswith("norm.")


def _c_attn_part(c: Any) -> tuple[str, str] | None:
    """``(block, suffix)`` when ``c.name`` is one of w_q, w_k, w_v (weight or bias), else None."""
    block, _, rest = c.name.rpartition(".self_attn.")
    return (block, rest[3:]) if block and rest[:3] in ("w_q", "w_k", "w_v") and rest[3:] in (".weight", ".bias") \
        else None


def _interleaved(c: Any) -> bool:
    """c_attn's outputs rebuilt in GPT-2's order, (3D, D) or (3D,): an interleaved split takes every third row."""
    part = _c_attn_part(c)
    if part is None:
        return False
    block, suffix = part
    fused = torch.cat([c.expected[f"{block}.self_attn.{w}{suffix}"] for w in ("w_q", "w_k", "w_v")])
    return any(_same(c.got, fused[i::3]) or (c.got.dim() == 2 and _same(c.got, fused[i::3].t())) for i in range(3))


def _other_part(c: Any) -> dict[str, str] | None:
    part = _c_attn_part(c)
    if part is None:
        return None
    block, suffix = part
    for other in ("w_q", "w_k", "w_v"):
        theirs = c.expected[f"{block}.self_attn.{other}{suffix}"]
        if other != c.name.rpartition(".self_attn.")[2][:3] and (
                _same(c.got, theirs) or (c.got.dim() == 2 and _same(c.got, theirs.t()))):
            return dict(other=other)
    return None


def _other_norm(c: Any) -> bool:
    return any(mine in c.name and _same(c.got, c.expected[c.name.replace(mine, other)])
               for mine, other in ((".norm1.", ".norm2."), (".norm2.", ".norm1.")))


LOAD = Catalogue("load_gpt2_weights", "09", [
    Entry("not a function", None, Probe("require_function")),
    # the call raised (stage "call")
    Entry("copy_ without no_grad",
          "copy_ into a parameter outside torch.no_grad() (autograd refuses the in-place copy)",
          Output(lambda c: isinstance(c.exc, RuntimeError) and "requires grad" in c.text and "in-place" in c.text,
                 "call"),
          "your function copies into the model's parameters while autograd is watching them: {raised}. A parameter "
          "is a leaf that requires grad, so an in-place copy must run inside `with torch.no_grad():` (" + _FIX_COPY
          + ")."),
    Entry("wrong key name",
          "a GPT-2 key looked up under a name the state dict lacks (the transformer. prefix left out)",
          Output(lambda c: (c.key.startswith(("transformer.", "h.", "wte.", "wpe.", "ln_f.", "lm_head."))
                            or c.key.endswith((".weight", ".bias"))) and dict(
              key=repr(c.key), prefixed=f" (it is 'transformer.{c.key}': GPT2LMHeadModel puts every key of the "
              "network under 'transformer.')" if c.prefixed else ""), "call"),
          "your function looks up the key {key}, which GPT-2's state dict does not have{prefixed}. Its keys are "
          "transformer.wte.weight, transformer.wpe.weight, transformer.h.{{i}}.ln_1.weight, "
          "transformer.h.{{i}}.attn.c_attn.weight, ..., transformer.ln_f.bias, lm_head.weight: "
          "print(list(state_dict)) shows them all."),
    Entry("c_attn split wrongly",
          "the fused c_attn split along the wrong axis or into pieces of the wrong size (not qkv.split(D, dim=-1))",
          Output(_split_wrongly, "call"),
          "c_attn was split along the wrong axis or into pieces of the wrong size: {raised}. Its weight is ({D}, "
          "{D3}), GPT-2's (in, out), and its bias ({D3},): the three blocks [W_q | W_k | W_v] lie side by side along "
          "the last axis, D outputs each. Split there into pieces of D: `q, k, v = qkv.split(D, dim=-1)` for the "
          "weight (dim=-1 is its dim=1) and for the bias, then transpose each weight (`q.t()`)."),
    Entry("c_attn not split",
          "the fused c_attn (D, 3D) or its bias copied whole instead of split into w_q, w_k, w_v",
          Output(lambda c: c.shape_error and 3 * c.D in c.sizes, "call"),
          "your function copies c_attn with all its {D3} outputs into one projection (not split, or split along the "
          "wrong axis): {raised}. c_attn's weight ({D}, {D3}) holds three (in, out) blocks side by side, [W_q | W_k | "
          "W_v], and its bias ({D3},) the three biases: split both into three along the output axis (weight.split(D, "
          "dim=1), bias.split(D)) and transpose each weight."),
    Entry("Conv1D weight not transposed",
          "a GPT-2 Conv1D weight (in, out) copied into nn.Linear's (out, in) without .t()",
          Output(lambda c: c.shape_error and {c.D, c.d_ff} <= c.sizes, "call"),
          "a shape mismatch between GPT-2's weight and your model's: {raised}. GPT-2's Conv1D layers store their "
          "weight as (in, out) and compute x @ W + b; nn.Linear stores (out, in) and computes x @ W.T + b: transpose "
          "every Conv1D weight on the way in, w.t() (c_fc is ({D}, {d_ff}), linear1.weight ({d_ff}, {D}))."),
    # the state dict given, the tie, the parameters (stages "state", "tie", "params")
    Entry("input modified in place", None, Output(lambda changed: bool(changed) and dict(key=changed[0]), "state"),
          "your function changed the state dict it was given (`{key}`): transpose with w.t() (a new view), never "
          "w.t_() or another in-place operation, and leave its keys as they are (no pop). The caller still needs it, "
          "for a second model for instance."),
    Entry("head untied by loading",
          "the loader replaced a Parameter, so lm_head.weight is no longer token_embedding.weight",
          Output(lambda untied: untied, "tie"),
          "after loading, lm_head.weight is no longer token_embedding.weight: your function replaced a Parameter "
          "(nn.Parameter(...), an assignment to .weight, or load_state_dict(..., assign=True)), so the output layer "
          "and the embedding are two tensors now and training would pull them apart. Copy into the existing "
          "Parameters instead: with torch.no_grad(): model.token_embedding.weight.copy_(wte); lm_head follows, it is "
          "the same tensor."),
    Entry("missing submodule", None, Output(lambda c: bool(c.missing) and dict(name=c.missing[0]), "params"),
          "after loading, the model has no parameter `{name}`: copy into the model's own Parameters, leaving its "
          "modules as they are."),
    Entry("nothing copied",
          "the loader leaves the model it is given unchanged (e.g. builds and returns another)",
          Output(lambda c: bool(c.wrong) and c.untouched, "params"),
          "nothing was copied: every parameter of the model still holds its own values. The function must copy into "
          "the model it is given, in place (" + _FIX_COPY + "); a value it returns is not used."),
    # the first parameter that does not hold GPT-2's numbers: the likeliest reason (stage "parameter")
    Entry("Conv1D weight not transposed", None, Output(_transposed_only, "parameter"),
          "{where} has GPT-2's values but the shape {shape}, the transpose of the model's {want}: GPT-2's Conv1D "
          "stores (in, out), nn.Linear (out, in). Transpose on the way in (w.t()) and copy into the existing "
          "Parameter, " + _FIX_COPY + "."),
    Entry("wrong parameter shape", None, Output(lambda c: c.got.shape != c.want.shape, "parameter"),
          "{where} has shape {shape} after loading; the model's is {want}. Copy into the existing Parameters ("
          + _FIX_COPY + ") rather than replacing them."),
    Entry("position table not copied", "GPT-2's position table (wpe) is not copied",
          Output(lambda c: c.name == "position_embedding.weight" and _same(c.got, c.before), "parameter"),
          "the position table was not copied: position_embedding.weight still holds the model's own random values. "
          "Copy GPT-2's transformer.wpe.weight, every row (one per position)."),
    Entry("position table cut",
          "only part of GPT-2's position table is copied, or a shorter model is loaded silently",
          Output(_rows_cut, "parameter"),
          "only the first {kept} of the {P} rows of GPT-2's position table were copied: positions {kept} and later "
          "keep random vectors. Copy the whole table, transformer.wpe.weight {want}."),
    Entry("biases not copied", "GPT-2's linear biases are not copied",
          Output(lambda c: _same(c.got, c.before) and c.name.endswith(".bias") and not _is_norm(c.name), "parameter"),
          "{where} still holds the model's own values: the biases were not copied. Every GPT-2 layer has a bias "
          "(c_attn's split into three like its weight, c_proj, c_fc): copy each into the Linear's bias."),
    Entry("norms not copied",
          "GPT-2's LayerNorm weights and biases (ln_1, ln_2, ln_f) are not copied",
          Output(lambda c: _same(c.got, c.before) and _is_norm(c.name), "parameter"),
          "{where} still holds the model's own values: GPT-2's LayerNorms (ln_1, ln_2 of every block and the final "
          "ln_f, weight and bias) were not copied into norm1, norm2 and norm."),
    Entry("parameter not copied",
          "a parameter keeps the model's own values after loading",
          Output(lambda c: _same(c.got, c.before), "parameter"),
          "{where} still holds the model's own values: it was not copied."),
    Entry("Conv1D weight not transposed", None,
          Output(lambda c: c.got.dim() == 2 and _same(c.got, c.want.t()), "parameter"),
          "{where} holds GPT-2's matrix untransposed: GPT-2's Conv1D stores (in, out) and computes x @ W + b, "
          "nn.Linear stores (out, in) and computes x @ W.T + b, so a square matrix fits either way but multiplies "
          "wrongly. Transpose every Conv1D weight on the way in: w.t()."),
    Entry("c_attn split interleaved",
          "w_q, w_k, w_v take every third column of c_attn (w[:, 0::3], a (D, D, 3) reshape) instead of three "
          "consecutive blocks",
          Output(_interleaved, "parameter"),
          "{where} holds every third output of c_attn: the split is interleaved (w[:, 0::3], or c_attn reshaped as "
          "(D, D, 3)). c_attn's {D3} outputs are three consecutive blocks of D, [q | k | v]: w_q takes columns 0 .. "
          "D-1, w_k columns D .. 2D-1, w_v the last D: q, k, v = weight.split(D, dim=1) (or a reshape to (D, 3, D)), "
          "each transposed, and bias.split(D)."),
    Entry("c_attn split in the wrong order",
          "w_q, w_k, w_v take c_attn's [q | k | v] blocks in another order",
          Output(_other_part, "parameter"),
          "{where} holds the {other} part of c_attn: c_attn's outputs are [q | k | v] in this order, so w_q takes "
          "columns 0 .. D-1, w_k columns D .. 2D-1, w_v the last D (q, k, v = weight.split(D, dim=1), and the bias "
          "likewise)."),
    Entry("norms swapped", None, Output(_other_norm, "parameter"),
          "{where} holds the other norm of the block: ln_1 goes before the attention (norm1), ln_2 before the "
          "feed-forward (norm2)."),
    Entry("values differ", None, Output(lambda c: dict(diff=f"{float((c.got - c.want).abs().max()):.3g}"), "parameter"),
          "{where} does not hold GPT-2's numbers (largest difference {diff})."),
    # a model with room for fewer positions than the checkpoint (stage "shorter")
    Entry("position table cut", None, Output(lambda cut: cut, "shorter"),
          "given a model with max_len={short} and a checkpoint with {P} positions, your function loaded it without a "
          "word, keeping the first {short} rows of the position table: the model silently differs from the "
          "checkpoint. Copy the whole table, `param.copy_(sd['transformer.wpe.weight'])`, without slicing it to the "
          "model's size: copy_ raises when the shapes differ, which is what we want (a ValueError of your own naming "
          "the parameter and both shapes does as well)."),
])


def _call(fn: Callable[..., Any], model: nn.Module, state: dict[str, Tensor], case: str, D: int, d_ff: int) -> None:
    """The student's function; the errors students meet named here rather than shown raw."""
    try:
        call_student(fn, model, state, context=f"calling load_gpt2_weights(model, state_dict) ({case})")
    except StudentError as err:
        LOAD.detect("call", _call_facts(err.exc, state, D, d_ff), raised=raised(err.exc, inline=True), D=D,
                    D3=3 * D, d_ff=d_ff)
        raise


def _check_parameters(model: nn.Module, before: dict[str, Tensor], expected: dict[str, Tensor], D: int) -> None:
    params = dict(model.named_parameters())
    missing = [name for name in expected if name not in params]
    wrong = [] if missing else [name for name in expected if not _same(params[name].detach(), expected[name])]
    untouched = bool(wrong) and all(params[n].shape == before[n].shape and _same(params[n].detach(), before[n])
                                    for n in expected)
    LOAD.detect("params", SimpleNamespace(missing=missing, wrong=wrong, untouched=untouched))
    if not wrong:
        return
    name = wrong[0]
    got, want = params[name].detach(), expected[name]
    LOAD.detect("parameter", SimpleNamespace(name=name, got=got, want=want, before=before[name], expected=expected),
                where=f"`{name}` (from GPT-2's {_gpt2_name(name)})", shape=describe_shape(got),
                want=describe_shape(want), D3=3 * D)


def _check_state_unchanged(given: Mapping[str, Tensor], original: Mapping[str, Tensor]) -> None:
    changed = sorted(set(original) ^ set(given)) or [k for k in original if not torch.equal(given[k], original[k])]
    LOAD.detect("state", changed)


def _greedy(logits: Callable[[Tensor], Tensor], tokens: Tensor, steps: int) -> Tensor:
    for _ in range(steps):
        tokens = torch.cat([tokens, logits(tokens)[:, -1].argmax(-1, keepdim=True)], dim=1)  # (B, T + 1)
    return tokens


def _shorter_context(fn: Callable[..., Any], source: _Source, V: int, D: int, H: int, N: int, d_ff: int,
                     P: int) -> None:
    """A model with room for fewer positions than the checkpoint has must be refused (or get
    the whole table), not loaded with the table cut to its size."""
    model = GPT(V, D, H, N, d_ff, 0.0, P - 2).eval()
    randomise_parameters(model)
    state = {name: t.clone() for name, t in source.state.items()}
    try:
        call_student(fn, model, state, context="")
    except StudentError:
        return  # refused: right (ValueError, or the RuntimeError of copy_ / load_state_dict)
    table = getattr(getattr(model, "position_embedding", None), "weight", None)
    if isinstance(table, Tensor) and table.dim() == 2 and table.size(0) >= P:
        return  # the whole table went in (a .data assignment resizes it): nothing of the checkpoint is lost
    LOAD.detect("shorter", True, short=P - 2, P=P)


@checker("load_gpt2_weights")
def check_load_gpt2_weights(fn: Any) -> str:
    require_function(fn, "load_gpt2_weights")
    V, D, H, N, d_ff, P = _dims()
    source = _source(V, D, H, N, d_ff, P)
    given = {name: t.clone() for name, t in source.state.items()}
    model = GPT(V, D, H, N, d_ff, 0.0, P).eval()
    randomise_parameters(model)  # other random values than the checkpoint's
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    case = f"vocab_size={V}, d_model={D}, num_heads={H}, num_layers={N}, d_ff={d_ff}, max_len={P}"
    _call(fn, model, given, case, D, d_ff)
    _check_state_unchanged(given, source.state)
    head, embedding = getattr(model, "lm_head", None), getattr(model, "token_embedding", None)
    LOAD.detect("tie", getattr(head, "weight", None) is not getattr(embedding, "weight", None))
    _check_parameters(model, before, convert_gpt2_state_dict(source.state), D)
    B = randint(2, 3)
    tokens = torch.randint(0, V, (B, P))  # (B, P): every position of the table
    with torch.no_grad():
        expect_close("logits", model(tokens), source.logits(tokens), atol=1e-4, rtol=1e-4,
                     case=f"tokens ({B}, {P}), {case}")
    prompt = tokens[:, : P - 3]  # (B, P - 3)
    expect_close("greedy tokens", generate(model, prompt, 3, temperature=0), _greedy(source.logits, prompt, 3),
                 case=f"prompt ({B}, {P - 3}), 3 new tokens")
    _shorter_context(fn, source, V, D, H, N, d_ff, P)
    # the notebook stores this line (nbval): change it together with solutions/09
    return (f"Conv1D weights transposed, c_attn split q, k, v, head still tied, every position; the logits and greedy "
            f"tokens of {source.against}")


CATALOGUES = (LOAD,)
MISTAKES: dict[str, list[str]] = {table.exercise: table.names() for table in CATALOGUES}  # generated


register_hints("load_gpt2_weights", [
    "print({k: tuple(v.shape) for k, v in state_dict.items()}) and compare with the table above: which of GPT-2's "
    "tensors goes into which of your parameters, and which ones need a transpose?",
    "Work inside `with torch.no_grad():` and copy into the existing parameters with .copy_(...) (never assign new "
    "ones: the output layer must stay tied). c_attn: q, k, v = weight.split(D, dim=1), each transposed.",
    "Per block i, with p = f'transformer.h.{i}.': w_q/w_k/w_v from p + 'attn.c_attn', w_o from p + 'attn.c_proj', "
    "linear1/linear2 from p + 'mlp.c_fc' / 'mlp.c_proj' (weights .t()), norm1/norm2 from ln_1/ln_2; then wte, wpe "
    "and ln_f outside the loop.",
])
