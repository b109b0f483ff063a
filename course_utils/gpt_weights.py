"""GPT-2's weights in the course's :class:`~course_utils.gpt.GPT` (backs notebook 09).

GPT-2's checkpoint layout (Hugging Face ``GPT2LMHeadModel``) mapped onto :class:`GPT` and
back, with one table of names (:data:`GPT2_NAMES`) used both ways:

* :func:`convert_gpt2_state_dict` / :func:`gpt2_state_dict`: GPT-2's state dict to ours, and
  ours to GPT-2's. GPT-2 stores its linear layers as ``Conv1D`` modules, whose weight is
  ``(in, out)``, the transpose of ``nn.Linear``'s ``(out, in)``; and its attention projects
  queries, keys and values with one fused ``c_attn`` of width ``3 D``, split here into
  ``w_q, w_k, w_v``.
* :func:`load_gpt2_weights` (notebook 09's last exercise), :func:`gpt_from_gpt2`,
  :func:`gpt_from_hf`: a model holding GPT-2's weights. ``tests/test_gpt.py`` proves the
  logits equal ``GPT2LMHeadModel``'s on a random config.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from .gpt import GPT

# ---------------------------------------------------------------- the names, one table for both ways
# (our tensor, GPT-2's tensor without "transformer.", a Conv1D weight); "{i}": every block's index.
# GPT-2 stores its linear layers as Conv1D modules, whose weight is (in, out) (y = x @ W + b), the
# transpose of nn.Linear's (out, in). The fused c_attn is the one exception: its (D, 3D) weight
# holds w_q, w_k, w_v side by side (QKV).
GPT2_NAMES: tuple[tuple[str, str, bool], ...] = (
    ("token_embedding.weight", "wte.weight", False),
    ("position_embedding.weight", "wpe.weight", False),
    ("norm.weight", "ln_f.weight", False),
    ("norm.bias", "ln_f.bias", False),
    ("blocks.{i}.norm1.weight", "h.{i}.ln_1.weight", False),
    ("blocks.{i}.norm1.bias", "h.{i}.ln_1.bias", False),
    ("blocks.{i}.self_attn.w_o.weight", "h.{i}.attn.c_proj.weight", True),
    ("blocks.{i}.self_attn.w_o.bias", "h.{i}.attn.c_proj.bias", False),
    ("blocks.{i}.norm2.weight", "h.{i}.ln_2.weight", False),
    ("blocks.{i}.norm2.bias", "h.{i}.ln_2.bias", False),
    ("blocks.{i}.feed_forward.linear1.weight", "h.{i}.mlp.c_fc.weight", True),
    ("blocks.{i}.feed_forward.linear1.bias", "h.{i}.mlp.c_fc.bias", False),
    ("blocks.{i}.feed_forward.linear2.weight", "h.{i}.mlp.c_proj.weight", True),
    ("blocks.{i}.feed_forward.linear2.bias", "h.{i}.mlp.c_proj.bias", False),
)
QKV = ("w_q", "w_k", "w_v")  # the order of c_attn's output columns: [q | k | v]


def _names(num_layers: int) -> list[tuple[str, str, bool]]:
    """:data:`GPT2_NAMES` with ``{i}`` filled in for each of ``num_layers`` blocks."""
    top = [row for row in GPT2_NAMES if "{i}" not in row[0]]
    per_block = [row for row in GPT2_NAMES if "{i}" in row[0]]
    return top + [(ours.format(i=i), theirs.format(i=i), conv1d) for i in range(num_layers)
                  for ours, theirs, conv1d in per_block]


def _strip(state_dict: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """GPT-2 keys without the ``transformer.`` prefix (GPT2LMHeadModel has it, GPT2Model not)."""
    return {k[len("transformer.") :] if k.startswith("transformer.") else k: v for k, v in state_dict.items()}


def gpt2_config(state_dict: Mapping[str, Tensor]) -> dict[str, int]:
    """``vocab_size, d_model, num_layers, d_ff, max_len`` read from a GPT-2 state dict's shapes
    (the number of heads cannot be read from the shapes: it is in GPT-2's config, ``n_head``)."""
    sd = _strip(state_dict)
    if "wte.weight" not in sd or "wpe.weight" not in sd:
        raise ValueError("not a GPT-2 state dict: it has no wte.weight / wpe.weight (token / position embeddings)")
    layers = {int(k.split(".")[1]) for k in sd if k.startswith("h.")}
    if layers != set(range(len(layers))):
        raise ValueError(f"GPT-2 blocks h.0 ... h.N-1 expected, got block indices {sorted(layers)}")
    vocab_size, d_model = sd["wte.weight"].shape
    c_fc = sd.get("h.0.mlp.c_fc.weight")  # (D, d_ff); transposed (d_ff, D) is refused by the conversion
    d_ff = (4 * int(d_model) if c_fc is None or c_fc.dim() != 2
            else int(c_fc.shape[1 if c_fc.shape[0] == d_model else 0]))
    return {
        "vocab_size": int(vocab_size),
        "d_model": int(d_model),
        "num_layers": len(layers),
        "d_ff": d_ff,
        "max_len": int(sd["wpe.weight"].shape[0]),
    }


_GPT2_BUFFERS = ("attn.bias", "attn.masked_bias")  # causal-mask buffers of some versions: not weights


def _gpt2_shapes(config: Mapping[str, int]) -> dict[str, tuple[int, ...]]:
    """Every tensor of a GPT-2 state dict (keys without ``transformer.``) with its shape, in
    GPT-2's order: the names from :data:`GPT2_NAMES` (and ``c_attn``, :data:`QKV` side by side),
    the shapes from a :class:`GPT` of ``config`` on the meta device (no memory); Conv1D
    weights are ``(in, out)``."""
    with torch.device("meta"):
        ours = GPT(**config, num_heads=1, dropout=0.0).state_dict()  # the heads do not change a shape
    D = config["d_model"]
    shapes: dict[str, tuple[int, ...]] = {}
    for name, theirs, conv1d in _names(config["num_layers"]):
        if theirs.endswith(".attn.c_proj.weight"):  # GPT-2's fused q, k, v projection comes first
            block = theirs[: -len("c_proj.weight")]
            shapes[block + "c_attn.weight"], shapes[block + "c_attn.bias"] = (D, len(QKV) * D), (len(QKV) * D,)
        shape = tuple(ours[name].shape)
        shapes[theirs] = shape[::-1] if conv1d else shape
    return shapes


def _check_gpt2(sd: Mapping[str, Tensor], config: Mapping[str, int]) -> None:
    """Every tensor present with GPT-2's shape, nothing unknown: a ValueError names what is wrong
    (``load_state_dict`` would only list names, or a wrong orientation would load silently)."""
    shapes = _gpt2_shapes(config)
    n = config["num_layers"]
    missing = [k for k in shapes if k not in sd]
    if missing:
        shown = ", ".join(missing[:6]) + (f" and {len(missing) - 6} more" if len(missing) > 6 else "")
        raise ValueError(f"the GPT-2 state dict has blocks h.0 ... h.{n - 1} (num_layers = {n}, as gpt2_config "
                         f"reads it) but lacks {len(missing)} tensor(s): {shown}")
    known = set(shapes) | {"lm_head.weight"} | {f"h.{i}.{b}" for i in range(n) for b in _GPT2_BUFFERS}
    unknown = sorted(k for k in sd if k not in known)
    if unknown:
        shown = ", ".join(unknown[:6]) + (f" and {len(unknown) - 6} more" if len(unknown) > 6 else "")
        raise ValueError(f"the GPT-2 state dict holds {len(unknown)} tensor(s) that GPT-2 (num_layers = {n}) has no "
                         f"place for: {shown}; remove them yourself if they are meant to be left out")
    for key, shape in shapes.items():
        got = tuple(sd[key].shape)
        if got == shape:
            continue
        if len(shape) == 2 and got == shape[::-1]:
            raise ValueError(f"{key} has shape {got}, the transpose of GPT-2's {shape}: GPT-2's Conv1D stores its "
                             "weight as (in, out), nn.Linear's (out, in); pass GPT-2's own layout (this function "
                             "transposes it)")
        raise ValueError(f"{key} has shape {got}; GPT-2 with d_model = {config['d_model']}, d_ff = {config['d_ff']} "
                         f"(read from wte and h.0.mlp.c_fc) needs {shape}")


def convert_gpt2_state_dict(state_dict: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """A GPT-2 state dict (``GPT2LMHeadModel`` or ``GPT2Model``) renamed and reshaped for :class:`GPT`.

    ``Conv1D`` weights ``(in, out)`` are transposed to ``nn.Linear``'s ``(out, in)``; the fused
    ``c_attn`` ``(D, 3D)`` is split into ``w_q, w_k, w_v`` (its output columns are
    ``[q | k | v]``); ``lm_head.weight``, tied to ``wte``, is the token embedding (a checkpoint
    whose ``lm_head`` differs from ``wte`` is refused); the causal-mask buffers
    (``attn.bias``, ``attn.masked_bias`` of older versions) are dropped. A ``ValueError``
    names any missing tensor, any unknown key and any tensor of the wrong shape (a weight
    already transposed to ``nn.Linear``'s layout included).
    """
    sd = _strip(state_dict)
    config = gpt2_config(sd)
    _check_gpt2(sd, config)
    D = config["d_model"]
    if "lm_head.weight" in sd and not torch.equal(sd["lm_head.weight"], sd["wte.weight"]):
        raise ValueError("lm_head.weight differs from wte.weight: this GPT model keeps them tied (one matrix)")
    out = {ours: sd[theirs].t() if conv1d else sd[theirs]  # Conv1D (in, out) -> Linear (out, in)
           for ours, theirs, conv1d in _names(config["num_layers"])}
    for i in range(config["num_layers"]):
        w, b = sd[f"h.{i}.attn.c_attn.weight"], sd[f"h.{i}.attn.c_attn.bias"]  # (D, 3D), (3D,)
        for j, name in enumerate(QKV):
            out[f"blocks.{i}.self_attn.{name}.weight"] = w[:, j * D : (j + 1) * D].t()  # (D, D): (out, in)
            out[f"blocks.{i}.self_attn.{name}.bias"] = b[j * D : (j + 1) * D]
    return {k: v.contiguous() for k, v in out.items()}


def gpt2_state_dict(model: GPT) -> dict[str, Tensor]:
    """The inverse of :func:`convert_gpt2_state_dict`: ``model``'s weights in GPT-2's layout
    (``GPT2LMHeadModel`` keys: ``transformer.wte.weight``, ``transformer.h.0.attn.c_attn.weight``
    ``(D, 3D)``, Conv1D weights ``(in, out)``, ... and ``lm_head.weight``, the same matrix as wte)."""
    sd = model.state_dict()
    out = {"transformer." + theirs: sd[ours].t().contiguous() if conv1d else sd[ours]  # Linear (out, in) -> (in, out)
           for ours, theirs, conv1d in _names(len(model.blocks))}
    for i in range(len(model.blocks)):
        q, p = f"blocks.{i}.self_attn.", f"transformer.h.{i}.attn.c_attn."
        out[p + "weight"] = torch.cat([sd[q + f"{n}.weight"].t() for n in QKV], dim=1)  # (D, 3D)
        out[p + "bias"] = torch.cat([sd[q + f"{n}.bias"] for n in QKV])  # (3D,)
    out["lm_head.weight"] = sd["token_embedding.weight"]
    return out


def load_gpt2_weights(model: nn.Module, state_dict: Mapping[str, Tensor]) -> None:
    """Copy a GPT-2 checkpoint into ``model``, in place (notebook 09's last exercise).

    ``state_dict`` has ``GPT2LMHeadModel.state_dict()``'s layout (``transformer.wte.weight``,
    ``transformer.h.{i}.attn.c_attn.weight`` ``(D, 3D)``, ... ``lm_head.weight``); ``model`` is
    a :class:`GPT` of the contract (its submodule names) with the checkpoint's sizes. Every
    ``Conv1D`` weight is transposed, ``c_attn`` is split into ``w_q, w_k, w_v``, and the values
    are copied into the model's own Parameters under ``torch.no_grad()``, so the output layer
    stays tied (``lm_head.weight is token_embedding.weight``) and the model keeps training as
    before. A parameter whose shape differs from the checkpoint's (a model with another
    context, width or vocabulary) raises ``ValueError`` naming both shapes, before anything is
    copied.
    """
    converted = convert_gpt2_state_dict(state_dict)  # our names, nn.Linear's (out, in)
    params = dict(model.named_parameters())  # the tied head once, as token_embedding.weight
    missing = [name for name in converted if name not in params]
    if missing:
        raise ValueError(f"the model has no parameter {missing[0]!r}: it must have the course GPT's submodule names")
    for name, value in converted.items():
        if params[name].shape != value.shape:
            raise ValueError(f"{name} has shape {tuple(params[name].shape)} in the model but {tuple(value.shape)} in "
                             "the checkpoint: build the model with the checkpoint's sizes")
    with torch.no_grad():
        for name, value in converted.items():
            params[name].copy_(value)


def gpt_from_gpt2(state_dict: Mapping[str, Tensor], num_heads: int) -> GPT:
    """A :class:`GPT` (eval mode, no dropout) holding a GPT-2 checkpoint's weights.

    ``num_heads`` is GPT-2's ``config.n_head`` (12 for ``gpt2``). The output layer stays tied.
    """
    config = gpt2_config(state_dict)
    model = GPT(num_heads=num_heads, dropout=0.0, **config)
    load_gpt2_weights(model, state_dict)
    return model.eval()


def gpt_from_hf(hf_model: Any) -> GPT:
    """:func:`gpt_from_gpt2` of a Hugging Face ``GPT2LMHeadModel`` (its state dict and ``n_head``)."""
    config = hf_model.config
    layers = gpt2_config(hf_model.state_dict())["num_layers"]
    if getattr(config, "n_layer", layers) != layers:
        raise ValueError(f"the model's config says n_layer = {config.n_layer}, its state dict holds {layers} blocks")
    if getattr(config, "activation_function", "gelu_new") not in ("gelu_new", "gelu_pytorch_tanh"):
        raise ValueError(f"GPT uses GPT-2's tanh GELU; this model uses {config.activation_function!r}")
    if abs(getattr(config, "layer_norm_epsilon", 1e-5) - 1e-5) > 1e-12:
        raise ValueError(f"GPT's LayerNorm uses eps=1e-5; this model uses {config.layer_norm_epsilon}")
    return gpt_from_gpt2(hf_model.state_dict(), config.n_head)


__all__ = [
    "GPT2_NAMES",
    "convert_gpt2_state_dict",
    "gpt2_state_dict",
    "load_gpt2_weights",
    "gpt_from_gpt2",
    "gpt_from_hf",
    "gpt2_config",
]
