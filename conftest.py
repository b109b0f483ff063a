"""pytest settings for the whole suite: notebook 07's training switch, and the order in
which `course.py test` hands work to its pytest-xdist workers.

Notebook 07 (nbval).

Notebook 07 trains its translator for real when a student runs it (`TRAIN = True`, about
two minutes on one core). Its executed solution is checked against the shipped
checkpoint instead, which the same recipe run wrote (`python -m course_utils.translator_checkpoint
--write`) and which gives every stored output below the training cell (the training cell
itself is not compared). Set COURSE_TRAIN_IN_TESTS=1 to train for real under the tests too.
"""

from __future__ import annotations

import os
import re

TRAIN_SWITCH = re.compile(r"^TRAIN = True\b", re.MULTILINE)
TRAINS = {"07_training.ipynb"}  # notebooks whose test run loads the checkpoint


# Scheduling. `course.py test` runs `-n <cores> --dist loadfile --no-loadscope-reorder`:
# each file goes whole to one worker (a notebook's cells share one kernel; a module's fixtures
# are built once), in the order of the collection, to whichever worker is free. Longest files
# first keeps both workers busy to the end: xdist's default order (most tests first) left the
# few slow notebook and tool files for last, with one worker idle. Seconds per file on the
# 2-core CI machine (pytest --durations=0), rounded: only the order matters, so a stale figure
# costs a little time, never a result. A file not listed weighs 0.05 s per test. The four files
# added last were timed one by one on the shared course machine and scaled by that run's
# test_student_notebooks.py (423 s there, 160 here).
SECONDS = {
    "tests/test_student_notebooks.py": 160,
    # timed on the shared machine in the session that added it (about 130 s of test time);
    # unlisted, it weighed 0.05 s per test and went last, with the other worker idle.
    # This file and test_grade: graded kernels that draw no figure no longer import matplotlib
    # (course_utils.plotting imports it on first use): about 0.7 CPU-s a kernel, -14 % each
    # (estimated from user+sys of the files' non-sandboxed kernels and an 8-kernel class)
    "tests/test_hide_references.py": 112,
    "tests/test_grade.py": 74,  # the hanging notebook's limit 20 -> 12 s (about -9 s)
    # shorter 07 and 09 runs, and 10's two runs (about 12 s; estimated); 09's cache timing on 2 rows (about -2 s)
    "tests/test_contract_only_runs.py": 88,
    "tests/test_browser.py": 65,
    "tests/test_colab_install.py": 60,
    # the next_token_probs searches shared between tests (its fixture): the exactly-k test 80 s -> 5 s,
    # the -k next_token_probs tests about 214 s -> 137 s on the shared machine; CI estimated
    "tests/test_checks_gpt.py": 25,
    # five notebook-01 runs through the Gradescope bundle and the Classroom commands: 39 CPU-s
    # (user + sys of the whole run, its kernels included) on the shared machine; 27 CPU-s once
    # course_tools processes skip rfc3987_syntax's grammars (course_tools/__init__.py)
    "tests/test_platforms.py": 30,
    # one layout of notebook 01, generate_assignment and one autograde of two students: about 37 CPU-s
    # (33 CPU-s once the test cells' course_tools skips rfc3987_syntax's grammars)
    "tests/test_nbgrader.py": 33,
    # builds the website once (a Sphinx subprocess): 60-90 s on the shared machine at load
    # average 10, about 40 s of it the build; scaled as above
    "tests/test_site.py": 35,
    "tests/test_checks_model.py": 45,
    "tests/test_build.py": 30,
    "tests/test_checks_gpt_weights.py": 30,
    "solutions/07_training.ipynb": 27,
    "solutions/09_gpt.ipynb": 20,
    "solutions/10_modern_decoder.ipynb": 15,
    "solutions/11_tokenization.ipynb": 12,
    "tests/test_attention_explorer.py": 20,
    "tests/test_notebook06_own_model.py": 20,
    "solutions/08_encoder_classifier.ipynb": 13,
    "solutions/01_attention.ipynb": 12,
}


def pytest_collection_modifyitems(config, items):
    if os.environ.get("COURSE_TRAIN_IN_TESTS") != "1":
        for item in items:
            cell = getattr(item, "cell", None)  # nbval's cell items carry their notebook cell
            if cell is not None and item.path.name in TRAINS and TRAIN_SWITCH.search(cell.source):
                cell.source = TRAIN_SWITCH.sub("TRAIN = False", cell.source, count=1)

    files: dict[str, list] = {}
    for item in items:
        files.setdefault(item.nodeid.partition("::")[0], []).append(item)
    # sorted() is stable, and each file keeps its own order (nbval's cells must)
    order = sorted(files, key=lambda path: -SECONDS.get(path, 0.05 * len(files[path])))
    items[:] = [item for path in order for item in files[path]]


# Nothing is downloaded under the tests: notebook 09's optional GPT-2 cell (and anything else
# built on Hugging Face's hub) then looks only in the local cache, and the kernels nbval starts
# inherit this.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
