"""Build the course as a static website: ``python -m course_tools.site`` (``python3 course.py site``).

The site is made from the saved notebooks, none of them run again: one page per notebook,
in notebook order, made from the solution notebook (its stored outputs, figures and math)
with every exercise cell shown as the student notebook has it (``# YOUR CODE HERE``), so the
website shows what a student reads and sees, never an answer. Each notebook page starts with
a link that opens the student notebook in Colab and one that downloads it. The README is the
home page; every page under ``docs/`` (the course contract, the instructor's guide and its
pages) is a page too. Search is Sphinx's own (a local index, no server).

Why Sphinx with MyST-NB and not Jupyter Book: Jupyter Book 1.x is Sphinx, MyST-NB and a dozen
more extensions (bibtex, thebe, comments, a theme on pydata-sphinx-theme...) that the course
does not use, all to install in CI; Jupyter Book 2 is a Node program. Sphinx and MyST-NB
are the two parts of it the course needs, maintained by the same people, pip-installable,
and they build offline. The theme is alabaster, which Sphinx installs anyway.

Offline: nothing is fetched at build time or when a page is viewed. Math is typeset in the
browser by MathJax 2.7, copied into the site from the ``jupyter-server-mathjax`` package (the
MathJax that Jupyter's own tools serve offline; 3 MB to install) instead of Sphinx's default
CDN copy; the notebooks' Colab badge (an image on Google's server) becomes a plain link;
an ipywidgets output is left out (it needs a kernel, and JavaScript from a CDN): notebook 07's
attention explorer shows its figure, as it does before anyone moves a slider.

Everything is written into a git-ignored folder: ``build/site/`` (open ``index.html``), with
the Sphinx sources it was made from in ``build/site-src/``.
"""

from __future__ import annotations

import argparse
import importlib.util
import posixpath
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat

from course_tools import build

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "build" / "site"
STUDENT_DIR = "_student"  # in the sources: the student notebooks, offered for download
MATHJAX_CONFIG = "TeX-AMS-MML_HTMLorMML-full"  # the combined configuration the package ships

CONF = f'''# Written by course_tools/site.py; edit it there.
project = "Build a Transformer from scratch in PyTorch"
author = "the course's authors"
extensions = ["myst_nb"]
root_doc = "index"
exclude_patterns = ["{STUDENT_DIR}", "_doctrees", "**.ipynb_checkpoints"]
nb_execution_mode = "off"  # the pages show the outputs saved in solutions/
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3  # README links such as (#installing-pytorch)
nb_ipywidgets_js = {{}}  # widget JavaScript would come from a CDN (the pages drop widgets)
mathjax_path = "mathjax/MathJax.js?config={MATHJAX_CONFIG}"  # under _static: no CDN
# MathJax 2 typesets what Sphinx marks as math (class "math"), also inside the notebook sections
# that MyST-NB marks tex2jax_ignore (so that a $ in an output stays a $); the package ships
# MathJax's STIX web fonts only, not its TeX fonts: use them, as Jupyter does
mathjax2_config = {{"tex2jax": {{"processClass": "math|tex2jax_process", "processEscapes": False}},
                    "HTML-CSS": {{"availableFonts": [], "webFont": "STIX-Web", "imageFont": None}}}}
myst_update_mathjax = False  # MyST's own setting is MathJax 3's
html_theme = "alabaster"
html_theme_options = {{"page_width": "1100px", "sidebar_width": "260px", "fixed_sidebar": True,
                      "show_relbars": True, "show_powered_by": False}}
html_sidebars = {{"**": ["about.html", "searchfield.html", "navigation.html", "relations.html"]}}
html_title = project
html_copy_source = False
html_show_sourcelink = False
html_show_sphinx = False
html_static_path = ["_static"]
'''

# alabaster loads _static/custom.css on every page. MathJax's hidden copy of each formula for
# screen readers (MathML) asks for MathJax's TeX fonts, which the package does not ship: the page's
# own fonts are as good for a copy nobody sees, and no request fails.
CUSTOM_CSS = ".MJX_Assistive_MathML, .MJX_Assistive_MathML * { font-family: inherit !important; }\n"

WIDGET = "application/vnd.jupyter.widget-view+json"
LINK = re.compile(r"(\]\()([^)\s]+)(\))")  # a markdown link's target


def _mathjax_dir() -> Path:
    spec = importlib.util.find_spec("jupyter_server_mathjax")
    if spec is None or spec.origin is None:
        raise SystemExit("jupyter-server-mathjax is not installed (pip install jupyter-server-mathjax): "
                         "the site serves its own MathJax")
    return Path(spec.origin).parent / "static"


def _rewrite_links(text: str, source: Path, pages: dict[Path, str]) -> str:
    """Point a page's relative links at the pages they become (``README.md`` is ``index.md``),
    and a link to a repository file that is not a page at that file on GitHub."""

    def fix(match: re.Match) -> str:
        target = match.group(2)
        if re.match(r"[a-z][a-z0-9+.-]*:|#", target):  # a URL, or an anchor on this page
            return match.group(0)
        path, _, anchor = target.partition("#")
        resolved = (source.parent / path).resolve()
        if not resolved.is_relative_to(ROOT):
            return match.group(0)
        if resolved in pages:
            relative = _relative(pages[resolved], pages[source.resolve()])
            new = relative + (f"#{anchor}" if anchor else "")
        else:
            new = f"{build.REPO_URL}/blob/{build.REF}/{resolved.relative_to(ROOT).as_posix()}"
        return match.group(1) + new + match.group(3)

    return LINK.sub(fix, text)


def _relative(target: str, start: str) -> str:
    """``target`` relative to the folder of ``start`` (both paths in the sources, posix)."""
    return posixpath.relpath(target, posixpath.dirname(start) or ".")


def notebook_page(solution: Path, student: Path) -> nbformat.NotebookNode:
    """The notebook as its page shows it: the solution's cells and outputs, each exercise cell's
    source as the student notebook has it, the Colab header replaced by two plain links."""
    nb = nbformat.read(solution, as_version=4)
    student_cells = {c.get("id"): c for c in nbformat.read(student, as_version=4).cells}
    links = (f"[Open the student notebook in Colab]({build.colab_url('notebooks', student.name)})"
             f" · {{download}}`Download the student notebook <../{STUDENT_DIR}/{student.name}>`\n\n"
             "*Outputs are those of the course's reference run; an exercise cell shows what you "
             "start from.*")
    cells = []
    for cell in nb.cells:
        if {build.HEADER_TAG, build.SETUP_TAG} & set(cell.get("metadata", {}).get("tags", [])):
            continue  # the badge is an image from the internet; the set-up cell is for Colab
        if cell.cell_type == "code":  # a widget needs a kernel (and JavaScript from a CDN)
            cell.outputs = [o for o in cell.outputs if WIDGET not in o.get("data", {})]
        theirs = student_cells.get(cell.get("id"))
        if theirs is not None and theirs.source != cell.source:
            cell.source = theirs.source
        cells.append(cell)
    title = next((i for i, c in enumerate(cells) if c.cell_type == "markdown" and c.source.startswith("# ")), None)
    if title is None:  # no title: the links first
        cells.insert(0, nbformat.v4.new_markdown_cell(links))
    else:  # the links under the title
        first, _, rest = cells[title].source.partition("\n")
        cells[title].source = f"{first}\n\n{links}\n{rest}"
    nb.cells = cells
    nb.metadata.pop("widgets", None)
    return nb


def stage(src: Path) -> list[str]:
    """Write the Sphinx sources into ``src``; returns the notebook pages' names, in order."""
    if src.exists():
        conf = src / "conf.py"
        if not (conf.is_file() and conf.read_text(encoding="utf-8").startswith(CONF.splitlines()[0])):
            raise RuntimeError(f"{src} exists and was not written by this tool: not deleting it")
        shutil.rmtree(src)
    (src / "notebooks").mkdir(parents=True)
    (src / STUDENT_DIR).mkdir()
    (src / "conf.py").write_text(CONF, encoding="utf-8")
    (src / "_static").mkdir()
    (src / "_static" / "custom.css").write_text(CUSTOM_CSS, encoding="utf-8")

    docs = sorted((ROOT / "docs").rglob("*.md"))
    pages = {(ROOT / "README.md").resolve(): "index.md"}
    pages.update({p.resolve(): p.relative_to(ROOT).as_posix() for p in docs})
    for source, name in pages.items():
        text = _rewrite_links(source.read_text(encoding="utf-8"), source, pages)
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text(text, encoding="utf-8")

    names = []
    for solution in build.notebook_files(ROOT / "solutions"):
        student = ROOT / "notebooks" / solution.name
        shutil.copy2(student, src / STUDENT_DIR / student.name)
        nbformat.write(notebook_page(solution, student), src / "notebooks" / solution.name)
        names.append(f"notebooks/{solution.stem}")

    # navigation: the notebooks, then the instructor's guide and the other pages of
    # docs/instructors/, then every other page of docs/ (the contract)
    guide = "docs/instructors/index.md"
    rest = sorted((n for n in pages.values() if n.startswith("docs/")),
                  key=lambda n: (n != guide, not n.startswith("docs/instructors/"), n))
    _append_toctree(src / "index.md", "Notebooks", names)
    _append_toctree(src / "index.md", "Instructors and reference", [n.removesuffix(".md") for n in rest])
    return names


def _append_toctree(page: Path, caption: str, entries: list[str]) -> None:
    if not entries:
        return
    body = "\n".join(entries)
    with page.open("a", encoding="utf-8") as handle:
        handle.write(f"\n\n```{{toctree}}\n:hidden:\n:maxdepth: 1\n:caption: {caption}\n\n{body}\n```\n")


def build_site(out: Path = DEFAULT_OUT, quiet: bool = False) -> Path:
    """Stage the sources beside ``out``, run Sphinx, copy MathJax in; returns the warnings file
    (empty when the build had nothing to say). Raises ``RuntimeError`` when Sphinx fails."""
    out = Path(out).resolve()
    src = out.with_name(out.name + "-src")
    mathjax = _mathjax_dir()
    if out.is_dir() and any(out.iterdir()):
        if not (out / ".buildinfo").is_file():  # what Sphinx writes into every site
            raise RuntimeError(f"{out} is not empty and holds no site built before: choose another --out")
        shutil.rmtree(out)  # a page whose notebook is gone goes too
    stage(src)
    warnings = src / "warnings.txt"
    command = [sys.executable, "-m", "sphinx", "-b", "html", "-E", "--keep-going",
               "-d", str(src / "_doctrees"), "-w", str(warnings), str(src), str(out)]
    if quiet:
        command.insert(3, "-q")
    result = subprocess.run(command, cwd=src)
    if result.returncode != 0:
        raise RuntimeError(f"sphinx-build failed with exit code {result.returncode}; see above and {warnings}")
    shutil.copytree(mathjax, out / "_static" / "mathjax", dirs_exist_ok=True)
    return warnings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m course_tools.site",
        description="Build the course as a static website from the saved notebooks (nothing is re-run).",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default: build/site)")
    parser.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors")
    args = parser.parse_args(argv)
    start = time.monotonic()
    try:
        warnings = build_site(args.out, quiet=args.quiet)
    except RuntimeError as error:
        print(f"[site] {error}", file=sys.stderr)
        return 1
    count = len(warnings.read_text(encoding="utf-8").splitlines()) if warnings.exists() else 0
    print(f"[site] built {args.out.resolve() / 'index.html'} in {time.monotonic() - start:.0f}s"
          + (f" ({count} warning line(s): {warnings})" if count else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
