"""course_tools.start: students' copies in my_work/ are never overwritten, and copies that a
course update made outdated are reported (and, with --write-new, get the newer version
written beside them). Also the `lab` command of course.py, which runs it."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from course_tools import kernels, start
from course_tools.start import MANIFEST_NAME

ROOT = Path(__file__).resolve().parent.parent


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make_notebook(text: str) -> bytes:
    """A small valid notebook, in Jupyter's layout, whose one code cell holds ``text``."""
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": kernels.KERNELSPEC, "language_info": kernels.language_info("3.10")}  # as built
    cell = nbformat.v4.new_code_cell(text)
    cell.id = "cell-0"
    nb.cells = [nbformat.v4.new_markdown_cell("# A notebook"), cell]
    nb.cells[0].id = "title"
    return nbformat.writes(nb).encode("utf-8") + b"\n"


@pytest.fixture
def course(tmp_path):
    """A course folder with three notebooks, and an empty place for the student's folder."""
    source = tmp_path / "notebooks"
    source.mkdir()
    for name in ("01_a.ipynb", "02_b.ipynb", "03_c.ipynb"):
        (source / name).write_bytes(make_notebook(f"print('{name} v1')"))
    return source, tmp_path / "my_work"


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file in ``folder`` except the manifest (the one file start may rewrite)."""
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file() and p.name != MANIFEST_NAME}


def student_edit(path: Path, text: str = "my answer") -> None:
    """What Jupyter does when a student types an answer and saves: metadata kept."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    nb["cells"][1]["source"] = text
    path.write_text(json.dumps(nb, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def update_source(path: Path, text: str) -> None:
    path.write_bytes(make_notebook(text))


# ------------------------------------------------------------------------ first copies


def test_fresh_folder_gets_every_notebook_with_its_version_recorded(course):
    source, work = course
    report = start.start(source, work)
    assert report.copied == ["01_a.ipynb", "02_b.ipynb", "03_c.ipynb"]
    assert report.up_to_date == report.outdated == report.unknown == []
    manifest = json.loads((work / MANIFEST_NAME).read_text())["files"]
    for name in report.copied:
        original = (source / name).read_bytes()
        copy = nbformat.reads((work / name).read_text(), as_version=4)
        nbformat.validate(copy)
        record = copy.metadata.pop("course")
        assert record == {"source": name, "source_sha256": sha(original)}
        # Apart from that record and this Python's exact version (what its kernel will
        # report, so Jupyter does not mark the notebook modified), the copy is the course's.
        source_nb = nbformat.reads(original.decode(), as_version=4)
        assert copy.metadata.language_info.pop("version") == sys.version.split()[0]
        source_nb.metadata.language_info.pop("version")
        assert copy == source_nb
        assert manifest[name]["source_sha256"] == sha(original)


def test_second_run_writes_nothing_and_reports_up_to_date(course):
    source, work = course
    start.start(source, work)
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in work.iterdir()}
    report = start.start(source, work)
    assert report.copied == [] and report.up_to_date == ["01_a.ipynb", "02_b.ipynb", "03_c.ipynb"]
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in work.iterdir()} == before


def test_an_identical_file_already_there_is_not_rewritten(course):
    """A student who copied notebooks/ by hand: same bytes, no record. Not touched."""
    source, work = course
    work.mkdir()
    shutil.copy(source / "01_a.ipynb", work / "01_a.ipynb")
    mtime = (work / "01_a.ipynb").stat().st_mtime_ns
    report = start.start(source, work)
    assert report.copied == ["02_b.ipynb", "03_c.ipynb"]
    assert report.up_to_date == ["01_a.ipynb"]
    assert (work / "01_a.ipynb").read_bytes() == (source / "01_a.ipynb").read_bytes()
    assert (work / "01_a.ipynb").stat().st_mtime_ns == mtime


# ------------------------------------------------------------------ never overwritten


def test_student_work_survives_reruns_and_course_updates(course):
    source, work = course
    start.start(source, work)
    student_edit(work / "02_b.ipynb", "def answer():\n    return 42")
    (work / "03_c.ipynb").write_bytes(b"not even JSON any more")  # a broken save
    mine = snapshot(work)

    start.start(source, work)
    assert snapshot(work) == mine

    update_source(source / "02_b.ipynb", "print('02 v2')")
    update_source(source / "03_c.ipynb", "print('03 v2')")
    report = start.start(source, work)
    assert snapshot(work) == mine
    assert report.outdated == ["02_b.ipynb", "03_c.ipynb"]  # 03's record is in the manifest
    assert report.up_to_date == ["01_a.ipynb"]

    report = start.start(source, work, write_new=True)
    assert {k: v for k, v in snapshot(work).items() if k in mine} == mine
    assert report.written_beside == {"02_b.ipynb": "02_b.new.ipynb", "03_c.ipynb": "03_c.new.ipynb"}


def test_write_new_writes_beside_and_never_over_an_existing_new_file(course):
    source, work = course
    start.start(source, work)
    student_edit(work / "01_a.ipynb", "my v1 answer")
    mine = (work / "01_a.ipynb").read_bytes()
    (work / "01_a.new.ipynb").write_bytes(b"the student's own file called .new")

    update_source(source / "01_a.ipynb", "print('v2')")
    v2 = (source / "01_a.ipynb").read_bytes()
    report = start.start(source, work, write_new=True)
    assert report.outdated == ["01_a.ipynb"]
    assert report.written_beside == {"01_a.ipynb": "01_a.new-2.ipynb"}
    assert (work / "01_a.ipynb").read_bytes() == mine
    assert (work / "01_a.new.ipynb").read_bytes() == b"the student's own file called .new"
    written_bytes = (work / "01_a.new-2.ipynb").read_bytes()
    written = json.loads(written_bytes)
    assert written["metadata"]["course"]["source_sha256"] == sha(v2)
    assert "".join(written["cells"][1]["source"]) == "print('v2')"

    # The same version is not written twice; the report points at the file beside.
    report = start.start(source, work, write_new=True)
    assert report.written_beside == {}
    assert report.already_beside == {"01_a.ipynb": "01_a.new-2.ipynb"}
    assert sorted(p.name for p in work.glob("01_a*")) == ["01_a.ipynb", "01_a.new-2.ipynb", "01_a.new.ipynb"]

    # A third version gets a third, fresh name.
    update_source(source / "01_a.ipynb", "print('v3')")
    report = start.start(source, work, write_new=True)
    assert report.written_beside == {"01_a.ipynb": "01_a.new-3.ipynb"}
    assert (work / "01_a.new-2.ipynb").read_bytes() == written_bytes  # untouched


def test_adopting_the_new_version_makes_the_copy_up_to_date(course):
    """The version record travels inside the notebook: a student who replaces their file
    with the .new one (after moving their answers) is up to date, whatever the manifest says."""
    source, work = course
    start.start(source, work)
    update_source(source / "01_a.ipynb", "print('v2')")
    start.start(source, work, write_new=True)
    (work / "01_a.ipynb").unlink()  # the student does this, not start
    (work / "01_a.new.ipynb").rename(work / "01_a.ipynb")
    report = start.start(source, work)
    assert report.up_to_date == ["01_a.ipynb", "02_b.ipynb", "03_c.ipynb"]
    assert report.outdated == []


def test_outdated_copies_are_reported_with_the_way_to_get_the_new_version(course, capsys):
    source, work = course
    start.main([str(work), "--source", str(source)])
    first = capsys.readouterr().out
    assert "copied (new):" in first and "01_a.ipynb, 02_b.ipynb, 03_c.ipynb" in first
    update_source(source / "02_b.ipynb", "print('v2')")
    assert start.main([str(work), "--source", str(source), "--rerun-hint", "RERUN-ME"]) == 0
    out = capsys.readouterr().out
    assert "kept (yours, up to date):    01_a.ipynb, 03_c.ipynb" in out
    assert "outdated (newer version):    02_b.ipynb" in out
    assert "run: RERUN-ME" in out
    start.main([str(work), "--source", str(source), "--write-new"])
    out = capsys.readouterr().out
    assert "written beside yours:        02_b.new.ipynb (for 02_b.ipynb)" in out
    assert "run: " not in out


def test_missing_source_folder_is_an_error_not_a_crash(tmp_path, capsys):
    assert start.main([str(tmp_path / "work"), "--source", str(tmp_path / "nowhere")]) == 2
    assert "no notebooks" in capsys.readouterr().err
    assert not (tmp_path / "work").exists()


# ---------------------------------------------------------------------------- manifest


def test_missing_manifest_falls_back_to_the_notebook_metadata(course):
    source, work = course
    start.start(source, work)
    (work / MANIFEST_NAME).unlink()
    update_source(source / "01_a.ipynb", "print('v2')")
    report = start.start(source, work)
    assert report.outdated == ["01_a.ipynb"]
    assert report.up_to_date == ["02_b.ipynb", "03_c.ipynb"]
    assert (work / MANIFEST_NAME).exists()  # rebuilt


def test_no_record_at_all_is_reported_as_unknown_and_still_never_overwritten(course):
    source, work = course
    start.start(source, work)
    (work / MANIFEST_NAME).unlink()
    student_edit(work / "01_a.ipynb", "answer")
    for name in ("01_a.ipynb", "02_b.ipynb"):  # metadata stripped by some tool
        nb = json.loads((work / name).read_text())
        del nb["metadata"]["course"]
        (work / name).write_text(json.dumps(nb))
    mine = snapshot(work)
    report = start.start(source, work, write_new=True)
    # 02 without a record but the same cells: it differs in layout only, so unknown too.
    assert report.unknown == ["01_a.ipynb", "02_b.ipynb"]
    assert report.up_to_date == ["03_c.ipynb"]
    assert set(report.written_beside) == {"01_a.ipynb", "02_b.ipynb"}
    assert {k: v for k, v in snapshot(work).items() if k in mine} == mine


def test_unreadable_manifest_is_set_aside_not_lost(course):
    source, work = course
    start.start(source, work)
    (work / MANIFEST_NAME).write_text("{ broken")
    report = start.start(source, work)
    assert any("could not read" in w for w in report.warnings)
    assert report.up_to_date == ["01_a.ipynb", "02_b.ipynb", "03_c.ipynb"]  # from the metadata
    assert (work / f"{MANIFEST_NAME}.unreadable").read_text() == "{ broken"
    assert json.loads((work / MANIFEST_NAME).read_text())["format"] == 1


def test_a_folder_where_a_notebook_should_be_is_left_alone(course):
    source, work = course
    (work / "01_a.ipynb").mkdir(parents=True)
    (work / "01_a.ipynb" / "inside.txt").write_text("mine")
    report = start.start(source, work)
    assert report.copied == ["02_b.ipynb", "03_c.ipynb"]
    assert any("01_a.ipynb" in w for w in report.warnings)
    assert (work / "01_a.ipynb" / "inside.txt").read_text() == "mine"


# ------------------------------------------------------- property: nothing overwritten


def _run_random_history(seed: int, tmp: Path) -> None:
    rng = random.Random(seed)
    source, work = tmp / f"src{seed}", tmp / f"work{seed}"
    source.mkdir()
    names = ["01_a.ipynb", "02_b.ipynb"]
    version = {}
    for name in names:
        version[name] = 1
        update_source(source / name, f"{name} v1")
    origin: dict[str, str] = {}  # file in work -> source hash it was written from (model)
    for step in range(25):
        op = rng.choice(["update", "add", "edit", "break", "strip", "delete", "manifest",
                         "own_new", "start", "start", "write_new", "write_new"])
        files = sorted(snapshot(work)) if work.exists() else []
        files = [work / name for name in files]
        if op == "update":
            name = rng.choice(names)
            version[name] += 1
            update_source(source / name, f"{name} v{version[name]}")
        elif op == "add" and len(names) < 4:
            name = f"0{len(names) + 1}_new.ipynb"
            names.append(name)
            version[name] = 1
            update_source(source / name, f"{name} v1")
        elif op == "edit" and files:
            path = rng.choice(files)
            try:
                student_edit(path, f"answer {step}")
            except (ValueError, KeyError, IndexError, TypeError):
                path.write_bytes(path.read_bytes() + b" ")
        elif op == "break" and files:
            rng.choice(files).write_bytes(b"half-saved {")
        elif op == "strip" and files:
            path = rng.choice(files)
            try:
                nb = json.loads(path.read_text())
                nb["metadata"].pop("course", None)
                path.write_text(json.dumps(nb))
            except (ValueError, KeyError, TypeError):
                pass
        elif op == "delete" and files:
            path = rng.choice(files)
            path.unlink()
            origin.pop(path.name, None)
        elif op == "manifest" and (work / MANIFEST_NAME).exists():
            if rng.random() < 0.5:
                (work / MANIFEST_NAME).unlink()
            else:
                (work / MANIFEST_NAME).write_text("garbage")
        elif op == "own_new" and work.exists():
            (work / f"{rng.choice(names)[:-6]}.new.ipynb").write_bytes(b"student's own")
        elif op in ("start", "write_new"):
            before = snapshot(work) if work.exists() else {}
            report = start.start(source, work, write_new=op == "write_new")
            after = snapshot(work)
            context = f"seed {seed}, step {step}, {op}"
            for name, data in before.items():  # nothing deleted, nothing rewritten
                assert after.get(name) == data, f"{name} changed ({context})"
            created = {n for n in set(after) - set(before) if not n.startswith(f"{MANIFEST_NAME}.unreadable")}
            assert created == set(report.copied) | set(report.written_beside.values()), context
            for name in names:  # every course notebook is there, classified exactly once
                assert (work / name).is_file(), context
                groups = [report.copied, report.up_to_date, report.outdated, report.unknown]
                assert sum(name in g for g in groups) == 1, context
                current = sha((source / name).read_bytes())
                for made in created:
                    if json.loads(after[made])["metadata"]["course"]["source"] == name:
                        origin[made] = current
                # The version check itself: a copy that still carries its record is
                # outdated exactly when its source changed since it was written.
                if name in origin and start.recorded_in_notebook(work / name) == origin[name]:
                    assert (name in report.outdated) == (origin[name] != current), context
                if op == "write_new" and name in report.outdated + report.unknown:
                    beside = report.written_beside.get(name) or report.already_beside.get(name)
                    assert beside is not None, context
                    assert start.recorded_in_notebook(work / beside) == current, context


@pytest.mark.parametrize("seed", range(40))
def test_random_histories_never_overwrite_or_delete_anything(tmp_path, seed):
    _run_random_history(seed, tmp_path)


# ---------------------------------------------------------------- the real repository


def test_defaults_are_the_repository_notebooks_and_my_work():
    assert start.DEFAULT_SOURCE == ROOT / "notebooks"
    assert start.DEFAULT_TARGET == ROOT / "my_work"


def test_real_notebooks_are_copied_by_default(tmp_path, capsys):
    assert start.main([str(tmp_path / "mine")]) == 0
    expected = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
    assert expected, "no notebooks in notebooks/"
    assert sorted(p.name for p in (tmp_path / "mine").glob("*.ipynb")) == expected
    for name in expected:
        copy = nbformat.read(tmp_path / "mine" / name, as_version=4)
        nbformat.validate(copy)
        assert copy.metadata.course.source_sha256 == sha((ROOT / "notebooks" / name).read_bytes())
    assert "copied (new):" in capsys.readouterr().out


def test_my_work_is_ignored_by_git():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    done = subprocess.run(
        ["git", "-c", f"safe.directory={ROOT}", "check-ignore", "--no-index",
         "my_work/01_attention.ipynb", "my_work/.course_versions.json"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, ".gitignore must ignore my_work/: " + done.stderr
    assert len(done.stdout.split()) == 2, done.stdout  # both paths ignored


# ----------------------------------------------------------------------- course.py lab


def _course_module():
    spec = importlib.util.spec_from_file_location("course_script_lab", ROOT / "course_cli.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_course_py_lab_copies_into_my_work_then_opens_it(monkeypatch, tmp_path):
    course = _course_module()
    calls = []
    monkeypatch.setattr(course, "ensure_installed", lambda: calls.append("install"))
    monkeypatch.setattr(course, "WORK", tmp_path / "my_work")

    def fake_run(cmd, env=None, server=False):
        calls.append(tuple(cmd))
        if cmd[:2] == ["-m", "course_tools.start"]:  # run it for real, into tmp_path
            return start.main([*cmd[2:], "--source", str(ROOT / "notebooks")])
        return 0

    monkeypatch.setattr(course, "run_in_venv", fake_run)
    assert course.main(["lab", "--write-new", "--port", "8899"]) == 0
    assert calls[0] == "install"
    start_call, lab_call = calls[1], calls[2]
    assert start_call[:3] == ("-m", "course_tools.start", str(tmp_path / "my_work"))
    assert "--write-new" in start_call and "--write-new" not in lab_call
    assert lab_call[:3] == ("-m", "jupyterlab", str(tmp_path / "my_work"))
    assert "--port" in lab_call and "8899" in lab_call
    calls.clear()
    assert course.main(["notebook", "--port", "8898"]) == 0  # Jupyter Notebook 7, same copies
    assert calls[0] == "install"
    assert calls[2][:3] == ("-m", "notebook", str(tmp_path / "my_work"))
    assert sorted(p.name for p in (tmp_path / "my_work").glob("*.ipynb")) == sorted(
        p.name for p in (ROOT / "notebooks").glob("*.ipynb")
    )


def test_course_py_lab_turns_off_jupyters_news_question_for_its_own_jupyter(monkeypatch, tmp_path):
    """`lab` and `notebook` set fetchNews to "false" (no "Would you like to get notified about
    official Jupyter news?") as a default of .venv's JupyterLab, where both apps read it; the
    student's own settings folder is not written to."""
    settings_utils = pytest.importorskip("jupyterlab_server.settings_utils")
    from jupyterlab.commands import get_app_dir

    course = _course_module()
    monkeypatch.delenv("JUPYTERLAB_DIR", raising=False)
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path / "home-config"))  # the student's own
    # the folder course.py writes to, for a .venv, is the one this environment's apps read:
    # JupyterLab's and Notebook 7's app_settings_dir default to <get_app_dir()>/settings
    # (constructing the two apps here would cost seconds of imports)
    assert course.lab_settings_dir(Path(sys.prefix)).resolve() == (Path(get_app_dir()) / "settings").resolve()

    venv = tmp_path / ".venv"
    monkeypatch.setattr(course, "VENV", venv)
    monkeypatch.setattr(course, "WORK", tmp_path / "my_work")
    monkeypatch.setattr(course, "ensure_installed", lambda: None)
    monkeypatch.setattr(course, "run_in_venv", lambda cmd, env=None, server=False: 0)
    for command in ("lab", "notebook", "lab"):  # rerun: the same file, no error
        assert course.main([command]) == 0
    settings = course.lab_settings_dir(venv)
    overrides, error = settings_utils._get_overrides(str(settings))  # as JupyterLab's server reads them
    assert not error
    plugin = "@jupyterlab/apputils-extension:notification"
    assert overrides[plugin] == {"fetchNews": "false", "checkForUpdates": False}
    # the values are ones the setting's schema allows ("false" is "Never"; "none" asks)
    schema = json.loads((Path(sys.prefix) / "share/jupyter/lab/schemas" / plugin.replace(":", "/")).with_suffix(".json")
                        .read_text(encoding="utf-8"))
    assert {"const": "false", "title": "Never"} in schema["properties"]["fetchNews"]["oneOf"]
    assert schema["properties"]["checkForUpdates"]["type"] == "boolean"
    assert not (tmp_path / "home-config").exists()


def test_course_py_lab_stops_when_the_copy_fails(monkeypatch, tmp_path):
    course = _course_module()
    monkeypatch.setattr(course, "ensure_installed", lambda: None)
    calls = []
    monkeypatch.setattr(course, "run_in_venv", lambda cmd, env=None, server=False: calls.append(cmd) or 2)
    with pytest.raises(SystemExit):
        course.main(["lab"])
    assert len(calls) == 1  # JupyterLab was not started


# ------------------------------------------------------- unwritable folders, concurrency


@pytest.mark.skipif(not hasattr(__import__("os"), "geteuid") or __import__("os").geteuid() == 0,
                    reason="root can write to a read-only folder")
def test_read_only_folder_is_a_clear_error_not_a_traceback(course, capsys):
    source, work = course
    work.mkdir()
    work.chmod(0o555)
    try:
        assert start.main([str(work), "--source", str(source)]) == 2
    finally:
        work.chmod(0o755)
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot write your copies to {work}: Permission denied."), err
    assert "Traceback" not in err and list(work.iterdir()) == []


def test_unwritable_folder_is_a_clear_error_even_as_root(course, capsys, monkeypatch):
    """The same path without relying on permissions (CI runs as root): any OSError while
    writing becomes one line."""
    source, work = course

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(work / ".tmp"))

    monkeypatch.setattr(start.tempfile, "mkstemp", refuse)
    assert start.main([str(work), "--source", str(source)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: cannot write your copies to {work}: Permission denied. Choose a folder you can write to: python -m course_tools.start DIR\n"  # noqa: E501


def test_new_files_appear_whole_and_are_never_replaced(tmp_path, monkeypatch):
    target = tmp_path / "a.ipynb"
    seen = []
    real_link = start.os.link

    def watching_link(src, dst):
        assert not Path(dst).exists() or Path(dst).read_bytes() == b"first"
        real_link(src, dst)
        seen.append(Path(dst).read_bytes())  # the name shows the complete bytes at once

    monkeypatch.setattr(start.os, "link", watching_link)
    assert start.write_new_file(target, b"first") is True
    assert start.write_new_file(target, b"second") is False
    assert target.read_bytes() == b"first" and seen == [b"first"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.ipynb"]  # no temporary file left

    def no_links(src, dst):
        raise OSError(1, "Operation not permitted")

    monkeypatch.setattr(start.os, "link", no_links)  # e.g. a FAT drive: plain exclusive create
    assert start.write_new_file(tmp_path / "b.ipynb", b"b") is True
    assert start.write_new_file(tmp_path / "b.ipynb", b"other") is False
    assert (tmp_path / "b.ipynb").read_bytes() == b"b"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.ipynb", "b.ipynb"]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file modes")
@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077], ids=["022", "002", "077"])
def test_copies_get_the_mode_any_new_file_gets(course, umask):
    """A copy is as readable as the course's own files (0o644 under the usual umask), not
    private as a temporary file is (0o600): the mode comes from the umask, as open() gives it."""
    import os

    source, work = course
    old = os.umask(umask)
    try:
        start.start(source, work)
        (source / "02_b.ipynb").write_bytes(make_notebook("y = 2\n"))  # a course update
        start.start(source, work, write_new=True)
        (work / "plain.txt").write_text("")  # what open() makes under this umask
    finally:
        os.umask(old)
    expected = 0o666 & ~umask
    assert (work / "plain.txt").stat().st_mode & 0o777 == expected
    files = sorted(work.glob("*.ipynb"))
    assert any(".new" in p.name for p in files) and len(files) >= 3, files
    for path in [*files, work / MANIFEST_NAME]:
        assert path.stat().st_mode & 0o777 == expected, (path.name, oct(path.stat().st_mode))


def test_two_runs_at_once_never_read_a_half_written_copy(course):
    """Two processes copying into one folder at the same time: every copy either side
    reads is complete, and each is classified (copied by one, up to date for the other)."""
    import os
    import sys

    source, work = course
    for i in range(4, 30):  # enough files for the two runs to overlap
        (source / f"{i:02d}_x.ipynb").write_bytes(make_notebook("x = 1\n" * 2000))
    code = (
        "import sys, json; from course_tools import start\n"
        "r = start.start(sys.argv[1], sys.argv[2])\n"
        "print(json.dumps({'copied': r.copied, 'up': r.up_to_date, 'odd': r.unknown + r.outdated}))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    runs = [subprocess.Popen([sys.executable, "-c", code, str(source), str(work)], stdout=subprocess.PIPE,
                             text=True, env=env) for _ in range(2)]
    results = [json.loads(run.communicate(timeout=120)[0]) for run in runs]
    names = sorted(p.name for p in source.glob("*.ipynb"))
    assert sorted(results[0]["copied"] + results[1]["copied"]) == names
    for result in results:
        assert result["odd"] == []  # a half-written copy would read as "version unknown"
        assert sorted(result["copied"] + result["up"]) == names
    for name in names:
        assert start.recorded_in_notebook(work / name) == sha((source / name).read_bytes())
