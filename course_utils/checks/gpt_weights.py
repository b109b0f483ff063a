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
The mistake names are those of ``_mistakes.MISTAKES``; tests/test_checks_gpt_weights.py pins
each one on 20 seeds.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
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
    fail,
    matches,
    raised,
    randint,
    register_hints,
    require_function,
    student_line,
)
from ._pairing import randomise_parameters

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


def _call(fn: Callable[..., Any], model: nn.Module, state: dict[str, Tensor], case: str, D: int, d_ff: int) -> None:
    """The student's function; the errors students meet named here rather than shown raw."""
    try:
        call_student(fn, model, state, context=f"calling load_gpt2_weights(model, state_dict) ({case})")
    except StudentError as err:
        exc, text = err.exc, str(err.exc)
        if isinstance(exc, RuntimeError) and "requires grad" in text and "in-place" in text:
            fail(f"your function copies into the model's parameters while autograd is watching them: "
                 f"{raised(exc, inline=True)}. A parameter is a leaf that requires grad, so an in-place copy must "
                 f"run inside `with torch.no_grad():` ({_FIX_COPY}).", mistake="copy_ without no_grad")
        key = exc.args[0] if isinstance(exc, KeyError) and exc.args and isinstance(exc.args[0], str) else ""
        gpt2_like = key.startswith(("transformer.", "h.", "wte.", "wpe.", "ln_f.", "lm_head."))
        if gpt2_like or key.endswith((".weight", ".bias")):
            prefixed = "transformer." + key in state
            fail(f"your function looks up the key {key!r}, which GPT-2's state dict does not have"
                 + (f" (it is 'transformer.{key}': GPT2LMHeadModel puts every key of the network under "
                    "'transformer.')" if prefixed else "")
                 + ". Its keys are transformer.wte.weight, transformer.wpe.weight, transformer.h.{i}.ln_1.weight, "
                 "transformer.h.{i}.attn.c_attn.weight, ..., transformer.ln_f.bias, lm_head.weight: "
                 "print(list(state_dict)) shows them all.", mistake="wrong key name")
        _split_wrongly(exc, text, D)
        if isinstance(exc, RuntimeError) and ("size" in text or "shape" in text):
            sizes = {int(n) for n in re.findall(r"\d+", text)}
            if 3 * D in sizes:
                fail(f"your function copies c_attn with all its {3 * D} outputs into one projection (not split, or "
                     f"split along the wrong axis): {raised(exc, inline=True)}. c_attn's weight ({D}, {3 * D}) holds "
                     f"three (in, out) blocks side by side, [W_q | W_k | W_v], and its bias ({3 * D},) the three "
                     f"biases: split both into three along the output axis (weight.split(D, dim=1), bias.split(D)) "
                     "and transpose each weight.", mistake="c_attn not split")
            if {D, d_ff} <= sizes:
                fail(f"a shape mismatch between GPT-2's weight and your model's: {raised(exc, inline=True)}. GPT-2's "
                     "Conv1D layers store their weight as (in, out) and compute x @ W + b; nn.Linear stores (out, in) "
                     "and computes x @ W.T + b: transpose every Conv1D weight on the way in, w.t() (c_fc is "
                     f"({D}, {d_ff}), linear1.weight ({d_ff}, {D})).", mistake="Conv1D weight not transposed")
        raise


def _split_wrongly(exc: BaseException, text: str, D: int) -> None:
    """c_attn split along the wrong axis or into pieces of the wrong size (trial r09): fewer or more
    than three pieces (``w.split(D, dim=0)`` on ``(D, 3D)``, ``w.t().split(D, dim=1)``), a bias split
    along an axis it lacks, or pieces that do not fit ``(D, D)`` (``w.chunk(3, dim=0)``, ``w.split(3,
    dim=1)``): their sizes, ``D`` against a third of ``D`` or 3, show in the copy's error."""
    line = student_line(exc) or ""
    splitting = any(word in line for word in ("split", "chunk", "unbind", "c_attn"))
    pieces = {len(c) for c in torch.arange(D).chunk(3)} | {3}  # the sizes of a wrong axis's or width's pieces
    pair = re.search(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\)", text)
    sizes = {int(pair[1]), int(pair[2])} if pair else set()
    unpacks = ": for " not in line and not line.startswith("for ")  # a loop's own tuples: not this
    if not ((isinstance(exc, ValueError) and unpacks and re.search(r"values to unpack \(expected 3\b", text))
            or (isinstance(exc, IndexError) and (splitting or "range of [-1, 0]" in text))  # the 1-D bias, dim=1
            or (isinstance(exc, RuntimeError) and D in sizes and len(sizes) == 2 and sizes - {D} <= pieces)):
        return
    fail(f"c_attn was split along the wrong axis or into pieces of the wrong size: {raised(exc, inline=True)}. "
         f"Its weight is ({D}, {3 * D}), GPT-2's (in, out), and its bias ({3 * D},): the three blocks [W_q | W_k | "
         "W_v] lie side by side along the last axis, D outputs each. Split there into pieces of D: `q, k, v = "
         "qkv.split(D, dim=-1)` for the weight (dim=-1 is its dim=1) and for the bias, then transpose each weight "
         "(`q.t()`).", mistake="c_attn split wrongly")


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


def _diagnose(name: str, got: Tensor, expected: dict[str, Tensor], before: Tensor, D: int) -> None:
    """Fail with the likeliest reason why parameter ``name`` does not hold GPT-2's numbers."""
    want, where = expected[name], f"`{name}` (from GPT-2's {_gpt2_name(name)})"
    if got.dim() == 2 and got.shape == want.t().shape and _same(got, want.t()) and got.shape != want.shape:
        fail(f"{where} has GPT-2's values but the shape {describe_shape(got)}, the transpose of the model's "
             f"{describe_shape(want)}: GPT-2's Conv1D stores (in, out), nn.Linear (out, in). Transpose on the way in "
             f"(w.t()) and copy into the existing Parameter, {_FIX_COPY}.", mistake="Conv1D weight not transposed")
    if got.shape != want.shape:
        fail(f"{where} has shape {describe_shape(got)} after loading; the model's is {describe_shape(want)}. Copy "
             f"into the existing Parameters ({_FIX_COPY}) rather than replacing them.", mistake="wrong parameter shape")
    if name == "position_embedding.weight":
        rows = (got - want).abs().amax(dim=1) <= 1e-6  # (P,): the rows copied
        if _same(got, before):
            fail("the position table was not copied: position_embedding.weight still holds the model's own random "
                 "values. Copy GPT-2's transformer.wpe.weight, every row (one per position).",
                 mistake="position table not copied")
        if bool(rows[0]) and not bool(rows.all()):
            kept = int(rows.int().argmin())
            fail(f"only the first {kept} of the {want.size(0)} rows of GPT-2's position table were copied: positions "
                 f"{kept} and later keep random vectors. Copy the whole table, transformer.wpe.weight "
                 f"{describe_shape(want)}.", mistake="position table cut")
    if _same(got, before):
        if name.endswith(".bias") and ".norm" not in name and not name.startswith("norm."):
            fail(f"{where} still holds the model's own values: the biases were not copied. Every GPT-2 layer has a "
                 "bias (c_attn's split into three like its weight, c_proj, c_fc): copy each into the Linear's bias.",
                 mistake="biases not copied")
        if ".norm" in name or name.startswith("norm."):
            fail(f"{where} still holds the model's own values: GPT-2's LayerNorms (ln_1, ln_2 of every block and "
                 "the final ln_f, weight and bias) were not copied into norm1, norm2 and norm.",
                 mistake="norms not copied")
        fail(f"{where} still holds the model's own values: it was not copied.", mistake="parameter not copied")
    if got.dim() == 2 and _same(got, want.t()):
        fail(f"{where} holds GPT-2's matrix untransposed: GPT-2's Conv1D stores (in, out) and computes x @ W + b, "
             "nn.Linear stores (out, in) and computes x @ W.T + b, so a square matrix fits either way but multiplies "
             "wrongly. Transpose every Conv1D weight on the way in: w.t().", mistake="Conv1D weight not transposed")
    block, _, rest = name.rpartition(".self_attn.")
    if block and rest[:3] in ("w_q", "w_k", "w_v") and rest[3:] in (".weight", ".bias"):
        # c_attn's outputs rebuilt in GPT-2's order, (3D, D) or (3D,): an interleaved split takes every third row
        fused = torch.cat([expected[f"{block}.self_attn.{w}{rest[3:]}"] for w in ("w_q", "w_k", "w_v")])
        if any(_same(got, fused[i::3]) or (got.dim() == 2 and _same(got, fused[i::3].t())) for i in range(3)):
            fail(f"{where} holds every third output of c_attn: the split is interleaved (w[:, 0::3], or c_attn "
                 f"reshaped as (D, D, 3)). c_attn's {3 * D} outputs are three consecutive blocks of D, [q | k | v]: "
                 "w_q takes columns 0 .. D-1, w_k columns D .. 2D-1, w_v the last D: q, k, v = weight.split(D, "
                 "dim=1) (or a reshape to (D, 3, D)), each transposed, and bias.split(D).",
                 mistake="c_attn split interleaved")
        for other in ("w_q", "w_k", "w_v"):
            theirs = expected[f"{block}.self_attn.{other}{rest[3:]}"]
            if other != rest[:3] and (_same(got, theirs) or (got.dim() == 2 and _same(got, theirs.t()))):
                fail(f"{where} holds the {other} part of c_attn: c_attn's outputs are [q | k | v] in this order, "
                     f"so w_q takes columns 0 .. D-1, w_k columns D .. 2D-1, w_v the last D "
                     "(q, k, v = weight.split(D, dim=1), and the bias likewise).",
                     mistake="c_attn split in the wrong order")
    for mine, other in ((".norm1.", ".norm2."), (".norm2.", ".norm1.")):
        if mine in name and _same(got, expected[name.replace(mine, other)]):
            fail(f"{where} holds the other norm of the block: ln_1 goes before the attention (norm1), ln_2 before "
                 "the feed-forward (norm2).", mistake="norms swapped")
    diff = float((got - want).abs().max())
    fail(f"{where} does not hold GPT-2's numbers (largest difference {diff:.3g}).", mistake="values differ")


def _check_parameters(model: nn.Module, before: dict[str, Tensor], expected: dict[str, Tensor], D: int) -> None:
    params = dict(model.named_parameters())
    missing = [name for name in expected if name not in params]
    if missing:
        fail(f"after loading, the model has no parameter `{missing[0]}`: copy into the model's own Parameters, "
             "leaving its modules as they are.", mistake="missing submodule")
    wrong = [name for name in expected if not _same(params[name].detach(), expected[name])]
    if not wrong:
        return
    if all(params[n].shape == before[n].shape and _same(params[n].detach(), before[n]) for n in expected):
        fail("nothing was copied: every parameter of the model still holds its own values. The function must copy "
             f"into the model it is given, in place ({_FIX_COPY}); a value it returns is not used.",
             mistake="nothing copied")
    _diagnose(wrong[0], params[wrong[0]].detach(), expected, before[wrong[0]], D)


def _check_state_unchanged(given: Mapping[str, Tensor], original: Mapping[str, Tensor]) -> None:
    changed = sorted(set(original) ^ set(given)) or [k for k in original if not torch.equal(given[k], original[k])]
    if changed:
        fail(f"your function changed the state dict it was given (`{changed[0]}`): transpose with w.t() (a new "
             "view), never w.t_() or another in-place operation, and leave its keys as they are (no pop). The "
             "caller still needs it, for a second model for instance.", mistake="input modified in place")


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
    fail(f"given a model with max_len={P - 2} and a checkpoint with {P} positions, your function loaded it without "
         f"a word, keeping the first {P - 2} rows of the position table: the model silently differs from the "
         "checkpoint. Copy the whole table, `param.copy_(sd['transformer.wpe.weight'])`, without slicing it to the "
         "model's size: copy_ raises when the shapes differ, which is what we want (a ValueError of your own naming "
         "the parameter and both shapes does as well).", mistake="position table cut")


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
    if getattr(head, "weight", None) is not getattr(embedding, "weight", None):
        fail("after loading, lm_head.weight is no longer token_embedding.weight: your function replaced a Parameter "
             "(nn.Parameter(...), an assignment to .weight, or load_state_dict(..., assign=True)), so the output layer "
             "and the embedding are two tensors now and training would pull them apart. Copy into the existing "
             "Parameters instead: with torch.no_grad(): model.token_embedding.weight.copy_(wte); lm_head follows, "
             "it is the same tensor.", mistake="head untied by loading")
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


register_hints("load_gpt2_weights", [
    "print({k: tuple(v.shape) for k, v in state_dict.items()}) and compare with the table above: which of GPT-2's "
    "tensors goes into which of your parameters, and which ones need a transpose?",
    "Work inside `with torch.no_grad():` and copy into the existing parameters with .copy_(...) (never assign new "
    "ones: the output layer must stay tied). c_attn: q, k, v = weight.split(D, dim=1), each transposed.",
    "Per block i, with p = f'transformer.h.{i}.': w_q/w_k/w_v from p + 'attn.c_attn', w_o from p + 'attn.c_proj', "
    "linear1/linear2 from p + 'mlp.c_fc' / 'mlp.c_proj' (weights .t()), norm1/norm2 from ln_1/ln_2; then wte, wpe "
    "and ln_f outside the loop.",
])
