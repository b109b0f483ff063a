"""The machinery shared by every checker (course_utils/checks/_core.py), and two promises
that hold for all checkers at once: each accepts the reference implementation, and its
verdict on a correct solution prints the same text every run (solutions' outputs are
compared by nbval, and the checkers draw fresh random inputs each call)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from torch import nn

import course_utils
from course_utils import checks, training
from course_utils.checks import _core
from course_utils.checks._core import (
    CheckResult,
    call_student,
    checker,
    expect_close,
    hint,
)

# every checker and the reference it must accept
REFERENCES = {
    "check_scaled_dot_product_attention": course_utils.scaled_dot_product_attention,
    "check_causal_mask": course_utils.causal_mask,
    "check_padding_mask": course_utils.padding_mask,
    "check_split_heads": course_utils.split_heads,
    "check_merge_heads": course_utils.merge_heads,
    "check_multi_head_attention": course_utils.MultiHeadAttention,
    "check_sinusoidal_positional_encoding": course_utils.sinusoidal_positional_encoding,
    "check_positional_encoding": course_utils.PositionalEncoding,
    "check_token_embedding": course_utils.TokenEmbedding,
    "check_layer_norm": course_utils.LayerNorm,
    "check_feed_forward": course_utils.FeedForward,
    "check_encoder_layer": course_utils.EncoderLayer,
    "check_encoder": course_utils.Encoder,
    "check_decoder_layer": course_utils.DecoderLayer,
    "check_decoder": course_utils.Decoder,
    "check_transformer": course_utils.Transformer,
    "check_make_src_mask": course_utils.make_src_mask,
    "check_make_tgt_mask": course_utils.make_tgt_mask,
    "check_greedy_decode": course_utils.greedy_decode,
    "check_shift_targets": training.shift_targets,
    "check_masked_cross_entropy": training.masked_cross_entropy,
    "check_noam_lr": training.noam_lr,
    "check_train_step": training.train_step,
    "check_gelu": course_utils.gelu,
    "check_masked_mean_pool": course_utils.masked_mean_pool,
    "check_transformer_classifier": course_utils.TransformerClassifier,
    "check_gpt_block": course_utils.GPTBlock,
    "check_gpt": course_utils.GPT,
    "check_next_token_probs": course_utils.next_token_probs,
    "check_generate": course_utils.generate,
    "check_load_gpt2_weights": course_utils.load_gpt2_weights,
    "check_rms_norm": course_utils.RMSNorm,
    "check_rotary_tables": course_utils.rotary_tables,
    "check_apply_rotary": course_utils.apply_rotary,
    "check_swiglu": course_utils.SwiGLU,
    "check_grouped_query_attention": course_utils.GroupedQueryAttention,
    "check_count_pairs": course_utils.count_pairs,
    "check_merge_pair": course_utils.merge_pair,
    "check_train_bpe": course_utils.train_bpe,
    "check_bpe_encode": course_utils.bpe_encode,
    "check_bpe_decode": course_utils.bpe_decode,
}


def test_every_exported_checker_has_a_reference_here():
    exported = {name for name in checks.__all__ if name.startswith("check_")}
    assert exported == set(REFERENCES)


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_reference_passes_with_the_same_words_every_run(name, capsys):
    check = getattr(checks, name)
    first, second = check(REFERENCES[name]), check(REFERENCES[name])
    assert first.passed and second.passed, first.feedback
    assert first.status == "passed" and first.mistake is None
    assert first.feedback == second.feedback, "the success line must not depend on the random inputs"
    assert first.feedback.startswith("[OK] ")
    assert first.exercise in _core.HINTS, "every exercise offers hints"
    printed = capsys.readouterr().out
    assert printed == first.feedback + "\n" + second.feedback + "\n"


# ---------------------------------------------------------------- the decorator

@checker("demo")
def check_demo(fn):
    x = torch.arange(6.0).reshape(2, 3)  # (2, 3)
    expect_close(
        "output",
        call_student(fn, x),
        x * 2,
        mistakes=[("added", "you added 2 instead of doubling.", lambda: x + 2)],
    )
    return "one case"


def test_verdicts_and_result_fields(capsys):
    ok = check_demo(lambda x: x * 2)
    assert isinstance(ok, CheckResult) and bool(ok) and ok.status == "passed"
    assert ok.feedback == "[OK] demo: all checks passed (one case)."

    wrong = check_demo(lambda x: x + 2)
    assert not wrong and wrong.status == "failed" and wrong.mistake == "added"
    assert "you added 2 instead of doubling" in wrong.feedback
    assert 'hint("demo")' not in wrong.feedback  # no hints registered for "demo"

    other = check_demo(lambda x: x * 3)
    assert other.mistake == "values differ" and "largest difference" in other.feedback

    one_number = checker("demo")(lambda fn: expect_close("the loss", call_student(fn), torch.tensor(4.5)))
    scalar = one_number(lambda: torch.tensor(4.25))
    assert scalar.mistake == "values differ" and "the loss is 4.25000, expected 4.50000" in scalar.feedback
    assert "index" not in scalar.feedback  # a 0-d result has none to show

    shape = check_demo(lambda x: x.T * 2)
    assert shape.mistake == "wrong shape" and "(3, 2)" in shape.feedback and "(2, 3)" in shape.feedback

    not_tensor = check_demo(lambda x: [1, 2])
    assert not not_tensor and "returned list" in not_tensor.feedback
    capsys.readouterr()


def test_student_exception_names_type_message_and_line():
    def student(x):
        y = x + 1
        return y @ torch.ones(5, 5)  # the line a student must see

    result = check_demo(student)
    assert result.status == "error" and not result.passed
    assert "RuntimeError" in result.feedback
    assert "return y @ torch.ones(5, 5)" in result.feedback
    assert "Traceback" not in result.feedback


def test_stub_reads_not_implemented_yet():
    def student(x):
        # YOUR CODE HERE
        raise NotImplementedError()

    result = check_demo(student)
    assert result.status == "not implemented" and result.mistake == "not implemented"
    assert "not implemented yet" in result.feedback


def test_stub_verdict_names_the_notebook_stub_without_a_seed():
    def split_heads(x, num_heads):
        # YOUR CODE HERE
        raise NotImplementedError("split_heads: reshape and transpose ...")

    result = checks.check_split_heads(split_heads)
    assert result.status == "not implemented", result.feedback
    # the notebooks' stub has a message inside: name the line as the student sees it
    assert "`raise NotImplementedError(...)`" in result.feedback
    assert "seed" not in result.feedback  # a stub's verdict does not depend on the drawn inputs
    assert isinstance(result.seed, int)  # still recorded for the grader


def test_unfinished_earlier_exercise_is_named():
    class LayerNorm(nn.Module):
        def __init__(self, d_model, eps=1e-5):
            super().__init__()
            raise NotImplementedError()

    class EncoderLayer(course_utils.EncoderLayer):
        def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
            super().__init__(d_model, num_heads, d_ff, dropout, norm_first)
            self.norm1 = LayerNorm(d_model)  # the student's unfinished class

    result = checks.check_encoder_layer(EncoderLayer)
    assert result.status == "not implemented"
    assert result.feedback.startswith("[ ] EncoderLayer can't be checked yet: it uses your `LayerNorm`, which is "
                                      "still a stub (`LayerNorm.__init__` raises NotImplementedError)"), result.feedback
    assert "from course_utils import LayerNorm" in result.feedback


def test_a_bug_in_a_checker_becomes_a_verdict_not_an_exception():
    @checker("broken")
    def check_broken(fn):
        return {}["missing"]  # a bug in the checker itself

    result = check_broken(lambda: None)
    assert result.status == "error" and not result.passed
    assert "KeyError" in result.feedback
    assert f"(seed {result.seed}: check_broken(..., seed={result.seed}) repeats these inputs)" in result.feedback


def test_result_prints_once_in_a_notebook(capsys):
    result = check_demo(lambda x: x * 2)
    assert capsys.readouterr().out.count("[OK] demo") == 1
    result._ipython_display_()  # IPython calls this for a cell's last expression
    assert capsys.readouterr().out == ""
    fresh = CheckResult("demo", True, "[OK] demo: fine.", "passed")
    fresh._ipython_display_()
    assert capsys.readouterr().out == "[OK] demo: fine.\n"


def test_fresh_inputs_each_call_and_the_global_generator_is_untouched():
    seen = []

    @checker("rng")
    def check_rng(fn):
        seen.append(torch.rand(()).item())

    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    check_rng(None)
    check_rng(None)
    assert seen[0] != seen[1]
    assert torch.equal(torch.random.get_rng_state(), before)


# ---------------------------------------------------------------- hints

def test_hints_go_from_first_to_last_then_point_at_the_reference(capsys, monkeypatch):
    monkeypatch.setattr(_core, "_HINT_LEVEL", {})
    n = len(_core.HINTS["causal_mask"])
    for level in range(1, n + 1):
        hint("causal_mask")
        out = capsys.readouterr().out
        assert out.startswith(f"Hint {level}/{n} for causal_mask: ")
        assert ("from course_utils import causal_mask" in out) == (level == n)
    hint("causal_mask", 1)
    assert capsys.readouterr().out.startswith(f"Hint 1/{n}")


def test_unknown_hint_lists_the_known_ones(capsys):
    hint("no_such_exercise")
    out = capsys.readouterr().out
    assert "No hints for 'no_such_exercise'" in out and "causal_mask" in out


@pytest.mark.parametrize("name", sorted(_core.HINTS))
def test_every_hint_is_a_hint_not_a_solution(name):
    hints = _core.HINTS[name]
    assert 2 <= len(hints) <= 5
    for text in hints:
        # prose may say "return (output, weights)"; code would define or return on a line
        assert not re.search(r"\bdef \w+\(|\bclass \w+\(|^\s*return\b", text, re.M), text


# ---------------------------------------------------------------- replay, time limit, robustness

def test_the_seed_is_recorded_printed_on_failure_and_replays_the_inputs(monkeypatch):
    drawn = []

    @checker("draw")
    def check_draw(fn):
        x = torch.randn(3)
        drawn.append(x)
        expect_close("output", call_student(fn, x), x * 2)

    wrong = check_draw(lambda x: x * 3, seed=77)
    assert wrong.seed == 77 and "(seed 77: check_draw(..., seed=77) repeats these inputs)" in wrong.feedback
    again = check_draw(lambda x: x * 3, seed=77)
    assert torch.equal(drawn[0], drawn[1]) and again.feedback == wrong.feedback
    monkeypatch.setenv("COURSE_CHECK_SEED", "77")
    from_env = check_draw(lambda x: x * 3)
    assert from_env.seed == 77 and torch.equal(drawn[2], drawn[0])
    monkeypatch.delenv("COURSE_CHECK_SEED")
    fresh = check_draw(lambda x: x * 2)
    assert fresh.passed and isinstance(fresh.seed, int) and "seed" not in fresh.feedback  # [OK] stays the same text
    bad = check_draw(lambda x: x * 2, seed="soon")
    assert bad.status == "failed" and "seed must be an int" in bad.feedback and "'soon'" in bad.feedback
    monkeypatch.setenv("COURSE_CHECK_SEED", "soon")
    bad_env = check_draw(lambda x: x * 2)
    assert bad_env.status == "failed" and "$COURSE_CHECK_SEED must be an int" in bad_env.feedback
    assert check_draw(lambda x: x * 3, seed=77).feedback == wrong.feedback  # seed= wins over the variable


@pytest.mark.parametrize("student, status", [(lambda x: x * 3, "failed"), (lambda x: x @ x, "error")],
                         ids=["failed", "error"])
def test_every_verdict_but_ok_and_stub_ends_with_its_seed_and_the_variable_replays_it(student, status, monkeypatch):
    first = check_demo(student, seed=5)
    assert first.status == status and first.seed == 5
    assert first.feedback.endswith("\n    (seed 5: check_demo(..., seed=5) repeats these inputs)")
    monkeypatch.setenv("COURSE_CHECK_SEED", "5")
    again = check_demo(student)
    assert (again.status, again.mistake, again.feedback, again.seed) == (status, first.mistake, first.feedback, 5)


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_every_checker_replays_a_wrong_verdict_from_its_seed(name, monkeypatch):
    check = getattr(checks, name)
    first = check(lambda *a, **k: 0, seed=2024)  # wrong for every exercise
    again = check(lambda *a, **k: 0, seed=2024)
    assert not first.passed and first.seed == 2024 and "seed 2024" in first.feedback
    assert (again.feedback, again.mistake, again.status) == (first.feedback, first.mistake, first.status)
    monkeypatch.setenv("COURSE_CHECK_SEED", "2024")
    from_env = check(lambda *a, **k: 0)
    assert (from_env.feedback, from_env.mistake, from_env.seed) == (first.feedback, first.mistake, 2024)


def test_a_hanging_student_ends_the_check_with_a_clear_message(monkeypatch):
    import time

    monkeypatch.setattr(_core, "TIME_LIMIT_S", 0.3)

    def student(x):
        while True:
            try:
                time.sleep(1000)
            except Exception:  # a student's catch-all must not swallow the time limit
                pass

    start = time.monotonic()
    result = check_demo(student)
    assert time.monotonic() - start < 5
    assert result.status == "error" and result.mistake == "time limit" and not result.passed
    assert "did not finish within 0.3 s" in result.feedback and "time.sleep(1000)" in result.feedback
    assert f"seed {result.seed}" in result.feedback
    assert check_demo(lambda x: x * 2).passed  # the alarm is gone: the next check runs normally
    time.sleep(0.4)  # and no stray alarm fires later


def test_the_time_limit_also_holds_off_the_main_thread(monkeypatch):
    import threading
    import time

    monkeypatch.setattr(_core, "TIME_LIMIT_S", 0.3)
    results = []
    worker = threading.Thread(target=lambda: results.append(check_demo(lambda x: time.sleep(1000))))
    worker.start()
    worker.join(5)
    assert results and results[0].mistake == "time limit" and "did not finish" in results[0].feedback


def test_an_outer_alarm_survives_a_check():
    import signal
    import time

    if not hasattr(signal, "setitimer"):
        pytest.skip("no interval timers on this platform")
    fired = []
    previous = signal.signal(signal.SIGALRM, lambda *a: fired.append(1))
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        assert check_demo(lambda x: x * 2).passed
        assert 0 < signal.getitimer(signal.ITIMER_REAL)[0] <= 0.5
        time.sleep(0.7)
        assert fired == [1]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("returned", [lambda x: (x * 2).numpy(), lambda x: [(x * 2).numpy()]])
def test_a_numpy_array_is_named_not_blamed_as_an_exception(returned):
    result = check_demo(returned)
    assert result.status == "failed" and result.mistake == "not a tensor"
    assert "returned a numpy.ndarray, expected a torch.Tensor" in result.feedback
    assert "raised" not in result.feedback


def test_patched_torch_comparisons_cannot_turn_a_wrong_verdict_into_ok(monkeypatch):
    always = lambda *a, **k: True  # noqa: E731 - what a notebook might do
    for fn in ("allclose", "equal", "isclose"):
        monkeypatch.setattr(torch, fn, always)
    monkeypatch.setattr(torch, "isnan", lambda t: torch.zeros_like(t, dtype=torch.bool))
    monkeypatch.setattr(torch.testing, "assert_close", lambda *a, **k: None)
    assert check_demo(lambda x: x + 2).mistake == "added"
    assert check_demo(lambda x: x * 3).mistake == "values differ"
    assert check_demo(lambda x: x * 2).passed


class _MultiplyNotAdd(course_utils.PositionalEncoding):
    def forward(self, x):
        return self.dropout(x * self.pe[: x.size(1)])


class _NoScale(course_utils.TokenEmbedding):
    def forward(self, tokens):
        return self.embedding(tokens)


class _NoOutputProjection(course_utils.MultiHeadAttention):
    def __init__(self, d_model, num_heads, dropout=0.0):
        super().__init__(d_model, num_heads, dropout)
        self.w_o = nn.Identity()


# one wrong implementation per checker of notebooks 01-03: (checker, student, mistake named)
WRONG_01_03 = [
    ("check_scaled_dot_product_attention",
     lambda q, k, v, mask=None: course_utils.scaled_dot_product_attention(q * q.size(-1) ** 0.5, k, v, mask),
     "no scaling"),
    ("check_causal_mask", lambda size, device=None: torch.ones(size, size, dtype=torch.bool, device=device).triu(),
     "upper triangle"),
    ("check_padding_mask", lambda tokens, pad_id: (tokens == pad_id).unsqueeze(1), "inverted mask"),
    ("check_split_heads", lambda x, h: x.reshape(x.size(0), h, x.size(1), -1), "view(B, H, L, d_k) without transpose"),
    ("check_merge_heads", lambda x: x.reshape(x.size(0), x.size(2), -1), "reshape without transpose"),
    ("check_multi_head_attention", _NoOutputProjection, "wrong submodule"),
    ("check_sinusoidal_positional_encoding",
     lambda n, d: course_utils.sinusoidal_positional_encoding(n + 1, d)[1:], "positions start at 1"),
    ("check_positional_encoding", _MultiplyNotAdd, "multiplied instead of added"),
    ("check_token_embedding", _NoScale, "embeddings not scaled"),
]


@pytest.mark.parametrize("name, student, mistake", WRONG_01_03, ids=[n for n, _, _ in WRONG_01_03])
def test_patched_torch_comparisons_leave_the_01_03_verdicts_unchanged(name, student, mistake, monkeypatch):
    check = getattr(checks, name)
    plain = check(student, seed=31)
    assert plain.mistake == mistake, plain.feedback
    for fn in ("allclose", "equal", "isclose"):
        monkeypatch.setattr(torch, fn, lambda *a, **k: True)
    for fn in ("isnan", "isfinite"):
        monkeypatch.setattr(torch, fn, lambda t, fn=fn: torch.full_like(t, fn == "isfinite", dtype=torch.bool))
    monkeypatch.setattr(torch.testing, "assert_close", lambda *a, **k: None)
    patched = check(student, seed=31)
    assert (patched.feedback, patched.mistake) == (plain.feedback, plain.mistake)


class _NormScaleAndShiftSwapped(course_utils.LayerNorm):
    def forward(self, x):
        mean, var = x.mean(-1, keepdim=True), x.var(-1, keepdim=True, unbiased=False)
        return self.bias * (x - mean) / torch.sqrt(var + self.eps) + self.weight


# and one per notebook 04-09 (cheap ones: the replay test runs them at fresh seeds)
WRONG_04_09 = [
    ("check_layer_norm", _NormScaleAndShiftSwapped, "weight and bias swapped"),
    ("check_make_src_mask", lambda src, pad_id: (src == pad_id).unsqueeze(1), "inverted mask"),
    ("check_shift_targets", lambda tgt: (tgt[:, 1:], tgt[:, :-1]), "shifted the wrong way"),
    ("check_noam_lr", lambda step, d_model, warmup, factor=1.0: factor * d_model**-0.5
     * min(step**-0.5, step * warmup**-0.5), "warmup^-0.5 instead of warmup^-1.5"),
    ("check_masked_mean_pool", lambda x, mask: x.mean(1), "mean over padding"),
    ("check_next_token_probs",
     lambda logits, temperature=1.0, top_k=None, top_p=None: torch.softmax(logits * temperature, -1),
     "temperature multiplied"),
]


@pytest.mark.parametrize("name, student, mistake", WRONG_01_03 + WRONG_04_09,
                         ids=[n for n, _, _ in WRONG_01_03 + WRONG_04_09])
def test_the_printed_seed_replays_the_same_inputs_and_verdict(name, student, mistake, monkeypatch):
    check = getattr(checks, name)
    first = check(student)  # a fresh random seed, printed in the feedback
    seed = int(re.search(r"\(seed (\d+):", first.feedback).group(1))
    assert first.seed == seed and first.mistake == mistake, first.feedback
    monkeypatch.setenv("COURSE_CHECK_SEED", str(seed))
    again = check(student)
    assert (again.feedback, again.mistake, again.seed) == (first.feedback, first.mistake, seed)


# ---------------------------------------------------------------- the registry of mistake names
def _literal_names(paths, keyword_args=("mistake", "eval_name")):
    """String constants passed as ``mistake=`` (or ``eval_name=``) in ``paths``, and those
    compared with a result's ``.mistake`` (``r.mistake == "..."``, ``r.mistake in (...)``)."""
    import ast

    names = {}
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.keyword) and node.arg in keyword_args:
                value = node.value
                for c in [value.body, value.orelse] if isinstance(value, ast.IfExp) else [value]:
                    if isinstance(c, ast.Constant) and isinstance(c.value, str):
                        names[c.value] = path.name
            if isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute) and node.left.attr == "mistake":
                for right in node.comparators:
                    for c in [right, *getattr(right, "elts", [])]:
                        if isinstance(c, ast.Constant) and isinstance(c.value, str):
                            names[c.value] = path.name
    return names


def test_every_mistake_name_is_in_the_registry():
    from pathlib import Path

    from course_utils.checks._mistakes import GENERIC
    from course_utils.checks.catalogue import catalogues, registry

    MISTAKES = registry()  # raises if a table uses a name declared nowhere, or twice with other words
    root = Path(__file__).resolve().parent.parent
    emitted = _literal_names(sorted((root / "course_utils" / "checks").glob("*.py")))
    # (this file's own toy checker names its toy mistake "added")
    expected = _literal_names(sorted(p for p in (root / "tests").glob("test_checks_*.py") if p != Path(__file__).resolve()))  # noqa: E501
    unknown = {n: f for n, f in {**emitted, **expected}.items() if n not in MISTAKES}
    assert not unknown, f"names missing from the registry (a table, or course_utils/checks/_mistakes.py): {unknown}"
    # and the registry holds no stale name: a table's names are its entries; each generic name is
    # in a table or in a checker's source (_core's probes, the decorator)
    tabled = {entry.name for table in catalogues() for entry in table.entries}
    source = "".join(p.read_text() for p in (root / "course_utils" / "checks").glob("*.py") if p.name != "_mistakes.py")
    stale = [n for n in GENERIC if n not in tabled and f'"{n}"' not in source]
    assert not stale, f"registry names no checker uses: {stale}"
    assert all(m and "\n" not in m for m in MISTAKES.values())


def test_each_table_entry_words_its_message_from_named_fields():
    """Every table entry's message is a template whose fields are names (no positional {}), and
    every entry but a shared probe's has one; entries of one name share one meaning."""
    import string

    from course_utils.checks.catalogue import Probe, catalogues

    for table in catalogues():
        assert table.entries and table.names(), table.exercise
        for entry in table.entries:
            fields = [f for _, f, _, _ in string.Formatter().parse(entry.message) if f is not None]
            assert all(f.isidentifier() for f in fields), (table.exercise, entry.name, fields)
            assert isinstance(entry.detect, Probe) or entry.message, (table.exercise, entry.name)


@pytest.mark.parametrize("how", ["sys.exit", "exit", "in __init__"])
def test_a_student_calling_sys_exit_gets_a_verdict_not_an_exit(how):
    # trial A: SystemExit used to escape the checker (a real interrupt still stops it: below)
    import sys

    def fn(size, device=None):
        if how == "sys.exit":
            sys.exit(1)
        raise SystemExit("bye")

    class Quits(nn.Module):
        def __init__(self, d_model, eps=1e-5):
            super().__init__()
            sys.exit(0)

    result = checks.check_layer_norm(Quits) if how == "in __init__" else checks.check_causal_mask(fn)
    assert result.status == "error" and not result.passed
    assert "called sys.exit()" in result.feedback and "return" in result.feedback


@pytest.mark.parametrize("exc", [KeyboardInterrupt, GeneratorExit])
@pytest.mark.parametrize("where", ["function", "in __init__"])
def test_a_student_raising_keyboard_interrupt_or_generator_exit_gets_a_verdict(exc, where):
    """A checker never raises at a student: what the student's code raises itself is an error of
    that code (issue 23), in a call the checker makes or in a module's own calls."""
    def fn(size, device=None):
        raise exc

    class Raises(nn.Module):
        def __init__(self, d_model, eps=1e-5):
            super().__init__()
            raise exc

    result = checks.check_layer_norm(Raises) if where == "in __init__" else checks.check_causal_mask(fn)
    assert result.status == "error" and not result.passed
    assert f"your code raised {exc.__name__}" in result.feedback


def test_a_real_interrupt_still_stops_the_check():
    """SIGINT during a check (the student stops the cell) still ends it with KeyboardInterrupt."""
    import signal

    def fn(size, device=None):
        signal.raise_signal(signal.SIGINT)
        return torch.ones(size, size, dtype=torch.bool, device=device).tril()

    with pytest.raises(KeyboardInterrupt):
        checks.check_causal_mask(fn)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back


# ---------------------------------------------------------------- the contract's parameter names (trial C, E)
def _renamed(exercise, part, old):
    """The reference of ``exercise`` with parameter ``old`` of ``part`` ("" = the function,
    else ``__init__`` / ``forward``) renamed ``old + "_"`` (as ``attn_mask`` for ``mask``)."""
    ref = getattr(course_utils, exercise)
    import inspect

    def rename(fn):
        sig = inspect.signature(fn)
        params = [p.replace(name=f"{old}_") if p.name == old else p for p in sig.parameters.values()]

        def wrapper(*args, **kwargs):
            return fn(*args, **kwargs)

        wrapper.__signature__ = sig.replace(parameters=params)
        return wrapper

    if not part:
        return rename(ref)
    return type(f"Renamed{exercise}", (ref,), {part: rename(getattr(ref, part))})


RENAMINGS = [
    pytest.param(exercise, part, name, id=f"{exercise}.{part or 'call'}.{name}")
    for exercise, parts in _core.CONTRACT_PARAMETERS.items()
    for part, (names, _) in parts.items()
    for name in names
]
CHECKS_BY_EXERCISE = {getattr(c, "exercise", None): c for c in vars(checks).values() if callable(c)}


@pytest.mark.parametrize("exercise, part, name", RENAMINGS)
def test_every_renamed_contract_parameter_is_named(exercise, part, name):
    result = CHECKS_BY_EXERCISE[exercise](_renamed(exercise, part, name), seed=0)
    assert result.mistake == "parameter renamed" and not result.passed, result.feedback
    assert f"no parameter named `{name}`" in result.feedback and f"{name}_" in result.feedback, result.feedback


def test_extra_optional_parameters_and_kwargs_are_accepted():
    def sdpa(query, key, value, mask=None, dropout_p=0.0):
        return course_utils.scaled_dot_product_attention(query, key, value, mask)

    def with_kwargs(*args, **kwargs):
        return course_utils.scaled_dot_product_attention(*args, **kwargs)

    for fn in (sdpa, with_kwargs):
        _core.require_contract_parameters(fn, "scaled_dot_product_attention")  # no Failure raised
    assert checks.check_scaled_dot_product_attention(sdpa, seed=0).passed


@pytest.mark.parametrize("student, wrong", [
    (lambda x: torch.zeros(x.shape, device=x.device).masked_fill(x > 0, 1.0), False),
    (lambda x: x.new_zeros(x.shape) + x.sum().item(), False),  # a Python number mixes with any device
    (lambda x: (x * torch.tensor(2.0)).to(x.device), False),  # a 0-d constant too
    (lambda x: torch.zeros(x.shape).to(x.device) + x, False),
    (lambda x: torch.zeros(x.shape).masked_fill(x > 0, 1.0), True),  # a mask built on the CPU
    (lambda x: torch.tensor(x.tolist()) * 2, True),
    (lambda x: torch.as_tensor(torch.ones(x.shape)) + 0 * x.sum().item(), True),
    (lambda x: (x * 2).cpu(), True),
    (lambda x: x[torch.arange(x.size(0)), torch.tensor([0, 2])], False),  # a CPU index picks from any device
    (lambda x: torch.ones(x.shape)[torch.arange(x.size(0))] * x, True),  # not from a CPU tensor
])
def test_the_cpu_run_watches_tensors_made_without_device(student, wrong):
    # what check_input_device does when the meta run cannot finish (meta has no values to read)
    x = torch.randn(2, 3)
    run = (lambda: _core.check_input_device(None, lambda: student(x), "your function", "x (2, 3)"))
    if wrong:
        with pytest.raises(_core.Failure, match="lands on the CPU"):
            run()
    else:
        run()


def test_no_message_speaks_of_the_contract():
    """Students never see docs/course-contract.md: verdicts and hints say "the exercise's shape"
    (every string in the checkers and every table entry's message, but the docstrings and the
    registry's meanings, which teachers read)."""
    import ast
    import pathlib

    from course_utils.checks.catalogue import catalogues

    found = [f"{table.exercise}: {entry.name!r}" for table in catalogues() for entry in table.entries
             if "contract" in entry.message.lower()]
    for path in sorted(pathlib.Path(checks.__file__).parent.glob("*.py")):
        if path.name in ("_mistakes.py", "catalogue.py"):  # meanings and the tables' machinery: for teachers
            continue
        tree = ast.parse(path.read_text())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and node.body
                      and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
        # Probe("a _core function") and Entry(name, meaning, ...)'s meaning, which teachers read
        probes = {id(arg) for node in ast.walk(tree) if isinstance(node, ast.Call)
                  for arg in {"Probe": node.args, "Entry": node.args[1:2]}.get(getattr(node.func, "id", ""), [])}
        found += [f"{path.name}:{node.lineno}: {node.value[:60]!r}" for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
                  and id(node) not in probes and "contract" in node.value.lower()]
    assert not found, found


def test_the_registry_names_each_mistake_once():
    """Two branches that each add a mistake of the same name would leave one description silently
    overwritten by the other (a dict literal keeps the last): one entry per name."""
    import ast

    source = Path(_core.__file__).with_name("_mistakes.py").read_text()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Dict):
            keys = [k.value for k in node.keys if isinstance(k, ast.Constant)]
            assert len(keys) == len(set(keys)), sorted({k for k in keys if keys.count(k) > 1})


@pytest.mark.parametrize("shape", [(2, 3), ()])
def test_wrong_values_with_gradients_show_no_torch_warning(shape):
    """A module's output carries requires_grad: reading its numbers for the message must not put
    PyTorch's "Converting a tensor with requires_grad=True to a scalar" warning in the verdict."""
    import warnings

    got = torch.ones(shape, requires_grad=True) * 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(_core.Failure) as failed:
            expect_close("the output", got, torch.ones(shape))
    assert failed.value.mistake == "values differ"


def test_a_catalogue_tries_its_entries_in_table_order_and_fills_the_messages():
    """The framework on a toy table: candidates in order with their fields, the first Output
    test that holds, a pattern's named groups as fields, and a stage no entry has raises."""
    from course_utils.checks._core import Failure
    from course_utils.checks.catalogue import Catalogue, Entry, Output, Raises, Reference

    table = Catalogue("toy", "00", [
        Entry("doubled", "twice the input", Reference(lambda c: [({}, c * 2)]), "twice {x}"),
        Entry("shifted", "plus k", Reference(lambda c: [(dict(k=k), c + k) for k in (1, 2)]), "plus {k} on {x}"),
        Entry("too big", "over 10", Output(lambda v: v > 10 and dict(by=v - 10), "size"), "over by {by}"),
        Entry("negative", "below 0", Output(lambda v: v < 0, "size"), "below zero"),
        Entry("int sqrt", "sqrt of an int", Raises(r"not (?P<t>int|float)", (TypeError,)), "a Python {t}"),
    ])
    assert table.names() == ["doubled", "shifted", "too big", "negative", "int sqrt"]
    assert [(n, m, v) for n, m, v in table.candidates(3, x="x")] == [
        ("doubled", "twice x", 6), ("shifted", "plus 1 on x", 4), ("shifted", "plus 2 on x", 5)]
    with pytest.raises(Failure) as failed:
        table.detect("size", 13)
    assert (failed.value.mistake, str(failed.value)) == ("too big", "over by 3")
    table.detect("size", 5)  # no test holds: nothing happens
    with pytest.raises(Failure) as failed:
        table.detect_raised(TypeError("must be Tensor, not int"), prefix="then: ")
    assert (failed.value.mistake, str(failed.value)) == ("int sqrt", "then: a Python int")
    table.detect_raised(ValueError("not int"))  # another type: not this entry
    with pytest.raises(KeyError, match="no Output entry at stage 'sizes'"):
        table.detect("sizes", 13)
