"""The package's references and the solution cells are one text (issue 24: no drift).

Every function or method an exercise cell of ``solutions/NN_*.ipynb`` defines is compared,
through ``ast``, with the reference of the same name that ``course_utils`` exports. The
package's argument checks do not count: statements that call a ``check_*`` helper, ``if``
blocks that only raise (or only check), and ``x = check_*("x", x)`` read as ``x = x`` (the
private ``_check_*`` helpers too). Any other difference
must be declared in ``DIFFERENCES`` (a replacement that turns the package's text into the
solution's, with its reason) or in ``NOT_ONE_TEXT`` (the reference is another algorithm, with
the reason and the test that proves the two equal). An exercise in neither that differs, or a
declaration that no longer applies, fails: a newcomer who edits one text learns here that the
other exists.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# (notebook, qualified name) -> (the package's text -> the solution's, why). Each replacement
# applies to one unparsed statement: the whole statement when it equals the key ("" drops it),
# else a substring.
_KEEPS_FOR_CHECKS = "the package keeps {} for its argument checks in forward"
_ACTIVATION = "the activation is a choice (ReLU, GELU for BERT, tanh-GELU for GPT-2); notebook 04 writes ReLU"
_ONE_DROPOUT_EACH = ("one dropout module per sub-layer (the cached decoder in decoding.py reads each); dropout has "
                     "no state, so the numbers are the same")
DIFFERENCES: dict[tuple[str, str], tuple[dict[str, str], str]] = {
    ("02", "MultiHeadAttention.__init__"): ({"self.d_model = d_model": ""}, _KEEPS_FOR_CHECKS.format("d_model")),
    ("02", "MultiHeadAttention.forward"): (
        {"B, L_q, _ = query.shape": "", "L_k = key.size(1)": "",
         "if mask is not None:\n    if mask.dim() == 3:\n        mask = mask.unsqueeze(1)": "",
         "weights = attention_weights(q, k, mask)":
         "if mask is not None and mask.dim() == 3:\n    mask = mask.unsqueeze(1)\n"
         "_, weights = scaled_dot_product_attention(q, k, v, mask)"},
        "the package checks the mask's shape (B, L_q, L_k) before the projections, and computes only the "
        "weights (attention_weights: the cell's output is discarded there too)"),
    ("03", "sinusoidal_positional_encoding"): (
        {"inv_freq = torch.exp(-two_i / d_model * math.log(10000.0))": "",
         "angle = position * inv_freq": "angle = position / 10000 ** (two_i / d_model)"},
        "exp(-2i/D ln 10000) is 10000^(-2i/D) written as the Annotated Transformer writes it; the check cell "
        "compares the two to float32 rounding"),
    ("03", "PositionalEncoding.__init__"): ({"self.d_model = d_model": ""}, _KEEPS_FOR_CHECKS.format("d_model")),
    ("03", "PositionalEncoding.forward"): (
        {"pe = self.pe[:L].to(x.dtype)": "", "return self.dropout(x + pe)": "return self.dropout(x + self.pe[:L])"},
        "the table is cast to a float16 input's dtype (the dtype rule); a no-op for float32"),
    ("03", "TokenEmbedding.__init__"): (
        {"self.vocab_size = vocab_size": "", "nn.Embedding(self.vocab_size, self.d_model)":
         "nn.Embedding(vocab_size, d_model)"},
        "the package keeps vocab_size for its id checks in forward"),
    ("04", "LayerNorm.__init__"): (
        {"self.d_model = d_model": "", "(self.d_model)": "(d_model)"}, _KEEPS_FOR_CHECKS.format("d_model")),
    ("04", "LayerNorm.forward"): (
        {"if x.dtype in _LOW_PRECISION:\n    return self.forward(x.float()).to(x.dtype)": ""},
        "float16 input is normalised in float32 and cast back (the dtype rule)"),
    ("04", "FeedForward.__init__"): (
        {"self.d_model = d_model": "", "self.d_ff = d_ff": "", "self.activation = ACTIVATIONS[activation]()": "",
         "nn.Linear(self.d_model, self.d_ff)": "nn.Linear(d_model, d_ff)",
         "nn.Linear(self.d_ff, self.d_model)": "nn.Linear(d_ff, d_model)"}, _ACTIVATION),
    ("04", "FeedForward.forward"): ({"self.activation(": "torch.relu("}, _ACTIVATION),
    ("04", "EncoderLayer.__init__"): (
        {"FeedForward(d_model, d_ff, dropout, activation)": "FeedForward(d_model, d_ff, dropout)"},
        "the activation is passed on to FeedForward (08 builds BERT's GELU layers)"),
    ("04", "Encoder.__init__"): (
        {", activation) for _ in range(num_layers)))": ") for _ in range(num_layers)])",
         "nn.ModuleList((": "nn.ModuleList(["},
        "the activation is passed on to the layers (08 builds BERT's GELU layers)"),
    ("05", "DecoderLayer.__init__"): (
        {"self.dropout1 = nn.Dropout(dropout)": "self.dropout = nn.Dropout(dropout)",
         "self.dropout2 = nn.Dropout(dropout)": "", "self.dropout3 = nn.Dropout(dropout)": ""}, _ONE_DROPOUT_EACH),
    ("05", "DecoderLayer.forward"): (
        {"self.dropout1(": "self.dropout(", "self.dropout2(": "self.dropout(", "self.dropout3(": "self.dropout("},
        _ONE_DROPOUT_EACH),
    ("05", "Decoder.__init__"): (
        {"nn.ModuleList((": "nn.ModuleList([", "for _ in range(num_layers)))": "for _ in range(num_layers)])"},
        "a generator where the cell has a list: the same layers"),
    ("06", "make_src_mask"): (
        {"return padding_mask(src, pad_id)": "return (src != pad_id).unsqueeze(1)"},
        "the package calls notebook 01's padding_mask, which the cell writes out"),
    ("06", "make_tgt_mask"): (
        {"return padding_mask(tgt, pad_id) & causal_mask(tgt.size(1), device=tgt.device)":
         "keep = (tgt != pad_id).unsqueeze(1)\nreturn keep & causal_mask(tgt.size(1), device=tgt.device)"},
        "the package calls notebook 01's padding_mask, which the cell writes out"),
    ("06", "Transformer.__init__"): (
        {"self.d_model = d_model": ""}, "the package keeps d_model for the decoding helpers"),
    ("07", "masked_cross_entropy"): (
        {"V = logits.size(-1)": "", "real = targets != pad_id": "", "safe = targets.masked_fill(~real, 0)": "",
         "safe.unsqueeze(-1)": "targets.unsqueeze(-1)",
         "return per_position[real].mean()": "real = targets != pad_id\nreturn per_position[real].mean()"},
        "the package also takes a pad id outside [0, V) (Hugging Face's -100), which gather cannot index, and "
        "computes `real` first, for its argument checks"),
    ("08", "masked_mean_pool"): (
        {"if mask.dim() == 3 and mask.size(1) == 1:\n    mask = mask[:, 0]": ""},
        "the package also takes notebook 01's (B, 1, L) padding mask"),
    ("08", "TransformerClassifier.forward"): (
        {"pooled = h[:, 0] if self.pooling == 'cls' else masked_mean_pool(h, mask[:, 0])":
         "if self.pooling == 'cls':\n    pooled = h[:, 0]\n"
         "else:\n    pooled = masked_mean_pool(h, tokens != self.pad_id)"},
        "the package reuses the padding mask it built for the encoder (the same (B, L) True-for-real mask)"),
    ("09", "GPTBlock.__init__"): (
        {"self.dropout1 = nn.Dropout(dropout)": "self.dropout = nn.Dropout(dropout)",
         "self.dropout2 = nn.Dropout(dropout)": ""},
        _ONE_DROPOUT_EACH),
    ("09", "GPTBlock.forward"): (
        {"self.dropout1(": "self.dropout(", "self.dropout2(": "self.dropout("}, _ONE_DROPOUT_EACH),
    ("09", "GPT.__init__"): (
        {"init_gpt2_weights(self)":
         "for p in self.parameters():\n    if p.dim() >= 2:\n        nn.init.normal_(p, std=0.02)"},
        "GPT-2's initialisation is one function, shared with notebook 10's Llama and the benchmarks"),
    ("10", "RMSNorm.__init__"): (
        {"self.eps = float(eps)": "self.eps = eps"},
        "an int eps (eps=0 in the notebook's hand example) is stored as a float"),
    ("10", "GroupedQueryAttention.__init__"): (
        {"bias=bias)": "bias=False)"}, "a bias switch (off by default, as in Llama) for models that have one"),
    ("10", "rotary_tables"): ({"inv_freq": "theta"}, "the name Hugging Face's code gives the frequencies"),
}

# (notebook, qualified name) -> why the package's reference is another text. Every one of them is still
# proved equal to the solution cell: the notebook's check cell runs the cell against this reference
# on random inputs, under nbval.
NOT_ONE_TEXT: dict[tuple[str, str], str] = {
    ("01", "scaled_dot_product_attention"): "the weights are attention_weights() (shared with MultiHeadAttention, "
        "which applies dropout to them), and its softmax softmax_over_keys (a function: it has a CPU speed path)",
    ("06", "greedy_decode"): "one greedy loop (decoding._greedy_loop) serves the plain and the cached decoder",
    ("07", "train_step"): "one step function (train_step_with_loss) serves train_step and the fit loop, with the "
        "loss as an argument",
    ("09", "next_token_probs"): "sampling in float32 with a finite fill (a float16 model's logits), and no-op "
        "top_k/top_p skipped",
    ("09", "generate"): "generation with a key/value cache (the cell recomputes the whole context each step)",
    ("09", "load_gpt2_weights"): "GPT-2's names are one mapping table (convert_gpt2_state_dict), used both ways",
    ("10", "apply_rotary"): "rotate_half is its own function (Hugging Face's name, used by the cache path), and the "
        "arguments are validated first",
    ("10", "GroupedQueryAttention.forward"): "projection and attention are two methods (project, attend), so that "
        "generation with a cache rotates and stores keys between them",
    ("11", "merge_pair"): "the pair is unpacked and the length read once, outside the loop (the trainer calls it "
        "for every word a merge touches)",
    ("11", "train_bpe"): "the trainer updates the pair counts around each merge instead of recounting "
        "(issue 26: 1,000 merges of Shakespeare within 30 s)",
    ("11", "bpe_encode"): "encoding is BPETokenizer.encode (lookups built once, a cache per piece)",
    ("11", "bpe_decode"): "the ids are read one by one, so that a bad id is named with its position "
        "(TypeError / ValueError)",
}


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    """``{name or Class.method: node}`` of the module's top-level functions and methods."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            found.update({f"{node.name}.{m.name}": m for m in node.body if isinstance(m, ast.FunctionDef)})
        elif isinstance(node, ast.FunctionDef):
            found[node.name] = node
    return found


def _is_check(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id.lstrip("_").startswith("check_"))


def _normalised(body: list[ast.stmt]) -> list[str]:
    """The statements as text, without docstrings and argument checks (see the module docstring)."""
    out = []
    for s in body:
        if isinstance(s, ast.Expr) and (isinstance(s.value, ast.Constant) or _is_check(s.value)):
            continue
        if isinstance(s, ast.If) and not s.orelse and all(isinstance(b, ast.Raise) for b in s.body):
            continue
        if isinstance(s, ast.For) and not s.orelse and not _normalised(s.body):
            continue
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and _is_check(s.value) and len(s.value.args) >= 2:
            target, value = ast.unparse(s.targets[0]), ast.unparse(s.value.args[1])
            if target != value:
                out.append(f"{target} = {value}")
            continue
        if isinstance(s, ast.AnnAssign) and s.value is not None:  # `counts: Counter = Counter()`
            s = ast.Assign(targets=[s.target], value=s.value, lineno=s.lineno)
        if isinstance(s, ast.If):
            body, orelse = _normalised(s.body), _normalised(s.orelse)
            if not body and not orelse:
                continue
            s = ast.If(test=s.test, body=[ast.parse(t).body[0] for t in body] or [ast.Pass()],
                       orelse=[ast.parse(t).body[0] for t in orelse])
        out.append(ast.unparse(s))
    return out


def _exercises() -> list[tuple[str, str, ast.FunctionDef]]:
    """``(notebook, qualified name, node)`` for every function or method an exercise cell defines."""
    out = []
    for path in sorted(REPO.glob("solutions/[0-9][0-9]_*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            source = "".join(cell["source"])
            if cell["cell_type"] != "code" or "### BEGIN SOLUTION" not in source:
                continue
            lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
            out += [(path.name[:2], name, node) for name, node in _functions(ast.parse("\n".join(lines))).items()]
    return out


def _references() -> dict[str, ast.FunctionDef]:
    """``{name or Class.method: node}`` for every name ``course_utils/__init__.py`` imports from a module."""
    init = ast.parse((REPO / "course_utils" / "__init__.py").read_text())
    modules = {alias.asname or alias.name: node.module for node in init.body if isinstance(node, ast.ImportFrom)
               and node.level == 1 and node.module for alias in node.names}
    found = {}
    for module in set(modules.values()):
        path = REPO / "course_utils" / (module.replace(".", "/") + ".py")
        if path.exists():
            found.update({q: f for q, f in _functions(ast.parse(path.read_text())).items()
                          if modules.get(q.split(".")[0]) == module})
    return found


EXERCISES = _exercises()
REFERENCES = _references()


def _apply(replacements: dict[str, str], statements: list[str]) -> list[str]:
    out = []
    for statement in statements:
        for old, new in replacements.items():
            statement = new if old == statement else statement.replace(old, new)
        out += [line for line in [statement] if line]
    return "\n".join(out).splitlines() and [ast.unparse(s) for s in ast.parse("\n".join(out)).body]


def test_every_exercise_is_found_and_has_a_reference():
    assert len(EXERCISES) >= 50, [(n, q) for n, q, _ in EXERCISES]
    missing = [(n, q) for n, q, _ in EXERCISES if q not in REFERENCES and (n, q) not in NOT_ONE_TEXT]
    assert not missing, f"exercises with no reference of the same name in course_utils: {missing}"


def test_every_declaration_names_an_exercise():
    exercises = {(n, q) for n, q, _ in EXERCISES}
    assert not (set(DIFFERENCES) | set(NOT_ONE_TEXT)) - exercises, "a declared difference names no exercise"
    assert not set(DIFFERENCES) & set(NOT_ONE_TEXT)


@pytest.mark.parametrize(("notebook", "name", "node"), EXERCISES, ids=[f"{n}:{q}" for n, q, _ in EXERCISES])
def test_the_reference_is_the_solution_cell(notebook, name, node):
    if (notebook, name) in NOT_ONE_TEXT:
        pytest.skip(NOT_ONE_TEXT[notebook, name])
    replacements, _why = DIFFERENCES.get((notebook, name), ({}, ""))
    package = _apply(replacements, _normalised(REFERENCES[name].body))
    cell = _apply({}, _normalised(node.body))
    assert package == cell, f"course_utils' {name} drifted from solutions/{notebook}'s cell"
    if replacements:  # a declared difference that no longer exists is stale
        assert _apply({}, _normalised(REFERENCES[name].body)) != cell, f"{name}: the declared difference is gone"
