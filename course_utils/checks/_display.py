"""How a checker's verdict is shown: the plain text (``CheckResult.feedback``, what the
grader records and a terminal prints) and, in a notebook, one display with two forms:
``text/plain``, exactly that text, and ``text/html``, built from it alone (so nothing is in
one form and not the other): a coloured mark and the exercise's name, the diagnosis below
it wrapped at word boundaries (JupyterLab breaks a long plain line mid-word), the student's
line (``at line 7: ...``), ``hint("name")`` and `backticked` code in monospace, and the
``yours`` / ``expected`` tables kept aligned.
"""

from __future__ import annotations

import html
import re
import sys

_LOOK = {  # (mark, colour) by CheckResult.status
    "passed": ("\u2714", "#2e7d32"), "failed": ("\u2718", "#c62828"), "error": ("\u2718", "#c62828"),
    "not implemented": ("\u2610", "#757575"),
}
_FIRST_LINE = re.compile(r"^\[(?:OK|X| )\] (?P<exercise>[^:]+?):\s*(?P<message>.*)$")
_AT_LINE = re.compile(r"^at (?P<where>line \d+(?: \(in [^)]*\))?)(?:: (?P<code>.*))?$")
_HINT = re.compile(r'^(?P<before>.*?)(?P<call>hint\("[^"]*"\))(?P<after>\.?)$')
_TABLE_ROW = re.compile(r"^(yours|expected)\b")
_BACKTICKS = re.compile(r"`([^`]+)`")
_MONO = "font-family: var(--jp-code-font-family, SFMono-Regular, Menlo, Consolas, monospace); font-size: 0.95em;"
_CODE = f'<code style="{_MONO} background: rgba(127, 127, 127, 0.12); padding: 0 0.25em; border-radius: 3px;">'


def _inline(text: str) -> str:
    """Escape ``text`` for HTML, with `backticked` spans as inline code."""
    parts = _BACKTICKS.split(text)  # odd indices were inside backticks
    return "".join(f"{_CODE}{html.escape(part)}</code>" if i % 2 else html.escape(part) for i, part in enumerate(parts))


def _detail(line: str) -> str:
    """One continuation line of the feedback (its 4-space indent removed) as HTML."""
    block = 'style="margin: 0.2em 0 0 1.6em;"'
    if match := _AT_LINE.match(line):
        code = match.group("code")
        shown = f"at {html.escape(match.group('where'))}" + (":" if code else "")
        if code:
            shown += (
                f'<pre style="{_MONO} margin: 0.15em 0 0 0; padding: 0.2em 0.5em; white-space: pre-wrap; '
                f'background: rgba(127, 127, 127, 0.12); border-radius: 3px;">{html.escape(code)}</pre>'
            )
        return f"<div {block}>{shown}</div>"
    if match := _HINT.match(line):
        return (
            f"<div {block}>{_inline(match.group('before'))}{_CODE}{html.escape(match.group('call'))}</code>"
            f"{html.escape(match.group('after'))}</div>"
        )
    if "  " in line.strip() or _TABLE_ROW.match(line):  # yours / expected rows: keep the columns
        return f'<pre style="{_MONO} margin: 0.2em 0 0 1.6em; white-space: pre-wrap;">{html.escape(line)}</pre>'
    return f"<div {block}>{_inline(line)}</div>"


def verdict_html(feedback: str, status: str) -> str:
    """The HTML form of a verdict (see the module docstring)."""
    mark, colour = _LOOK.get(status, _LOOK["failed"])
    first, *rest = feedback.split("\n")
    match = _FIRST_LINE.match(first)  # else not a checker's usual first line: show it whole
    exercise, message = (match.group("exercise"), match.group("message")) if match else ("", first)
    header = f'<span style="color: {colour}; font-weight: bold; font-size: 1.1em;">{mark}</span> '
    if exercise:
        header += f"{_CODE}{html.escape(exercise)}</code>"
    lines = [f'<div style="margin: 0;">{header}</div>']
    if message:  # the diagnosis on its own line(s), below the header
        lines.append(f'<div style="margin: 0.25em 0 0 1.6em;">{_inline(message)}</div>')
    lines += [_detail(line[4:] if line.startswith("    ") else line.strip()) for line in rest if line.strip()]
    return (
        f'<div class="course-verdict course-verdict-{status.replace(" ", "-")}" style="border-left: 4px solid '
        f"{colour}; padding: 0.35em 0.7em; margin: 0.2em 0; line-height: 1.45; white-space: normal; "
        f'overflow-wrap: break-word; word-break: normal;">' + "".join(lines) + "</div>"
    )


def mimebundle(feedback: str, status: str) -> dict[str, str]:
    """``{"text/plain": feedback, "text/html": ...}``: what a notebook stores and shows."""
    return {"text/plain": feedback, "text/html": verdict_html(feedback, status)}


def show_verdict(feedback: str, status: str) -> None:
    """Show a verdict: one display with both forms under IPython (a notebook shows the
    HTML, a terminal IPython prints the text), ``print`` in plain Python."""
    ipython = sys.modules.get("IPython")  # never imported here: plain Python has no shell
    try:
        shell = ipython.get_ipython() if ipython is not None else None
    except Exception:  # noqa: BLE001 - a broken IPython falls back to print
        shell = None
    if shell is None:
        print(feedback)
        return
    from IPython.display import display

    display(mimebundle(feedback, status), raw=True)
