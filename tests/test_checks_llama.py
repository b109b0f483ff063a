"""Tests for the notebook 10 checkers (course_utils/checks/llama.py).

Every catalogued mistake is a small, real piece of student code; the checker must fail it, say
why and name the mistake, on STABLE draws (19 fixed seeds and the session's random one). Correct
code written in other ways (einsum, rsqrt, complex numbers, tables computed on the fly, expand
instead of repeat_interleave, torch's attention) must pass on as many draws.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from checker_asserts import SEEDS, STABLE, assert_family, assert_not_implemented, assert_passes
from torch import nn

from course_utils import (
    GroupedQueryAttention,
    RMSNorm,
    SwiGLU,
    apply_rotary,
    causal_mask,
    merge_heads,
    rotary_tables,
    split_heads,
)
from course_utils.checks import (
    check_apply_rotary,
    check_grouped_query_attention,
    check_rms_norm,
    check_rotary_tables,
    check_swiglu,
    hint,
)
from course_utils.checks._core import HINTS

DRAWS = SEEDS[:STABLE]


# ================================================================ RMSNorm
def rms_norm(kind: str = "ok", default_eps: float = 1e-6) -> type:
    class StudentRMSNorm(nn.Module):
        def __init__(self, hidden_size, eps=default_eps):  # the width is passed by position only: any name
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.ones(hidden_size))

        def forward(self, x):
            eps = 1e-6 if kind == "eps ignored" else self.eps
            if kind == "rsqrt":
                return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * self.weight
            if kind == "einsum":
                ms = torch.einsum("...d,...d->...", x, x)[..., None] / x.size(-1)
                return self.weight * x / (ms + eps) ** 0.5
            if kind == "norm":  # the 2-norm divided by sqrt(D)
                return x / torch.sqrt(x.norm(dim=-1, keepdim=True) ** 2 / x.size(-1) + eps) * self.weight
            if kind == "float32":  # Hugging Face's: in float32, then back
                h = x.float()
                h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
                return self.weight * h.to(x.dtype)
            if kind == "mean subtracted":
                c = x - x.mean(-1, keepdim=True)
                return c / torch.sqrt(c.pow(2).mean(-1, keepdim=True) + eps) * self.weight
            if kind == "std":
                return x / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + eps) * self.weight
            if kind == "eps outside":
                return x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps) * self.weight
            if kind == "no sqrt":
                return x / (x.pow(2).mean(-1, keepdim=True) + eps) * self.weight
            if kind == "no weight":
                return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
            if kind == "unbiased std":
                return x / torch.sqrt(x.var(-1, keepdim=True) + eps) * self.weight
            if kind == "sum":
                return x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + eps) * self.weight
            if kind == "abs":
                return x / (x.abs().mean(-1, keepdim=True) + eps) * self.weight
            if kind == "gemma":
                return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1 + self.weight)
            if kind == "dim=1":
                return x / torch.sqrt(x.pow(2).mean(1, keepdim=True) + eps) * self.weight
            if kind == "torch":
                return F.rms_norm(x, (x.size(-1),), self.weight, eps)
            return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * self.weight

    return StudentRMSNorm


@pytest.mark.parametrize("student", [RMSNorm, rms_norm(), rms_norm("rsqrt"), rms_norm("einsum"), rms_norm("norm"),
                                     rms_norm("float32")])
def test_rms_norm_correct_variants_pass(student):
    assert_passes(check_rms_norm, student, repeat=DRAWS)


def test_rms_norm_mistakes_are_named():
    members = [
        ("mean subtracted", rms_norm("mean subtracted"), "mean subtracted", ("LayerNorm",)),
        ("std", rms_norm("std"), "mean subtracted", ("standard deviation",)),
        ("eps outside", rms_norm("eps outside"), "eps outside the square root", ("inside",)),
        ("no sqrt", rms_norm("no sqrt"), "no square root", ("square root",)),
        ("no weight", rms_norm("no weight"), "no learnable scale and shift", ("self.weight",)),
        ("eps ignored", rms_norm("eps ignored"), "eps ignored", ("self.eps = eps",)),
        ("unbiased std", rms_norm("unbiased std"), "mean subtracted", ("D - 1",)),
        ("sum", rms_norm("sum"), "sum instead of mean", ("sqrt(D)",)),
        ("abs", rms_norm("abs"), "mean absolute value", ("mean(|x|)",)),
        ("gemma", rms_norm("gemma"), "scale (1 + weight)", ("Gemma",)),
        ("default 1e-5", rms_norm(default_eps=1e-5), "wrong default eps", ("eps=1e-6",)),
        ("default 1e-8", rms_norm(default_eps=1e-8), "wrong default eps", ("eps=1e-6",)),
        ("dim=1", rms_norm("dim=1"), "normalised over the wrong axis", ("last axis",)),
        ("torch", rms_norm("torch"), "forbidden call", ("rms_norm",)),
    ]
    assert_family([(label, check_rms_norm, s, m, w) for label, s, m, w in members])


# ================================================================ rotary_tables
def tables(kind: str = "ok"):
    def rotary_tables(d_k, max_len, base=10000.0, device=None):
        device = None if kind == "device ignored" else device
        i = torch.arange(0, d_k, 2, dtype=torch.float32, device=device)
        theta = (10000.0 if kind == "base ignored" else base) ** (-(i / 2 if kind == "no 2" else i) / d_k)
        if kind == "integer //":  # -arange // d_k on integers: -1 for every i > 0
            theta = base ** (-torch.arange(0, d_k, 2, device=device) // d_k)
        elif kind == "integer -(//)":  # 0 for every i
            theta = base ** -(torch.arange(0, d_k, 2, device=device) // d_k)
        if kind == "sign":
            theta = 1 / theta
        pos = torch.arange(max_len, dtype=torch.float32, device=device) + (1 if kind == "from 1" else 0)
        angles = torch.outer(pos, theta)  # (max_len, d_k/2)
        if kind == "half":
            return angles.cos(), angles.sin()
        if kind == "pairs":
            angles = angles.repeat_interleave(2, dim=-1)
        elif kind == "einsum":  # on the fly, in float64, another spelling
            angles = torch.einsum("m,f->mf", pos.double(), theta.double()).repeat(1, 2).float()
        elif kind == "float64":  # right values, left in float64
            angles = torch.outer(pos.double(), theta.double()).repeat(1, 2)
        else:
            angles = torch.cat([angles, angles], dim=-1)
        if kind == "swapped":
            return angles.sin(), angles.cos()
        return angles.cos(), angles.sin()

    return rotary_tables


@pytest.mark.parametrize("student", [rotary_tables, tables(), tables("einsum")])
def test_rotary_tables_correct_variants_pass(student):
    assert_passes(check_rotary_tables, student, repeat=DRAWS)


def test_rotary_tables_mistakes_are_named():
    members = [
        ("pairs", tables("pairs"), "pairs layout", ("Meta's", "halves")),
        ("from 1", tables("from 1"), "positions from 1", ("position 0",)),
        ("no 2", tables("no 2"), "frequencies without the factor 2", ("-2i / d_k",)),
        ("sign", tables("sign"), "frequency exponent sign flipped", ("grow",)),
        ("base ignored", tables("base ignored"), "base ignored", ("base argument",)),
        ("swapped", tables("swapped"), "sin and cos swapped", ("(cos, sin)",)),
        ("half", tables("half"), "half-width tables", ("[theta | theta]",)),
        ("float64", tables("float64"), "wrong dtype", ("float32",)),
        ("device ignored", tables("device ignored"), "device ignored", ("device=device",)),
        ("integer //", tables("integer //"), "integer division in the exponent", ("to -1", "floating point")),
        ("integer -(//)", tables("integer -(//)"), "integer division in the exponent", ("to 0",)),
    ]
    assert_family([(label, check_rotary_tables, s, m, w) for label, s, m, w in members])


# ================================================================ apply_rotary
def rotary(kind: str = "ok"):
    def apply_rotary(x, cos, sin, offset=0):
        L, d = x.shape[-2:]
        start = {"from 1": offset + 1, "offset ignored": 0}.get(kind, offset)
        c, s = (cos, sin) if kind == "not sliced" else (cos[start : start + L], sin[start : start + L])
        if kind == "slice to L":
            c, s = cos[offset:L], sin[offset:L]
        if kind != "float32 out":  # the rows in x's dtype: a bfloat16 x stays bfloat16
            c, s = c.to(x.dtype), s.to(x.dtype)
        x1, x2 = x[..., : d // 2], x[..., d // 2 :]
        if kind == "complex":  # x1 + i x2 times e^(i angle)
            z = torch.complex(x1, x2) * torch.polar(torch.ones_like(c[:, : d // 2]), torch.atan2(s, c)[:, : d // 2])
            return torch.cat([z.real, z.imag], dim=-1)
        if kind == "on the fly":  # its own angles, not the tables passed in
            theta = 10000.0 ** (-torch.arange(0, d, 2).double() / d)
            a = torch.outer(torch.arange(offset, offset + L).double(), theta).float()
            ca, sa = a.cos().to(x.dtype), a.sin().to(x.dtype)
            return torch.cat([x1 * ca - x2 * sa, x1 * sa + x2 * ca], dim=-1)
        if kind == "pairs":  # Meta's: (2i, 2i+1) as complex numbers
            theta = 10000.0 ** (-torch.arange(0, d, 2).float() / d)
            a = torch.outer(torch.arange(offset, offset + L).float(), theta)
            z = torch.view_as_complex(x.reshape(*x.shape[:-1], d // 2, 2).contiguous()) * torch.polar(torch.ones_like(a), a)  # noqa: E501
            return torch.view_as_real(z).flatten(-2)
        if kind == "pairs with the tables":
            turned = torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)
            return x * c + turned * s
        if kind == "wrong way":
            return x * c + torch.cat([x2, -x1], dim=-1) * s
        if kind == "no minus":
            return x * c + torch.cat([x2, x1], dim=-1) * s
        if kind == "swapped":
            return x * s + torch.cat([-x2, x1], dim=-1) * c
        return x * c + torch.cat([-x2, x1], dim=-1) * s

    return apply_rotary


@pytest.mark.parametrize("student", [apply_rotary, rotary(), rotary("complex"), rotary("on the fly")])
def test_apply_rotary_correct_variants_pass(student):
    assert_passes(check_apply_rotary, student, repeat=DRAWS)


def test_apply_rotary_mistakes_are_named():
    members = [
        ("pairs", rotary("pairs"), "pairs layout", ("Meta's", "rotate_half")),
        ("pairs with the tables", rotary("pairs with the tables"), "pairs layout", ("Meta's",)),
        ("from 1", rotary("from 1"), "positions from 1", ("row p",)),
        ("offset ignored", rotary("offset ignored"), "rotary offset ignored", ("position 0", "cache")),
        ("wrong way", rotary("wrong way"), "rotation the wrong way", ("-angle",)),
        ("no minus", rotary("no minus"), "rotate_half without the minus", ("negating",)),
        ("swapped", rotary("swapped"), "sin and cos swapped", ("x * cos + rotate_half(x) * sin",)),
        ("not sliced", rotary("not sliced"), "rotary tables not sliced", ("cos[offset:offset + L]",)),
        ("slice to L", rotary("slice to L"), "rotary slice ends at L", ("cos[offset:L]", "cos[offset:offset + L]")),
        ("float32 out", rotary("float32 out"), "dtype not preserved", ("bfloat16", ".to(x.dtype)")),
    ]
    assert_family([(label, check_apply_rotary, s, m, w) for label, s, m, w in members])


# ================================================================ SwiGLU
def swiglu(kind: str = "ok", bias: bool = False) -> type:
    class StudentSwiGLU(nn.Module):
        def __init__(self, d_model, d_ff):
            super().__init__()
            self.w1 = nn.Linear(d_model, d_ff, bias=bias)
            self.w2 = nn.Linear(d_ff, d_model, bias=bias)
            self.w3 = nn.Linear(d_model, d_ff, bias=bias)
            if kind == "w2 w3 swapped":  # LLMs-from-scratch's fc2 (up) and fc3 (down) kept as w2 and w3
                self.w2, self.w3 = nn.Linear(d_model, d_ff, bias=False), nn.Linear(d_ff, d_model, bias=False)
            if kind == "hf names":  # Hugging Face's Llama names them gate_proj, down_proj, up_proj
                self.gate_proj, self.down_proj, self.up_proj = self.w1, self.w2, self.w3
                del self.w1, self.w2, self.w3

        def forward(self, x):
            if kind == "w2 w3 swapped":
                return self.w3(F.silu(self.w1(x)) * self.w2(x))
            a, b = self.w1(x), self.w3(x)
            act = {"gelu": F.gelu, "relu": F.relu, "sigmoid": torch.sigmoid}.get(kind)
            if kind == "hand":  # silu written out
                return self.w2(a * torch.sigmoid(a) * b)
            if kind == "einsum":
                return torch.einsum("...f,df->...d", F.silu(a) * b, self.w2.weight)
            if act is not None:
                return self.w2(act(a) * b)
            if kind == "wrong branch":
                return self.w2(a * F.silu(b))
            if kind == "no gate":
                return self.w2(F.silu(a))
            if kind == "both":
                return self.w2(F.silu(a) * F.silu(b))
            if kind == "sum":
                return self.w2(F.silu(a) + b)
            if kind == "after":
                return self.w2(F.silu(a * b))
            if kind == "after w2":
                return F.silu(self.w2(a * b))

            return self.w2(F.silu(a) * b)

    return StudentSwiGLU


@pytest.mark.parametrize("student", [SwiGLU, swiglu(), swiglu("hand"), swiglu("einsum")])
def test_swiglu_correct_variants_pass(student):
    assert_passes(check_swiglu, student, repeat=DRAWS)


def test_swiglu_mistakes_are_named():
    members = [
        ("wrong branch", swiglu("wrong branch"), "gate on the wrong branch", ("w1",)),
        ("gelu", swiglu("gelu"), "GELU instead of SiLU", ("GEGLU",)),
        ("relu", swiglu("relu"), "ReLU instead of SiLU", ("ReGLU",)),
        ("sigmoid", swiglu("sigmoid"), "sigmoid gate", ("GLU",)),
        ("no gate", swiglu("no gate"), "gate missing", ("w3(x)",)),
        ("both", swiglu("both"), "SiLU on both branches", ("both",)),
        ("after", swiglu("after"), "SiLU after the product", ("after the product",)),
        ("sum", swiglu("sum"), "sum instead of product", ("element by element",)),
        ("bias", swiglu(bias=True), "bias in a layer", ("bias=False",)),
        ("hf names", swiglu("hf names"), "missing submodule", ("gate_proj -> w1", "up_proj -> w3", "down_proj -> w2")),
        ("after w2", swiglu("after w2"), "SiLU after w2", ("output of w2",)),
        ("w2 w3 swapped", swiglu("w2 w3 swapped"), "w2 and w3 swapped", ("swapped", "d_ff -> d_model")),
    ]
    assert_family([(label, check_swiglu, s, m, w) for label, s, m, w in members])


# ================================================================ GroupedQueryAttention
def gqa(kind: str = "ok", check_heads: bool = True) -> type:
    class StudentGQA(nn.Module):
        def __init__(self, d_model, num_heads, n_kv_heads=None):
            super().__init__()
            if kind != "None crashes":  # num_heads % None raises TypeError
                n_kv_heads = n_kv_heads or num_heads
            if check_heads and num_heads % n_kv_heads:
                raise (AssertionError if kind == "assert" else ValueError)("n_kv_heads must divide num_heads")
            self.num_heads, self.n_kv_heads, self.d_k = num_heads, n_kv_heads, d_model // num_heads
            if kind == "renamed":  # Hugging Face's name for it
                self.num_kv_heads = n_kv_heads
                del self.n_kv_heads
            kv = d_model if kind == "mha" else n_kv_heads * self.d_k
            self.w_q = nn.Linear(d_model, d_model, bias=False)
            self.w_k = nn.Linear(d_model, kv, bias=False)
            self.w_v = nn.Linear(d_model, kv, bias=False)
            self.w_o = nn.Linear(d_model, d_model, bias=False)

        def forward(self, x, cos=None, sin=None, mask=None, offset=0):
            B, L, D = x.shape
            H, Hk, d = self.num_heads, getattr(self, "n_kv_heads", None) or self.num_kv_heads, self.d_k
            if kind == "split view":  # (B, L, D) viewed straight as (B, H, L, d): heads of positions
                q, k, v = self.w_q(x).view(B, H, L, d), self.w_k(x).view(B, Hk, L, d), self.w_v(x).view(B, Hk, L, d)
            else:
                q = self.w_q(x).view(B, L, H, d).transpose(1, 2)
                k = self.w_k(x).view(B, L, Hk, d).transpose(1, 2)
                v = self.w_v(x).view(B, L, Hk, d).transpose(1, 2)
            if kind == "rotate (B, L, H, d)":  # Meta's code keeps this layout; the course's apply_rotary does not
                q = apply_rotary(q.transpose(1, 2), cos, sin, offset).transpose(1, 2)
                k = apply_rotary(k.transpose(1, 2), cos, sin, offset).transpose(1, 2)
            elif kind != "no rope":
                if kind != "keys only":  # trial s8_10: q rotated at offset 1, k at 0
                    q = apply_rotary(q, cos, sin, offset + (kind == "q offset 1"))
                if kind != "queries only":
                    k = apply_rotary(k, cos, sin, offset)
                if kind == "values":
                    v = apply_rotary(v, cos, sin, offset)
            g = H // Hk
            allowed = {"no causal": torch.ones(L, L, dtype=torch.bool), "triu": causal_mask(L).T}.get(kind, causal_mask(L))  # noqa: E501
            if mask is not None and kind not in ("mask ignored", "mask added"):
                allowed = {"or": allowed | mask, "replaces": mask, "pad as True": allowed & ~mask}.get(kind, allowed & mask)  # noqa: E501
            if kind == "sdpa":  # torch's own grouped attention
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=True)
                return self.w_o(out.transpose(1, 2).reshape(B, L, D))
            if kind == "expand":  # Hugging Face's repeat_kv
                k = k[:, :, None].expand(B, Hk, g, L, d).reshape(B, H, L, d)
                v = v[:, :, None].expand(B, Hk, g, L, d).reshape(B, H, L, d)
            elif kind == "repeat":
                k, v = k.repeat(1, g, 1, 1), v.repeat(1, g, 1, 1)
            elif kind == "values repeated":
                k, v = k.repeat_interleave(g, dim=1), v.repeat(1, g, 1, 1)
            elif kind in ("einsum", "view groups"):  # no copy: the query heads grouped as (Hk, g)
                # "view groups" groups them as (g, Hk): query head h then reads key/value head h % Hk
                qg = q.view(B, g, Hk, L, d).transpose(1, 2) if kind == "view groups" else q.view(B, Hk, g, L, d)
                scores = torch.einsum("bkgqd,bkld->bkgql", qg, k) / math.sqrt(d)
                scores = scores.masked_fill(~allowed.unsqueeze(-3), float("-inf"))  # (B, Hk, g, L, L)
                out = torch.einsum("bkgql,bkld->bkgqd", scores.softmax(-1), v)  # (B, Hk, g, L, d)
                out = (out.transpose(1, 2) if kind == "view groups" else out).reshape(B, H, L, d)
                return self.w_o(out.transpose(1, 2).reshape(B, L, D))
            else:
                k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
            scores = q @ k.transpose(-2, -1) / {"no scaling": 1.0, "scale d_k": d}.get(kind, math.sqrt(d))
            if kind == "inverted":
                weights = scores.masked_fill(allowed, float("-inf")).softmax(-1).nan_to_num()
            elif kind in ("inverted -inf", "inverted -1e9"):  # NaN rows with -inf
                weights = scores.masked_fill(allowed, float("-inf") if kind == "inverted -inf" else -1e9).softmax(-1)
            else:
                scores = scores.masked_fill(~allowed, 0.0 if kind == "fill 0" else float("-inf"))
                weights = (scores + mask if kind == "mask added" and mask is not None else scores).softmax(
                    -2 if kind == "softmax -2" else -1)
            out = weights @ v  # (B, H, L, d)
            merged = out.reshape(B, L, D) if kind == "merge reshape" else out.transpose(1, 2).reshape(B, L, D)
            return merged if kind == "no w_o" else self.w_o(merged)

    return StudentGQA


GQA_CELL = """
class GroupedQueryAttention(nn.Module):  # notebook 10's solution cell, run where `apply_rotary` is a notebook's own
    def __init__(self, d_model, num_heads, n_kv_heads=None):
        super().__init__()
        n_kv_heads = num_heads if n_kv_heads is None else n_kv_heads
        if num_heads % n_kv_heads != 0:
            raise ValueError(f"n_kv_heads = {n_kv_heads} must divide num_heads = {num_heads}")
        self.num_heads, self.n_kv_heads, self.d_k = num_heads, n_kv_heads, d_model // num_heads
        self.w_q = nn.Linear(d_model, d_model, bias=False)
        self.w_k = nn.Linear(d_model, n_kv_heads * self.d_k, bias=False)
        self.w_v = nn.Linear(d_model, n_kv_heads * self.d_k, bias=False)
        self.w_o = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x, cos, sin, mask=None):
        q = apply_rotary(split_heads(self.w_q(x), self.num_heads), cos, sin)
        k = apply_rotary(split_heads(self.w_k(x), self.n_kv_heads), cos, sin)
        v = split_heads(self.w_v(x), self.n_kv_heads)
        g = self.num_heads // self.n_kv_heads
        k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
        allowed = causal_mask(x.size(1), device=x.device)
        if mask is not None:
            allowed = allowed & mask
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        weights = scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1)
        return self.w_o(merge_heads(weights @ v))
"""


def gqa_calling(rotate) -> type:
    """The solution's attention in a namespace (a notebook's) whose `apply_rotary` is ``rotate``."""
    space = dict(torch=torch, nn=nn, math=math, split_heads=split_heads, merge_heads=merge_heads,
                 causal_mask=causal_mask, apply_rotary=rotate)
    exec(GQA_CELL, space)  # noqa: S102 - the test's own source
    return space["GroupedQueryAttention"]


def _has_enable_gqa() -> bool:
    try:
        F.scaled_dot_product_attention(torch.zeros(1, 2, 1, 2), torch.zeros(1, 1, 1, 2), torch.zeros(1, 1, 1, 2),
                                       enable_gqa=True)
    except TypeError:
        return False
    return True


@pytest.mark.parametrize("student", [GroupedQueryAttention, gqa(), gqa("expand"), gqa("einsum"), gqa_calling(rotary()),
                                     pytest.param(gqa("sdpa"), marks=pytest.mark.skipif(
                                         not _has_enable_gqa(), reason="this torch has no enable_gqa"))])
def test_grouped_query_attention_correct_variants_pass(student):
    assert_passes(check_grouped_query_attention, student, repeat=DRAWS)


def test_grouped_query_attention_mistakes_are_named():
    members = [
        ("repeat", gqa("repeat"), "repeat instead of repeat_interleave", ("repeat_interleave", "h % n_kv_heads")),
        ("view groups", gqa("view groups"), "repeat instead of repeat_interleave", ("h // g", ".view(B, g")),
        ("None crashes", gqa("None crashes"), "n_kv_heads default not handled", ("n_kv_heads = num_heads",)),
        ("renamed", gqa("renamed"), "attribute missing or renamed", ("self.n_kv_heads", "num_kv_heads")),
        ("values", gqa("values"), "rotary on values", ("never the values",)),
        ("keys only", gqa("keys only"), "rotary on queries or keys only", ("queries",)),
        ("queries only", gqa("queries only"), "rotary on queries or keys only", ("keys",)),
        ("no rope", gqa("no rope"), "rotary not applied", ("apply_rotary",)),
        ("q offset 1", gqa("q offset 1"), "q and k rotated at different offsets", ("1 position ahead of the keys",)),
        ("no causal", gqa("no causal"), "no causal mask", ("causal_mask",)),
        ("no scaling", gqa("no scaling"), "no scaling", ("sqrt(d_k)",)),
        ("values repeated", gqa("values repeated"), "repeat instead of repeat_interleave", ("values of head h % ",)),
        ("rotate (B, L, H, d)", gqa("rotate (B, L, H, d)"), "rotary on (B, L, H, d_k)", ("before .transpose(1, 2)",)),
        ("inverted", gqa("inverted"), "inverted mask", ("True means may attend",)),
        ("mask ignored", gqa("mask ignored"), "mask ignored", ("causal_mask(L) & mask",)),
        ("mask added", gqa("mask added"), "additive float mask", ("bool",)),
        ("mha", gqa("mha"), "key/value projections not grouped", ("n_kv_heads * d_k",)),
        ("unchecked", gqa(check_heads=False), "n_kv_heads not checked", ("ValueError",)),
        ("assert", gqa("assert"), "wrong error type", ("AssertionError",)),
        ("inverted -inf", gqa("inverted -inf"), "inverted mask", ("contains NaN", "True means may attend")),
        ("inverted -1e9", gqa("inverted -1e9"), "inverted mask", ("True means may attend", "-1e9")),
        ("pad as True", gqa("pad as True"), "inverted mask", ("contains NaN", "causal_mask(L) & mask")),
        ("fill 0", gqa("fill 0"), "mask filled with 0", ("exp(0) = 1",)),
        ("triu", gqa("triu"), "upper triangle", ("causal_mask(L).T",)),
        ("or", gqa("or"), "| instead of &", ("causal_mask(L) & mask",)),
        ("replaces", gqa("replaces"), "padding mask replaces causal", ("causal_mask(L) & mask",)),
        ("softmax -2", gqa("softmax -2"), "softmax over the wrong axis", ("dim=-1",)),
        ("scale d_k", gqa("scale d_k"), "scaled by d_k", ("square root",)),
        ("no w_o", gqa("no w_o"), "missing output projection", ("self.w_o",)),
        ("split view", gqa("split view"), "split without transpose", ("split_heads",)),
        ("merge reshape", gqa("merge reshape"), "reshape without transpose", ("merge_heads",)),
        ("calls a pairs apply_rotary", gqa_calling(rotary("pairs with the tables")), "calls a failing apply_rotary",
         ("pairs layout", "from course_utils import apply_rotary")),
    ]
    assert_family([(label, check_grouped_query_attention, s, m, w) for label, s, m, w in members])


# ================================================================ stubs and hints
@pytest.mark.parametrize("check, name", [(check_rms_norm, "RMSNorm"), (check_rotary_tables, "rotary_tables"),
                                         (check_apply_rotary, "apply_rotary"), (check_swiglu, "SwiGLU"),
                                         (check_grouped_query_attention, "GroupedQueryAttention")])
def test_stubs_read_not_implemented_and_hints_exist(check, name, capsys):
    if name[0].isupper():
        class Stub(nn.Module):
            def __init__(self, *args, **kwargs):
                raise NotImplementedError

        student = Stub
    else:
        def student(*args, **kwargs):
            raise NotImplementedError

    assert_not_implemented(check, student)
    assert len(HINTS[name]) >= 3
    hint(name)
    assert f"Hint 1/{len(HINTS[name])} for {name}" in capsys.readouterr().out
