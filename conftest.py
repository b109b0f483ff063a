"""pytest settings for the executed solution notebooks (nbval).

Notebook 07 trains its translator for real when a student runs it (`TRAIN = True`, about
two minutes on one core). Its executed solution is checked against the shipped
checkpoint instead, which the same recipe run wrote (`python -m course_utils.pretrained
--write`) and which gives every stored output below the training cell (the training cell
itself is not compared). Set COURSE_TRAIN_IN_TESTS=1 to train for real under the tests too.
"""

from __future__ import annotations

import os
import re

TRAIN_SWITCH = re.compile(r"^TRAIN = True\b", re.MULTILINE)
TRAINS = {"07_training.ipynb"}  # notebooks whose test run loads the checkpoint


def pytest_collection_modifyitems(config, items):
    if os.environ.get("COURSE_TRAIN_IN_TESTS") == "1":
        return
    for item in items:
        cell = getattr(item, "cell", None)  # nbval's cell items carry their notebook cell
        if cell is not None and item.path.name in TRAINS and TRAIN_SWITCH.search(cell.source):
            cell.source = TRAIN_SWITCH.sub("TRAIN = False", cell.source, count=1)
