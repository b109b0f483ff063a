"""course_tools: the instructor's and set-up tools of the course (not imported by the course's
notebooks; the test cells of its nbgrader version import ``course_tools.nbgrader``).

=====================================  ==========================================================
command                                does
=====================================  ==========================================================
``python -m course_tools.build``       solutions/ -> notebooks/ (student versions)
``python -m course_tools.grade``       grade a folder of student notebooks
``python -m course_tools.nbgrader``    lay out the course as an nbgrader course
``python -m course_tools.gradescope``  a notebook's Gradescope autograder (a zip)
``python -m course_tools.classroom``   a notebook's GitHub Classroom assignment template
``python -m course_tools.start``       copy the notebooks into my_work/ (``course.py lab``)
``python -m course_tools.check_env``   does this environment have what the course needs?
``python -m course_tools.site``        the course as a static website (``course.py site``)
=====================================  ==========================================================

They need packages the notebooks do not (``nbformat``, ``nbclient``, ``jupyter_client``,
``ipykernel``, ``traitlets``: the ``tools`` extra of ``pyproject.toml``); ``start`` and
``check_env`` need only the standard library, so that they run before anything else is
installed (``check_env`` reports a missing torch instead of needing it). ``site`` needs the
``site`` extra besides (Sphinx, MyST-NB, jupyter-server-mathjax).
"""

import sys

# nbformat validates with jsonschema, which imports rfc3987_syntax when it is installed (an extra
# of jupyter-events, so in every environment with JupyterLab) and builds its 38 lark grammars
# at import: over a second of CPU in every course_tools process (the grader, the build, the
# Gradescope and Classroom commands), for the "iri" format, which no schema here uses. Marked
# absent before anything imports jsonschema, jsonschema skips that format (its import is
# optional there); a process that imported jsonschema already keeps what it has.
sys.modules.setdefault("rfc3987_syntax", None)
