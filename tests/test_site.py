"""The course as a website (``python3 course.py site``, course_tools/site.py), built once for the
module, offline: no network namespace where ``unshare -rn`` works, proxies to a closed port
otherwise.

Statically, on every page: each notebook has its page (its figures, its formulas marked for
MathJax and none left as $...$, the exercise as the student notebook has it, no answer, a Colab
link and the student notebook to download), the README, the contract and the instructor's guide
are pages, the navigation is in notebook order, no internal link or anchor is broken and nothing
is loaded from another host. In a real headless
Chromium (tests/test_browser.py's, skipped with its one-line reason where it is missing): on
a few pages every formula is typeset by the site's own MathJax and every image loads, and the
search finds a notebook.
"""

from __future__ import annotations

import functools
import html.parser
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

import nbformat
import pytest
from test_browser import _formulas, _missing, _wait, chrome

from course_tools import build
from course_tools import site as site_tool

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = build.notebook_files(ROOT / "solutions")
# in the browser: the home page, the contract, and the notebooks with the most kinds of math
# (01 the first, 03 \mathbb and \mathcal, 05 cases) and 07 (a widget's output)
BROWSER_PAGES = ["index.html", "docs/course-contract.html", "notebooks/01_attention.html",
                 "notebooks/03_positional_encoding.html", "notebooks/05_decoder.html",
                 "notebooks/07_training.html"]


def _offline_prefix() -> list[str]:
    """``unshare -rn`` (a user and network namespace: no network at all) where it works."""
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "-rn", "true"], capture_output=True).returncode == 0:
        return [unshare, "-rn"]
    return []


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site, built once from this checkout into a temporary folder: ``(folder, log)``."""
    out = tmp_path_factory.mktemp("site") / "site"
    dead = "http://127.0.0.1:9"  # where unshare is refused: anything that asks a proxy fails
    env = dict(os.environ, http_proxy=dead, https_proxy=dead, HTTP_PROXY=dead, HTTPS_PROXY=dead, no_proxy="")
    start = time.monotonic()
    result = subprocess.run([*_offline_prefix(), sys.executable, "-m", "course_tools.site", "--out", str(out), "-q"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    print(f"site built in {time.monotonic() - start:.1f}s")  # shown with -s; the build's cost in CI
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return out, result.stdout + result.stderr


class _Page(html.parser.HTMLParser):
    """What a page links to and loads, and the ids it has."""

    def __init__(self):
        super().__init__()
        self.links: list[str] = []  # <a href>
        self.loads: list[str] = []  # img/script src, stylesheet href: what the browser fetches
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("href"):
            self.links.append(attrs["href"])
        elif tag in ("img", "script", "iframe", "source") and attrs.get("src"):
            self.loads.append(attrs["src"])
        elif tag == "link" and attrs.get("href") and "stylesheet" in attrs.get("rel", ""):
            self.loads.append(attrs["href"])


@pytest.fixture(scope="module")
def pages(site) -> dict[Path, _Page]:
    out, _ = site
    parsed = {}
    for path in out.rglob("*.html"):
        if "_static" in path.relative_to(out).parts:
            continue  # MathJax's own test pages, if any
        page = _Page()
        page.feed(path.read_text(encoding="utf-8"))
        parsed[path] = page
    return parsed


def test_the_build_is_clean(site):
    out, log = site
    assert "warning" not in log.lower() and "error" not in log.lower(), log[-3000:]
    assert (out / "index.html").is_file() and (out / "search.html").is_file()
    assert (out / "_static" / "mathjax" / "MathJax.js").is_file()


def _text(page: Path) -> str:
    """A page's text: tags dropped (Sphinx splits inline code into a span per word), entities
    decoded, white space collapsed."""
    text = html.unescape(re.sub(r"<[^>]+>", "", page.read_text(encoding="utf-8")))
    return re.sub(r"\s+", " ", text)


def _stubs(student: nbformat.NotebookNode) -> tuple[int, int]:
    """(exercise cells, mentions of YOUR CODE HERE in every cell, prose included)."""
    return (sum("# YOUR CODE HERE" in c.source for c in student.cells if c.cell_type == "code"),
            sum(c.source.count("YOUR CODE HERE") for c in student.cells))


@pytest.mark.parametrize("solution", SOLUTIONS, ids=[p.stem for p in SOLUTIONS])
def test_every_notebook_has_its_page(site, pages, solution):
    out, _ = site
    page = out / "notebooks" / f"{solution.stem}.html"
    assert page.is_file(), f"no page for {solution.name}"
    text = _text(page)
    nb = nbformat.read(solution, as_version=4)
    student = nbformat.read(ROOT / "notebooks" / solution.name, as_version=4)
    title = next(c.source.splitlines()[0][2:] for c in nb.cells if c.cell_type == "markdown" and c.source.startswith("# "))  # noqa: E501
    assert title in text
    # the exercise as the student notebook has it; no answer and no solution markers
    exercises, mentions = _stubs(student)
    assert exercises > 0 and text.count("YOUR CODE HERE") == mentions
    assert "BEGIN SOLUTION" not in text
    # every formula of the prose became math for MathJax (the browser test typesets a few pages),
    # and none is left as $...$ outside code
    source = page.read_text(encoding="utf-8")
    formulas = sum(_formulas(c.source) for c in nb.cells if c.cell_type == "markdown")
    assert source.count('class="math notranslate nohighlight"') >= formulas
    prose = re.sub(r'<(pre|code|script|style)\b.*?</\1>|<(span|div) class="math notranslate nohighlight">.*?</\2>',
                   "", source, flags=re.S)
    assert re.findall(r"\$[^$\n<>]+\$", html.unescape(re.sub(r"<[^>]+>", "", prose))) == []
    # no widget (it needs a kernel and JavaScript from a CDN), nor its text or stored state
    assert "application/vnd.jupyter.widget" not in source and "VBox(children" not in text
    # every figure the solution stored
    pngs = sum("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert sum(src.startswith("../_images/") for src in pages[page].loads) == pngs
    # open in Colab (the student notebook), and download the student notebook itself
    assert build.colab_url("notebooks", solution.name) in pages[page].links
    downloads = [h for h in pages[page].links if h.endswith(f"/{solution.name}") and "_downloads/" in h]
    assert len(downloads) == 1, pages[page].links
    assert (page.parent / downloads[0]).read_bytes() == (ROOT / "notebooks" / solution.name).read_bytes()


def test_readme_contract_and_instructor_guide_are_pages_in_notebook_order(site, pages):
    out, _ = site
    index = _text(out / "index.html")
    assert "Build a Transformer from scratch in PyTorch" in index and "python3 course.py lab" in index
    assert "docs/course-contract.html" in pages[out / "index.html"].links
    assert "docs/instructors/index.html" in pages[out / "index.html"].links
    assert "Course contract" in _text(out / "docs" / "course-contract.html")
    assert "instructor" in _text(out / "docs" / "instructors" / "index.html").lower()
    # the sidebar's navigation lists the notebooks in the course's order, on every page
    for page in (out / "index.html", out / "notebooks" / "05_decoder.html"):
        entries = re.findall(r'<li class="toctree-l1[^"]*"><a [^>]*href="([^"]*)"', page.read_text(encoding="utf-8"))
        names = [page.stem if href == "#" else Path(href).stem for href in entries]  # "#": this page
        assert names[:len(SOLUTIONS)] == [p.stem for p in SOLUTIONS], names


def test_no_internal_link_is_broken_and_nothing_comes_from_another_host(site, pages):
    out, _ = site
    broken, remote = [], []
    for path, page in pages.items():
        for target in page.links + page.loads:
            parts = urlsplit(target)
            if parts.scheme or target.startswith("//"):
                if target in page.loads:
                    remote.append(f"{path.relative_to(out)} loads {target}")
                continue
            file = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            if not file.is_file():
                broken.append(f"{path.relative_to(out)}: {target} (no such file)")
            elif parts.fragment and file.suffix == ".html" and parts.fragment not in pages[file].ids:
                broken.append(f"{path.relative_to(out)}: {target} (no such anchor)")
    assert broken == [], broken[:20]
    assert remote == [], remote[:20]
    for css in (out / "_static").glob("*.css"):  # fonts and imports from stylesheets
        assert not re.search(r"url\(\s*['\"]?(https?:)?//", css.read_text(encoding="utf-8")), css.name


# ------------------------------------------------------------------ in the browser

browser_only = pytest.mark.skipif(_missing() is not None, reason=str(_missing()))


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # no line per request in the test's output
        pass


class _Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):  # the browser left a page mid-load
            super().handle_error(request, client_address)


@pytest.fixture(scope="module")
def served(site):
    """The site over HTTP on localhost, as a web host serves it."""
    out, _ = site
    server = _Server(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(out)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def site_browser(served):
    with chrome() as driver:
        yield driver


# Once MathJax has finished (or on a page without math, where it is not loaded): each formula
# Sphinx wrote (span.math / div.math holding \( \) or \[ \]) has MathJax's output beside its
# script, no formula is an error, no TeX is left as text, and what the images did.
PAGE_STATE = r"""
const hub = window.MathJax && window.MathJax.Hub;
const scripts = Array.from(document.querySelectorAll('script[type^="math/tex"]'));
const clone = document.querySelector('div.body').cloneNode(true);
clone.querySelectorAll('pre, code, script, .MathJax, .MathJax_Display, .MathJax_Preview, .MJX_Assistive_MathML')
  .forEach(e => e.remove());
const raw = clone.textContent.match(/\\\(|\\\[|\$[^$\n]+\$/g) || [];
return {
  done: !!(hub && hub.queue && hub.queue.pending === 0 && hub.queue.running === 0),
  mathjax: !!hub,
  scripts: scripts.length,
  typeset: scripts.filter(s => document.getElementById(s.id + '-Frame')).length,
  errors: document.querySelectorAll('.MathJax_Error, merror').length,
  raw: raw.slice(0, 5),
  images: document.images.length,
  broken: Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src.slice(-60)),
};
"""


@browser_only
@pytest.mark.parametrize("page", BROWSER_PAGES)
def test_every_formula_is_typeset_and_every_image_loads(site, served, site_browser, page):
    out, _ = site
    source = (out / page).read_text(encoding="utf-8")
    formulas = len(re.findall(r'class="math notranslate nohighlight"', source))
    images = len(re.findall(r"<img\b", source))
    site_browser.get(f"{served}/{page}")
    _wait(f"{page} to load", lambda: site_browser.execute_script("return document.readyState") == "complete")
    last = {}

    def settled():
        state = site_browser.execute_script(PAGE_STATE)
        done = (state["done"] or not formulas) and state == last.get("s")
        last["s"] = state
        return state if done else None

    try:
        state = _wait(f"{page}: MathJax to finish", settled, every=0.5)
    except AssertionError:
        state = last["s"]  # say below what was left
    assert state["mathjax"] == (formulas > 0)
    assert state["scripts"] == formulas and state["typeset"] == formulas, (state, formulas)
    assert state["errors"] == 0 and state["raw"] == [], state
    assert state["images"] == images and state["broken"] == [], state


@browser_only
def test_search_finds_a_notebook(served, site_browser):
    site_browser.get(f"{served}/search.html?q=softmax")
    found = _wait("search results", lambda: site_browser.execute_script(
        "return Array.from(document.querySelectorAll('#search-results ul.search li a')).map(a => a.getAttribute('href'))"))  # noqa: E501
    assert any("notebooks/01_attention.html" in href for href in found), found


# ------------------------------------------------------------------ the README's first screen


def test_readme_first_screen_says_where_students_and_instructors_start_and_the_guide_is_a_page():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first_screen = "\n".join(readme.splitlines()[:25])
    for needed in ("**Students:**", "**Instructors:**", "(docs/instructors/index.md)",
                   "python3 course.py lab", "python3 course.py test", "python3 course.py site"):
        assert needed in first_screen, needed
    # the guide lives on its own page; the README's instructor section is a summary with links
    section = readme.split("## Using the course as an instructor", 1)[1].split("\n## ", 1)[0]
    assert len(section.strip().splitlines()) < 30 and "(docs/instructors/index.md)" in section
    guide = (ROOT / "docs" / "instructors" / "index.md").read_text(encoding="utf-8")
    for heading in ("## Grade a class", "## The course as a website", "## Add an exercise", "## Release for Colab"):
        assert heading in guide, heading


def test_course_py_site_installs_the_site_extra_and_runs_the_builder(monkeypatch):
    """``python3 course.py site ARGS``: every extra, the site's included (one install for every
    command), then ``python -m course_tools.site ARGS`` in .venv (the real build is the fixture above)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("course_cli_site", ROOT / "course_cli.py")
    course = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(course)
    calls = []
    monkeypatch.setattr(course, "ensure_installed", lambda: calls.append("install"))
    monkeypatch.setattr(course, "run_in_venv", lambda cmd, env=None, server=False: calls.append(tuple(cmd)) or 7)
    assert course.main(["site", "--out", "elsewhere"]) == 7  # the builder's exit status
    assert calls == ["install", ("-m", "course_tools.site", "--out", "elsewhere")]
    assert "site" in course.EXTRAS


def test_the_builder_never_deletes_a_folder_it_did_not_build(tmp_path):
    (tmp_path / "mine.txt").write_text("keep")
    with pytest.raises(RuntimeError, match="not empty and holds no site"):
        site_tool.build_site(tmp_path)
    assert (tmp_path / "mine.txt").read_text() == "keep"
    sources = tmp_path / "out-src"  # where the sources of --out tmp_path/out would go
    sources.mkdir()
    (sources / "conf.py").write_text("# someone else's\n")
    with pytest.raises(RuntimeError, match="not written by this tool"):
        site_tool.build_site(tmp_path / "out")
    assert (sources / "conf.py").read_text() == "# someone else's\n"
