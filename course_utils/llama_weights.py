"""Hugging Face ``LlamaForCausalLM`` weights in notebook 10's :class:`~course_utils.llama.Llama`.

The layouts agree once renamed: both use ``nn.Linear``'s ``(out, in)`` weights, and the course
model rotates in the "halves" layout of Hugging Face's ``rotate_half``, so ``q_proj`` and
``k_proj`` copy without a permutation. (Meta's original checkpoints rotate the pairs
``(2i, 2i+1)``; Hugging Face's conversion script permutes the rows of ``q_proj``/``k_proj``
within each head to the halves layout, which is why a Hugging Face checkpoint and a
pairs-layout model disagree unless that permutation is undone.)

============================================  =====================================
Hugging Face                                  course
============================================  =====================================
``model.embed_tokens.weight``                 ``token_embedding.weight``
``model.layers.i.input_layernorm``            ``blocks.i.norm1``
``model.layers.i.self_attn.{q,k,v,o}_proj``   ``blocks.i.self_attn.w_{q,k,v,o}``
``model.layers.i.post_attention_layernorm``   ``blocks.i.norm2``
``model.layers.i.mlp.gate_proj``              ``blocks.i.feed_forward.w1``
``model.layers.i.mlp.down_proj``              ``blocks.i.feed_forward.w2``
``model.layers.i.mlp.up_proj``                ``blocks.i.feed_forward.w3``
``model.norm``                                ``norm``
``lm_head``                                   ``lm_head``
============================================  =====================================

``tests/test_llama.py`` proves the logits equal ``LlamaForCausalLM``'s on a random small
config with fewer key/value heads than query heads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from .llama import Llama

_PER_LAYER = {
    "input_layernorm.weight": "norm1.weight",
    "self_attn.q_proj.weight": "self_attn.w_q.weight",
    "self_attn.k_proj.weight": "self_attn.w_k.weight",
    "self_attn.v_proj.weight": "self_attn.w_v.weight",
    "self_attn.o_proj.weight": "self_attn.w_o.weight",
    "post_attention_layernorm.weight": "norm2.weight",
    "mlp.gate_proj.weight": "feed_forward.w1.weight",
    "mlp.down_proj.weight": "feed_forward.w2.weight",
    "mlp.up_proj.weight": "feed_forward.w3.weight",
}
_TOP = {"model.embed_tokens.weight": "token_embedding.weight", "model.norm.weight": "norm.weight",
        "lm_head.weight": "lm_head.weight"}
_BUFFERS = ("rotary_emb.inv_freq",)  # some versions save the rotary frequencies: not weights


def convert_llama_state_dict(state_dict: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """``LlamaForCausalLM.state_dict()`` renamed for :class:`~course_utils.llama.Llama` (table above).

    A checkpoint without ``lm_head.weight`` (tied to the embedding) gets the embedding as its
    output layer. A ``ValueError`` names any key with no place in the course model (biases,
    for instance: ``attention_bias=True`` models are not Llama's layout).
    """
    out: dict[str, Tensor] = {}
    unknown = []
    for key, value in state_dict.items():
        if key in _TOP:
            out[_TOP[key]] = value
            continue
        parts = key.split(".")
        if len(parts) > 3 and parts[:2] == ["model", "layers"] and parts[2].isdigit():
            rest = ".".join(parts[3:])
            if rest in _PER_LAYER:
                out[f"blocks.{parts[2]}.{_PER_LAYER[rest]}"] = value
                continue
            if rest.endswith(_BUFFERS):
                continue
        if key.endswith(_BUFFERS):
            continue
        unknown.append(key)
    if unknown:
        shown = ", ".join(unknown[:6]) + (f" and {len(unknown) - 6} more" if len(unknown) > 6 else "")
        raise ValueError(f"{len(unknown)} tensor(s) of the checkpoint have no place in the course's Llama: {shown}")
    if "token_embedding.weight" not in out:
        raise ValueError("not a LlamaForCausalLM state dict: it has no model.embed_tokens.weight")
    out.setdefault("lm_head.weight", out["token_embedding.weight"])
    return out


def _rope_base(config: Any) -> float:
    params = getattr(config, "rope_parameters", None) or {}
    scaling = getattr(config, "rope_scaling", None) or {}
    kind = params.get("rope_type", scaling.get("rope_type", scaling.get("type", "default")))
    if kind not in (None, "default"):
        raise ValueError(f"this model scales its rotary positions ({kind!r}); the course's Llama uses plain RoPE")
    return float(params.get("rope_theta", getattr(config, "rope_theta", 10000.0)))


def llama_from_hf(hf_model: Any, **parts: Any) -> Llama:
    """A :class:`~course_utils.llama.Llama` (eval mode) with a Hugging Face ``LlamaForCausalLM``'s
    config and weights. Refuses (``ValueError``) what the course model does not have: biases,
    another activation than SiLU, a head width other than ``hidden_size / num_heads``, scaled
    rotary positions. ``parts`` (``block``, ``norm``, ``rotary_tables``, ``apply_rotary``) build
    the ``Llama`` from other pieces (a notebook's own), filled by the same names."""
    c = hf_model.config
    if getattr(c, "hidden_act", "silu") != "silu":
        raise ValueError(f"the course's SwiGLU uses SiLU; this model uses {c.hidden_act!r}")
    if getattr(c, "attention_bias", False) or getattr(c, "mlp_bias", False):
        raise ValueError("this model has biases in its attention or MLP; the course's Llama has none")
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    if head_dim * c.num_attention_heads != c.hidden_size:
        raise ValueError(f"head_dim = {head_dim} times num_attention_heads = {c.num_attention_heads} differs from "
                         f"hidden_size = {c.hidden_size}; the course's Llama splits d_model into the heads")
    model = Llama(c.vocab_size, d_model=c.hidden_size, num_heads=c.num_attention_heads,
                  num_layers=c.num_hidden_layers, d_ff=c.intermediate_size,
                  n_kv_heads=getattr(c, "num_key_value_heads", None) or c.num_attention_heads,
                  max_len=c.max_position_embeddings, rope_base=_rope_base(c), eps=c.rms_norm_eps,
                  tie_weights=bool(getattr(c, "tie_word_embeddings", False)), **parts)
    weights = convert_llama_state_dict(hf_model.state_dict())
    params = dict(model.named_parameters(remove_duplicate=False))
    missing = sorted(set(params) - set(weights))
    if missing:
        raise ValueError(f"the checkpoint lacks {len(missing)} tensor(s) of the model: {', '.join(missing[:6])}")
    extra = sorted(set(weights) - set(params))
    if extra:
        raise ValueError(
            f"the checkpoint holds {len(extra)} tensor(s) its config has no place for: {', '.join(extra[:6])}"
        )
    with torch.no_grad():
        for name, value in weights.items():
            if params[name].shape != value.shape:
                raise ValueError(f"{name} has shape {tuple(value.shape)} in the checkpoint, "
                                 f"{tuple(params[name].shape)} in the model built from its config")
            params[name].copy_(value)
    return model.eval()


__all__ = ["convert_llama_state_dict", "llama_from_hf"]
