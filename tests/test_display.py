"""How a verdict is shown: the plain text exactly as the checker wrote it (terminals, the
grader, text/plain in a notebook), and an HTML block built from it in Jupyter and Colab."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch

from course_utils.checks import check_causal_mask
from course_utils.checks._core import CheckResult
from course_utils.checks._display import mimebundle, verdict_html

ROOT = Path(__file__).resolve().parent.parent

GREEN, RED, GREY = "#2e7d32", "#c62828", "#757575"


class _Text(HTMLParser):
    """The text a browser shows for some HTML, and the text inside <code>/<pre>."""

    def __init__(self):
        super().__init__()
        self.text, self.mono, self._depth = [], [], 0

    def handle_starttag(self, tag, attrs):
        if tag in ("div", "pre"):
            self.text.append(" ")  # a block starts on its own line
        if tag in ("code", "pre"):
            self._depth += 1
            self.mono.append("")

    def handle_endtag(self, tag):
        if tag in ("code", "pre"):
            self._depth -= 1

    def handle_data(self, data):
        self.text.append(data)
        if self._depth:
            self.mono[-1] += data


def shown(markup: str) -> tuple[str, list[str]]:
    parser = _Text()
    parser.feed(markup)
    return " ".join("".join(parser.text).split()), parser.mono


# (status, feedback, mark colour, words in <code>/<pre>, text that must be shown)
CASES = [
    ("passed", "[OK] causal_mask: all checks passed (7 sizes, on CPU).", GREEN,
     ["causal_mask"], ["causal_mask all checks passed (7 sizes, on CPU)."]),
    ("passed", "[OK] padding_mask: all checks passed.", GREEN, ["padding_mask"], ["padding_mask all checks passed."]),
    ("not implemented",
     "[ ] LayerNorm: not implemented yet. Replace the lines `# YOUR CODE HERE` and `raise NotImplementedError(...)` "
     "with your code, run that cell, then run this check again.\n    Stuck? Ask for a hint: hint(\"LayerNorm\").",
     GREY, ["LayerNorm", "# YOUR CODE HERE", "raise NotImplementedError(...)", 'hint("LayerNorm")'],
     ["LayerNorm not implemented yet. Replace the lines", "with your code, run that cell"]),
    ("error",
     "[X] scaled_dot_product_attention: your code raised RuntimeError while running on (B, L_q, d_k) = (2, 3, 4): "
     "mat1 and mat2 shapes cannot be multiplied (6x4 and 3x4)\n    at line 7 (in scaled_dot_product_attention): "
     "scores = query @ key.T / d_k ** 0.5\n    Stuck? Ask for a hint: hint(\"scaled_dot_product_attention\").",
     RED, ["scaled_dot_product_attention", "scores = query @ key.T / d_k ** 0.5", 'hint("scaled_dot_product_attention")'],  # noqa: E501
     ["scaled_dot_product_attention your code raised RuntimeError", "mat1 and mat2 shapes cannot be multiplied (6x4 and 3x4)",  # noqa: E501
      "at line 7 (in scaled_dot_product_attention):"]),
    ("failed",
     "[X] causal_mask: the mask is upside down: True must be on and below the diagonal (x < y & z > w).\n"
     "    yours    row 0: [True, False]\n    expected row 0: [True, True]", RED,
     ["causal_mask", "yours    row 0: [True, False]", "expected row 0: [True, True]"],
     ["causal_mask the mask is upside down", "(x < y & z > w)."]),
    ("failed", "a first line that is not a checker's usual one <b>", RED, [],
     ["a first line that is not a checker's usual one <b>"]),
]


@pytest.mark.parametrize("status, feedback, colour, mono, texts", CASES, ids=[c[0] + str(i) for i, c in enumerate(CASES)])  # noqa: E501
def test_html_shows_mark_diagnosis_code_and_hint(status, feedback, colour, mono, texts):
    markup = verdict_html(feedback, status)
    text, code = shown(markup)
    assert f"border-left: 4px solid {colour}" in markup
    assert f'<span style="color: {colour};' in markup  # the mark
    assert {"passed": "\u2714", "failed": "\u2718", "error": "\u2718", "not implemented": "\u2610"}[status] in text
    for part in texts:
        assert part in text, (part, text)
    assert [m for m in code if m.strip()] == mono
    assert "white-space: normal" in markup and "overflow-wrap: break-word" in markup  # no mid-word breaks
    # nothing from the feedback becomes markup: every tag is one this module writes
    assert set(re.findall(r"<(\w+)", markup)) <= {"div", "span", "code", "pre"}
    # every word of the verdict is shown (the [X] mark and the colon become the header)
    for word in re.sub(r"^\[(OK|X| )\]", "", feedback).replace(":", " ").replace("`", "").split():
        assert word in text.replace(":", " ").split(), word


def test_real_verdicts_keep_their_text_and_show_the_student_line(tmp_path):
    """Verdicts of a real checker on a passing, a failing, a raising and a stub answer."""
    file = tmp_path / "student.py"
    file.write_text(
        "import torch\n"
        "def right(size, device=None):\n    return torch.ones(size, size, dtype=torch.bool, device=device).tril()\n"
        "def upside_down(size, device=None):\n    return torch.ones(size, size, dtype=torch.bool, device=device).triu()\n"  # noqa: E501
        "def raising(size, device=None):\n    return torch.ones(size).tril(undefined_name)\n"
        "def stub(size, device=None):\n    raise NotImplementedError()\n"
    )
    namespace: dict = {}
    exec(compile(file.read_text(), str(file), "exec"), namespace)
    seen = {}
    for name in ("right", "upside_down", "raising", "stub"):
        result = check_causal_mask(namespace[name])
        bundle = result._repr_mimebundle_()
        assert bundle["text/plain"] == result.feedback
        assert result._repr_html_() == bundle["text/html"] == verdict_html(result.feedback, result.status)
        seen[name] = (result.status, *shown(bundle["text/html"]))
    assert seen["right"][0] == "passed" and "causal_mask all checks passed" in seen["right"][1]
    assert seen["upside_down"][0] == "failed" and 'hint("causal_mask")' in seen["upside_down"][2]
    assert seen["raising"][0] == "error" and "return torch.ones(size).tril(undefined_name)" in seen["raising"][2]
    assert seen["stub"][0] == "not implemented"


def test_plain_python_prints_exactly_the_feedback(capsys):
    result = check_causal_mask(lambda size, device=None: torch.ones(size, size, dtype=torch.bool).tril())
    assert capsys.readouterr().out == result.feedback + "\n"
    result.show()
    assert capsys.readouterr().out == result.feedback + "\n"
    result._ipython_display_()  # already shown: nothing again
    assert capsys.readouterr().out == ""
    fresh = CheckResult("x", False, "[X] x: wrong.", "failed")
    fresh._ipython_display_()
    assert capsys.readouterr().out == "[X] x: wrong.\n"


def test_terminal_ipython_prints_exactly_the_feedback():
    """IPython in a terminal prints the text/plain form: the same line as plain Python."""
    pytest.importorskip("IPython")
    code = (
        "import torch\n"
        "from course_utils.checks import check_causal_mask\n"
        "r = check_causal_mask(lambda size, device=None: torch.ones(size, size, dtype=torch.bool).triu())\n"
        "print('FEEDBACK=' + repr(r.feedback))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-m", "IPython", "--quick", "--no-banner", "--colors=NoColor", "-c", code],
        capture_output=True, text=True, cwd=ROOT, timeout=120, env=env,
    )
    assert done.returncode == 0, done.stderr
    shown_text, feedback_line = done.stdout.rsplit("FEEDBACK=", 1)
    assert shown_text == eval(feedback_line) + "\n"  # noqa: S307 - our own repr


def test_notebook_stores_one_display_with_the_text_and_the_html(tmp_path):
    """In a Jupyter kernel a check publishes one display_data: text/plain is the verdict's
    text exactly (what nbval and the grader compare), text/html the rich block."""
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        "import torch\n"
        "from course_utils.checks import check_causal_mask\n"
        "print('before')\n"
        "result = check_causal_mask(lambda size, device=None: torch.ones(size, size, dtype=torch.bool).triu())\n"
        "print('after')\n"
        "result"
    ), nbformat.v4.new_code_cell("print(result.feedback)")]
    from course_tools.kernels import run_notebook

    run_notebook(nb, tmp_path, timeout=120)
    outputs = nb.cells[0].outputs
    assert [o.output_type for o in outputs] == ["stream", "display_data", "stream"]
    assert outputs[0].text == "before\n" and outputs[2].text == "after\n"  # no second display for `result`
    feedback = nb.cells[1].outputs[0].text[:-1]
    assert outputs[1].data["text/plain"] == feedback
    assert feedback.startswith("[X] causal_mask: ")
    assert outputs[1].data["text/html"] == verdict_html(feedback, "failed")
    assert set(outputs[1].data) == {"text/plain", "text/html"}


def test_mimebundle_has_exactly_two_forms():
    bundle = mimebundle("[OK] f: all checks passed.", "passed")
    assert set(bundle) == {"text/plain", "text/html"} and bundle["text/plain"] == "[OK] f: all checks passed."
    assert html.escape("<") not in verdict_html("[OK] f: all checks passed.", "passed")
