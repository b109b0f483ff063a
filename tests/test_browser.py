"""The course as a student sees it: JupyterLab from this environment in a real headless
Chromium (Debian's ``chromium`` and ``chromium-driver``, driven by ``selenium``).

One JupyterLab server serves copies of every solution notebook and a student copy made by
``course_tools.start``. Each solution must render with no MathJax error and no formula
left as raw ``$...$``, every image loaded (the Colab badge, fetched from the internet,
aside) and no error output; solutions 01 and 07 (the one with saved widget state) must open
unmodified, as the student copy must. In the student copy an exercise typed in and its check
must show the rich verdict, red then green.

Skipped, with a one-line reason, where Chromium, its driver or selenium is missing
(``.ci/run`` installs them when it runs as root on Debian).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
STUDENT = "01_attention.ipynb"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver") or next(
    (p for p in ("/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver") if os.path.exists(p)), None
)


def _missing() -> str | None:
    if CHROMIUM is None or DRIVER is None:
        return "no Chromium with chromedriver (Debian: apt-get install chromium chromium-driver)"
    for module in ("selenium", "jupyterlab"):
        try:
            __import__(module)
        except ImportError:
            return f"{module} is not installed (pip install {module})"
    return None


pytestmark = pytest.mark.skipif(_missing() is not None, reason=str(_missing()))

# JupyterLab settings for a quiet, deterministic test: every cell attached to the page (no
# virtual scrolling, so every formula and image is there to check), no news pop-up.
SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none", "kernelShutdown": True},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false", "checkForUpdates": False},
}
TIMEOUT = 90  # seconds for any one thing to appear; far more than it takes


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(what: str, check, timeout: float = TIMEOUT, every: float = 0.25):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """One JupyterLab server for the whole module: ``(url, token, folder)``."""
    home = tmp_path_factory.mktemp("lab")
    work = home / "work"
    (work / "solutions").mkdir(parents=True)
    import nbformat

    from course_tools import build, kernels, start

    # The solutions as `build --execute` writes them when this Python runs them: the
    # language_info version is the kernel's own (a stored version opens unmodified only
    # under that exact Python; tests/test_build.py checks the rule), the rest as committed.
    for path in SOLUTIONS:
        nb = nbformat.read(path, as_version=4)
        nb.metadata.get("language_info", {}).pop("version", None)
        build.normalise(nb)
        (work / "solutions" / path.name).write_text(build.render(nb), encoding="utf-8")

    # The student copies as `course.py lab` makes them, from the notebooks as the build
    # writes them (normalised, whatever the committed files say: another test checks those).
    built = home / "notebooks"
    built.mkdir()
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        kernels.normalise(nb)
        (built / path.name).write_text(build.render(nb), encoding="utf-8")
    start.start(built, work / "my_work")
    for name, values in SETTINGS.items():
        target = home / "settings" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(values))
    port, token = _free_port(), os.urandom(8).hex()
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        JUPYTERLAB_SETTINGS_DIR=str(home / "settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"),
        JUPYTER_CONFIG_DIR=str(home / "config"),
        JUPYTER_RUNTIME_DIR=str(home / "runtime"),
        JUPYTER_PLATFORM_DIRS="1",
    )
    env.pop("MPLBACKEND", None)
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
               f"--ServerApp.token={token}", f"--ServerApp.root_dir={work}", "--ServerApp.open_browser=False",
               "--LabApp.expose_app_in_browser=True"]  # window.jupyterapp: open notebooks without reloading
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")
    log = open(home / "server.log", "w")
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=work)
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if server.poll() is not None:
            raise AssertionError("JupyterLab exited: " + (home / "server.log").read_text()[-2000:])
        try:
            with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2) as reply:
                return reply.status == 200
        except OSError:
            return False

    try:
        _wait("JupyterLab to start", up)
        yield url, token, work
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


@contextlib.contextmanager
def chrome():
    """A headless Chromium driven by selenium (tests/test_site.py uses it too)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1400,1000", "--disable-extensions"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.set_script_timeout(TIMEOUT)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def browser(lab):
    """One page of JupyterLab for the whole module; each test opens its notebook in it."""
    with chrome() as driver:
        url, token, _ = lab
        driver.get(f"{url}/lab?token={token}")
        _wait("JupyterLab to load", lambda: driver.execute_script(
            "return !!(window.jupyterapp && window.jupyterapp.shell && document.querySelector('#jp-main-statusbar'))"))
        yield driver


def _open(browser, path: str) -> None:
    """Close what is open, unsaved (its kernel shuts down), then open ``path`` in the main area."""
    browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "for (const w of Array.from(window.jupyterapp.shell.widgets('main'))) {"
        "  if (w.context) { w.context.model.dirty = false; } w.dispose(); }"
        "window.jupyterapp.commands.execute('docmanager:open', {path: arguments[0]})"
        ".then(() => done(true), e => done(String(e)));", path)
    _wait(f"{path} to render", lambda: browser.execute_script(
        "const w = window.jupyterapp.shell.currentWidget;"
        "return !!(w && w.context && w.context.path === arguments[0] && w.node.querySelector('.jp-Notebook .jp-Cell'));",  # noqa: E501
        path))


def _status(browser) -> str:
    return browser.execute_script(
        "const e = document.querySelector('#jp-main-statusbar'); return e ? e.textContent : ''"
    )


# Counts that must settle before checking: formulas typeset, images decoded.
PAGE_STATE = """
const md = Array.from(document.querySelectorAll('.jp-MarkdownCell .jp-RenderedMarkdown'));
const raw = [];
for (const cell of md) {
  const clone = cell.cloneNode(true);
  clone.querySelectorAll('code, pre, mjx-container, .MathJax, script').forEach(e => e.remove());
  const text = clone.textContent;
  const found = text.match(/\\$[^$\\n]+\\$/g);
  if (found) raw.push(...found);
}
const images = Array.from(document.querySelectorAll('.jp-Notebook img'));
return {
  cells: document.querySelectorAll('.jp-Notebook .jp-Cell').length,
  math: document.querySelectorAll('.jp-Notebook mjx-container').length,
  mathErrors: document.querySelectorAll('.jp-Notebook mjx-merror, .jp-Notebook .MathJax_Error').length,
  raw: raw.slice(0, 5),
  images: images.length,
  broken: images.filter(i => !(i.complete && i.naturalWidth > 0) && !i.src.includes('colab-badge'))
                .map(i => i.src.slice(0, 80)),
  errors: errors(),
};
// error outputs render like stderr (same MIME type on the page): ask the notebook's model
function errors() {
  const found = [];
  for (const cell of Array.from(window.jupyterapp.shell.currentWidget.content.model.cells)) {
    if (cell.type !== 'code') continue;
    for (let i = 0; i < cell.outputs.length; i++) {
      const output = cell.outputs.get(i).toJSON();
      if (output.output_type === 'error') found.push(`${output.ename}: ${output.evalue}`);
    }
  }
  return found;
}
"""


def _formulas(markdown: str) -> int:
    """How many formulas a markdown source holds (``$...$`` and ``$$...$$``, not in code)."""
    text = re.sub(r"```.*?```|`[^`\n]*`", "", markdown, flags=re.S)
    return len(re.findall(r"\$\$.+?\$\$|\$[^$\n]+\$", text, re.S))


def _assert_opens_unmodified(browser, what: str) -> None:
    _wait("the kernel to be idle", lambda: "Idle" in _status(browser))
    time.sleep(1.5)  # JupyterLab writes the kernel's metadata into the model right after
    dirty = browser.execute_script("return document.querySelectorAll('.jp-mod-dirty').length")
    assert dirty == 0, f"{what} was marked modified on opening (kernelspec, language_info or widgets differ)"


UNMODIFIED = {"01_attention.ipynb", "07_training.ipynb"}  # two are enough: each costs a kernel start


@pytest.mark.parametrize("solution", SOLUTIONS, ids=[p.stem for p in SOLUTIONS])
def test_solution_renders_formulas_images_and_no_errors(browser, lab, solution):
    _open(browser, f"solutions/{solution.name}")
    import nbformat

    nb = nbformat.read(solution, as_version=4)
    formulas = sum(_formulas(c.source) for c in nb.cells if c.cell_type == "markdown")
    pngs = sum("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    last = {}

    def settled():
        state = browser.execute_script(PAGE_STATE)
        done = state["cells"] == len(nb.cells) and state["math"] >= formulas and not state["raw"] and state == last.get("s")  # noqa: E501
        last["s"] = state
        return state if done else None

    try:
        state = _wait(f"{solution.name}: every formula typeset", settled, every=0.5)
    except AssertionError:
        state = last["s"]  # report what was left below
    assert state["cells"] == len(nb.cells)
    assert state["mathErrors"] == 0, f"{state['mathErrors']} MathJax errors"
    assert state["raw"] == [], f"math left as raw $...$: {state['raw']}"
    assert state["math"] >= formulas, (state["math"], formulas)
    assert state["images"] >= pngs, (state["images"], pngs)
    assert state["broken"] == [], f"images that did not load: {state['broken']}"
    assert state["errors"] == [], f"error outputs: {state['errors']}"
    if solution.name in UNMODIFIED:
        _assert_opens_unmodified(browser, f"solution {solution.name}")


def _cells(browser) -> list[str]:
    return browser.execute_script(
        "return Array.from(document.querySelectorAll('.jp-Notebook .jp-Cell')).map("
        "c => (c.querySelector('.cm-content') || {}).textContent || '')"
    )


def _run_cell(browser, index: int) -> None:
    """Select cell ``index`` in command mode and run it (Shift+Enter), as a student does."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    cell = browser.execute_script(
        "const c = document.querySelectorAll('.jp-Notebook .jp-Cell')[arguments[0]];"
        "c.scrollIntoView({block: 'center'}); return c.querySelector('.jp-InputPrompt');", index)
    cell.click()
    ActionChains(browser).key_down(Keys.SHIFT).send_keys(Keys.ENTER).key_up(Keys.SHIFT).perform()


def _type_into(browser, index: int, text: str) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    editor = browser.execute_script(
        "const c = document.querySelectorAll('.jp-Notebook .jp-Cell')[arguments[0]];"
        "c.scrollIntoView({block: 'center'}); return c.querySelector('.cm-content');", index)
    editor.click()
    ActionChains(browser).key_down(Keys.CONTROL).send_keys("a").key_up(Keys.CONTROL).send_keys(Keys.DELETE).perform()
    editor.send_keys(text)
    _wait("the typed code in the cell", lambda: _cells(browser)[index].strip() == text)


def _verdict(browser, index: int, status: str):
    return _wait(f"a {status} verdict under cell {index}", lambda: browser.execute_script(
        "const c = document.querySelectorAll('.jp-Notebook .jp-Cell')[arguments[0]];"
        "const v = c.querySelector('.course-verdict-' + arguments[1]);"
        "return v ? {text: v.textContent, code: Array.from(v.querySelectorAll('code, pre')).map(e => e.textContent),"
        "  colour: getComputedStyle(v).borderLeftColor} : null;", index, status))


def test_student_copy_opens_unmodified_and_shows_the_verdict_of_a_typed_answer(browser, lab):
    _open(browser, f"my_work/{STUDENT}")
    _assert_opens_unmodified(browser, "the student's copy")

    cells = _cells(browser)
    imports = next(i for i, s in enumerate(cells) if "from course_utils.checks import" in s)
    exercise = next(i for i, s in enumerate(cells) if s.startswith("def causal_mask("))
    check = next(i for i, s in enumerate(cells) if s.strip() == "check_causal_mask(causal_mask)")
    _run_cell(browser, imports)
    _wait("the imports to run", lambda: browser.execute_script(
        "const p = document.querySelectorAll('.jp-Notebook .jp-Cell')[arguments[0]].querySelector('.jp-InputPrompt');"
        "return /\\[\\d+\\]/.test(p.textContent);", imports))

    _type_into(browser, exercise, "def causal_mask(size, device=None): return torch.ones(size, size, "
                                  "dtype=torch.bool, device=device).triu()")
    _run_cell(browser, exercise)
    _run_cell(browser, check)
    wrong = _verdict(browser, check, "failed")
    assert "causal_mask" in wrong["text"] and 'hint("causal_mask")' in wrong["code"]
    assert wrong["colour"] == "rgb(198, 40, 40)"  # red

    _type_into(browser, exercise, "def causal_mask(size, device=None): return torch.ones(size, size, "
                                  "dtype=torch.bool, device=device).tril()")
    _run_cell(browser, exercise)
    _run_cell(browser, check)
    right = _verdict(browser, check, "passed")
    assert "all checks passed" in right["text"] and right["colour"] == "rgb(46, 125, 50)"  # green
    assert browser.execute_script(
        "return document.querySelectorAll('.jp-Notebook .jp-Cell')[arguments[0]]"
        ".querySelectorAll('.course-verdict').length", check) == 1  # the new verdict replaced the old
