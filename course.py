#!/usr/bin/env python3
"""Set up and run the course "Build a Transformer from scratch in PyTorch".

    python3 course.py lab       # set up .venv, copy the notebooks into my_work/, open JupyterLab there
    python3 course.py notebook  # the same, in Jupyter Notebook 7 instead of JupyterLab
    python3 course.py test      # set up .venv, then run the whole test suite (pytest)
    python3 course.py site      # set up .venv, build the course as a website in build/site/
    python3 course.py setup     # set up .venv only

Standard library only; any Python >= 3.10 on Linux, macOS or Windows. The virtual
environment lives in ``.venv`` next to this file. A stamp file in it records a hash of
``pyproject.toml``, so a second run skips pip entirely until that file changes, or
until torch or the course package no longer imports from ``.venv`` (checked every run).
Ctrl+C stops any command with one line saying so.

Environment variables:
    TORCH_SPEC       pip requirement used to install PyTorch (default ``torch==2.13.0``).
    TORCH_INDEX_URL  index used for that PyTorch install only. Unset, on Linux without
                     an NVIDIA GPU (no ``nvidia-smi``), PyTorch's CPU index
                     https://download.pytorch.org/whl/cpu (PyPI's Linux wheel bundles
                     CUDA and is several GB); set it to choose another build.
    COURSE_VERBOSE   set to 1 to see pip's full output.
"""

# This file is read by whatever Python a student has (even 2.7), so it uses only syntax
# that every Python reads: no f-strings, annotations or print(), ASCII only. It checks the
# version first; the commands are in course_cli.py, which needs Python 3.10+.
import sys

if sys.version_info < (3, 10):
    sys.stderr.write(
        "[course] ERROR: Python 3.10+ is needed; this is %s. Run this file with a newer "
        "python3 (on Windows: py -3.12 course.py ...).\n" % sys.version.split()[0]
    )
    sys.exit(1)

import os  # noqa: E402

sys.dont_write_bytecode = True  # no __pycache__/ beside course.py
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import course_cli  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(course_cli.main())
