"""Copy the course notebooks into your own folder, never overwriting your work.

Backs ``python3 course.py lab`` (every notebook; not used in Colab, where each notebook is
opened on its own)::

    python -m course_tools.start [DIR] [--write-new] [--source NOTEBOOKS]

``DIR`` (default ``my_work/`` next to ``notebooks/``, ignored by git) receives a copy of
every ``notebooks/*.ipynb`` that it does not have yet. Students work in ``DIR``, so a
``git pull`` that brings new versions of the notebooks never conflicts with their answers.

Rules, in order of importance:

1. A file that exists in ``DIR`` is never written to, not even when it is identical to
   the course's version, and nothing is ever deleted or renamed. A new file is written
   under a temporary name, then hard-linked to its name, which fails rather than replace
   a file and never shows a half-written copy (:func:`write_new_file`).
2. Each copy records the course version it came from: the SHA-256 of the source notebook
   at copy time, in the copy's own notebook metadata (``metadata.course.source_sha256``,
   which travels with the file and which Jupyter keeps when saving) and in the hidden
   manifest ``DIR/.course_versions.json`` (the fallback when a student's Jupyter or a
   tool drops the metadata). Either may be missing; the manifest is the only file this
   tool ever rewrites, and an unreadable one is set aside (renamed), not lost.
3. When the source notebook's hash differs from the recorded one, the copy is reported as
   outdated. ``--write-new`` then writes the current version *beside* it as
   ``NN_name.new.ipynb`` (``NN_name.new-2.ipynb``, ... when that name is taken), unless a
   file beside it already holds that version.

A copy with no record at all (both metadata and manifest gone) that differs from the
current source is reported as "version unknown"; ``--write-new`` puts the current version
beside it too.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import os
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the repository, when run from a clone
DEFAULT_SOURCE = ROOT / "notebooks"
DEFAULT_TARGET = ROOT / "my_work"
MANIFEST_NAME = ".course_versions.json"
METADATA_KEY = "course"  # notebook metadata: {"source": name, "source_sha256": hex}
MANIFEST_FORMAT = 1
DEFAULT_RERUN = "python -m course_tools.start --write-new"


def source_notebooks(source: Path) -> list[Path]:
    """The course notebooks to copy: ``*.ipynb`` in ``source``, sorted by name."""
    return sorted(p for p in Path(source).glob("*.ipynb") if p.is_file())


def beside_names(name: str):
    """Candidate names for a newer version written beside ``name``: ``NN.new.ipynb``,
    ``NN.new-2.ipynb``, ``NN.new-3.ipynb``, ..."""
    stem = name[: -len(".ipynb")] if name.endswith(".ipynb") else name
    yield f"{stem}.new.ipynb"
    number = 2
    while True:
        yield f"{stem}.new-{number}.ipynb"
        number += 1


def _beside_pattern(name: str) -> re.Pattern:
    stem = name[: -len(".ipynb")] if name.endswith(".ipynb") else name
    return re.compile(re.escape(stem) + r"\.new(-\d+)?\.ipynb")


def stamped_copy(data: bytes, source_name: str, digest: str) -> bytes:
    """The bytes of a copy: the source notebook with its version recorded in its metadata.

    Written in Jupyter's own layout (indent 1, sorted keys, trailing newline), and with
    this Python's version in ``language_info``, so that opening it in Jupyter (whose
    kernel runs this Python when started by ``course.py``) changes nothing. A source that is not valid notebook
    JSON is copied byte for byte (its version is then in the manifest only).
    """
    try:
        nb = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return data
    if not isinstance(nb, dict):
        return data
    metadata = nb.setdefault("metadata", {})
    if not isinstance(metadata, dict):
        return data
    metadata[METADATA_KEY] = {"source": source_name, "source_sha256": digest}
    language = metadata.get("language_info")
    if isinstance(language, dict) and language.get("name") == "python":
        # This Python's exact version, which its kernel reports: JupyterLab marks a notebook
        # modified when the kernel's language_info differs from the stored one (the course
        # stores major.minor only), so the copy would ask to be saved as soon as it opens.
        metadata["language_info"] = {**language, "version": sys.version.split()[0]}
    return (json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def recorded_in_notebook(path: Path) -> str | None:
    """The source hash recorded in a copy's metadata, or None (no record, or not JSON)."""
    try:
        nb = json.loads(Path(path).read_text(encoding="utf-8"))
        record = nb["metadata"][METADATA_KEY]["source_sha256"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
        return None
    return record if isinstance(record, str) else None


def write_new_file(path: Path, data: bytes) -> bool:
    """Create ``path`` with ``data``; False (and nothing written) if it exists already.

    The bytes go to a temporary file first, which is then hard-linked to ``path``: the
    link appears whole (a second run at the same time never reads a half-written copy)
    and, like ``open(path, "x")``, fails rather than replace an existing file. Where the
    file system has no hard links, ``open(path, "x")`` itself is used.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        # mkstemp makes the file private (0o600); a copy gets the mode any new file gets
        # (usually 0o644), as open() would give it
        os.chmod(tmp, 0o666 & ~_umask())
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        except OSError:  # no hard links here (e.g. FAT, some network drives)
            return _write_exclusive(path, data)
        return True
    finally:
        os.unlink(tmp)


def _umask() -> int:
    """This process's umask (read by setting it, then putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _write_exclusive(path: Path, data: bytes) -> bool:
    try:
        with open(path, "xb") as f:  # O_CREAT | O_EXCL: never replaces a file
            f.write(data)
    except FileExistsError:
        return False
    return True


# --------------------------------------------------------------------------- manifest


def read_manifest(target: Path) -> tuple[dict, str | None]:
    """``({file name: record}, warning)``; a missing manifest is simply empty."""
    path = target / MANIFEST_NAME
    if not path.exists():
        return {}, None
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        files = raw["files"]
        if not isinstance(files, dict):
            raise TypeError("'files' is not an object")
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as error:
        return {}, (
            f"could not read {MANIFEST_NAME} ({error}); "
            f"kept it as {MANIFEST_NAME}.unreadable and started a new one"
        )
    return {k: v for k, v in files.items() if isinstance(v, dict)}, None


def write_manifest(target: Path, files: dict) -> None:
    """Rewrite the manifest (the one file this tool replaces) atomically."""
    path = target / MANIFEST_NAME
    if path.exists() and read_manifest(target)[1] is not None:
        # Unreadable: keep it under another name rather than destroy it.
        for number in range(1, 1000):
            aside = target / f"{MANIFEST_NAME}.unreadable{'' if number == 1 else f'-{number}'}"
            if not aside.exists():
                os.replace(path, aside)
                break
    text = json.dumps({"format": MANIFEST_FORMAT, "files": files}, indent=1, sort_keys=True) + "\n"
    tmp = target / f"{MANIFEST_NAME}.tmp-{os.getpid()}"
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


# --------------------------------------------------------------------------- the run


@dataclass
class Report:
    """What one run found and did (file names relative to the target folder)."""

    copied: list[str] = field(default_factory=list)
    up_to_date: list[str] = field(default_factory=list)
    outdated: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)  # no record, differs from the source
    written_beside: dict[str, str] = field(default_factory=dict)  # copy -> new file
    already_beside: dict[str, str] = field(default_factory=dict)  # copy -> existing file
    warnings: list[str] = field(default_factory=list)


def _record_of(path: Path, manifest: dict) -> str | None:
    # The notebook's own metadata first: it moves with the file (a student who puts the
    # .new file in place of the old one gets the new record with it).
    return recorded_in_notebook(path) or manifest.get(path.name, {}).get("source_sha256")


def _beside_with(target: Path, name: str, digest: str) -> str | None:
    """A file already beside ``name`` that holds version ``digest``, if any."""
    pattern = _beside_pattern(name)
    for path in sorted(target.glob("*.ipynb")):
        # Only the file's own record counts here: a manifest entry cannot tell whether
        # the student has since put something else under that name.
        if pattern.fullmatch(path.name) and recorded_in_notebook(path) == digest:
            return path.name
    return None


def start(source: Path = DEFAULT_SOURCE, target: Path = DEFAULT_TARGET, write_new: bool = False) -> Report:
    """Copy missing notebooks from ``source`` into ``target``; report the older copies;
    with ``write_new``, write their current version beside them. Never overwrites."""
    source, target = Path(source), Path(target)
    notebooks = source_notebooks(source)
    if not notebooks:
        raise FileNotFoundError(f"no notebooks (*.ipynb) in {source}")
    if target.exists() and not target.is_dir():
        raise NotADirectoryError(f"{target} exists and is not a folder")
    target.mkdir(parents=True, exist_ok=True)
    manifest, warning = read_manifest(target)
    report = Report(warnings=[warning] if warning else [])
    now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    changed = warning is not None

    for src in notebooks:
        name = src.name
        data = src.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        stamped = stamped_copy(data, name, digest)
        dest = target / name
        if write_new_file(dest, stamped):
            report.copied.append(name)
            manifest[name] = {"source": name, "source_sha256": digest, "copied": now}
            changed = True
            continue

        if not dest.is_file():  # e.g. a folder of that name: leave it alone
            report.warnings.append(f"{name} in {target} is not a file; not copied")
            continue
        recorded = _record_of(dest, manifest)
        if recorded is None:
            current = dest.read_bytes()
            if current in (data, stamped):  # an untouched copy of the current version
                report.up_to_date.append(name)
                manifest[name] = {"source": name, "source_sha256": digest, "copied": None}
                changed = True
                continue
            report.unknown.append(name)
        elif recorded == digest:
            report.up_to_date.append(name)
            if manifest.get(name, {}).get("source_sha256") != digest:
                manifest[name] = {"source": name, "source_sha256": digest, "copied": None}  # date unknown
                changed = True
            continue
        else:
            report.outdated.append(name)

        existing = _beside_with(target, name, digest)
        if existing is not None:
            report.already_beside[name] = existing
        elif write_new:
            for candidate in beside_names(name):
                if write_new_file(target / candidate, stamped):
                    report.written_beside[name] = candidate
                    manifest[candidate] = {"source": name, "source_sha256": digest, "copied": now}
                    changed = True
                    break

    if changed:
        write_manifest(target, manifest)
    return report


def _show(path: Path) -> str:
    """``path`` relative to the current folder when it lies inside it, else as given."""
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return str(path)
    return str(path) if relative.split(os.sep)[0] == ".." else relative


def format_report(report: Report, target: Path, rerun: str = DEFAULT_RERUN) -> str:
    """A short, friendly summary of a run."""
    lines = [f"Your notebooks are in {_show(target)}{os.sep} (your files there are never overwritten)."]

    def row(label: str, names) -> None:
        if names:
            lines.append(f"  {label:<28} {', '.join(names)}")

    row("copied (new):", report.copied)
    row("kept (yours, up to date):", report.up_to_date)
    row("outdated (newer version):", report.outdated)
    row("kept (version unknown):", report.unknown)
    row("written beside yours:", [f"{new} (for {old})" for old, new in report.written_beside.items()])
    row("newer version already in:", [f"{new} (for {old})" for old, new in report.already_beside.items()])
    for warning in report.warnings:
        lines.append(f"  note: {warning}")
    handled = {**report.written_beside, **report.already_beside}
    waiting = [n for n in report.outdated + report.unknown if n not in handled]
    if waiting:
        lines.append(
            f"To get the course's current version of {', '.join(waiting)} beside yours "
            f"(as NN_name.new.ipynb, your file untouched), run: {rerun}"
        )
    if report.written_beside or report.already_beside:
        lines.append(
            "Open the .new notebook next to yours and move your answers across (or rename "
            "the files) when you like; nothing is replaced for you."
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m course_tools.start",
        description=(
            "Copy the course notebooks into your own folder (default my_work/), never "
            "overwriting a file there; report copies that a course update made outdated."
        ),
    )
    parser.add_argument("target", nargs="?", type=Path, default=DEFAULT_TARGET,
                        help=f"your folder (default {DEFAULT_TARGET})")
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE,
                        help=f"the course notebooks (default {DEFAULT_SOURCE})")
    parser.add_argument("--write-new", action="store_true",
                        help="write the newer version of an outdated notebook beside yours as NN_name.new.ipynb")
    parser.add_argument("--rerun-hint", default=DEFAULT_RERUN, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        report = start(args.source, args.target, write_new=args.write_new)
    except (FileNotFoundError, NotADirectoryError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # a read-only folder, a full disk, ...
        reason = error.strerror or str(error)
        print(
            f"error: cannot write your copies to {_show(args.target)}: {reason}. Choose a folder "
            f"you can write to: python -m course_tools.start DIR",
            file=sys.stderr,
        )
        return 2
    print(format_report(report, args.target, args.rerun_hint))
    return 0


if __name__ == "__main__":
    sys.exit(main())
