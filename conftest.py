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
# course machine (pytest -n 2 --dist loadfile --durations=0 on a fresh clone, summed per file, every
# file of 5 s or more; the machine also ran a notebook trial then): only the order matters, so a stale
# figure costs a little time, never a result. A file not listed weighs 0.05 s per test (unlisted,
# test_checks_decoder, _training, _classifier, _encoder and _tokenizer ran late, taking 20-63 s each).
SECONDS = {
    "tests/test_student_notebooks.py": 110,  # 07 and 09 shortened (notebook_runs.SHORTER): -26 kernel CPU-s
    "tests/test_contract_only_runs.py": 133,
    "tests/test_checks_model.py": 97,
    "tests/test_grade.py": 95,
    "tests/test_checks_gpt.py": 67,
    "tests/test_checks_decoder.py": 63,
    "tests/test_platforms.py": 58,
    "tests/test_hide_references.py": 57,
    "tests/test_browser.py": 50,
    "tests/test_checks_training.py": 45,
    "tests/test_nbgrader.py": 33,
    "tests/test_checks_classifier.py": 29,
    "solutions/09_gpt.ipynb": 29,
    "tests/test_site.py": 28,
    "solutions/07_training.ipynb": 28,
    "tests/test_checks_encoder.py": 25,
    "tests/test_colab_install.py": 23,
    "tests/test_checks_tokenizer.py": 20,
    "tests/test_checks_gpt_weights.py": 15,
    "solutions/08_encoder_classifier.ipynb": 13,
    "tests/test_checks_core.py": 10,
    "solutions/10_modern_decoder.ipynb": 8,
    "solutions/06_transformer.ipynb": 8,
    "solutions/04_encoder.ipynb": 7,
    "tests/test_packaging.py": 7,
    "solutions/01_attention.ipynb": 6,
    "tests/test_attention_explorer.py": 6,
    "tests/test_checks_multihead.py": 6,
    "solutions/02_multi_head_attention.ipynb": 6,
    "tests/test_build.py": 6,
    "solutions/11_tokenization.ipynb": 6,
    "solutions/03_positional_encoding.ipynb": 5,
    "tests/test_decoding_cache.py": 5,
    "tests/test_benchmarks.py": 5,
    "solutions/05_decoder.ipynb": 5,
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
