"""What a graded kernel must not change, checked by content (``course_tools.grade``).

The audit hook in a graded kernel refuses Python's own file operations outside its folder, but
some libraries write through C code that no hook sees (``torch.from_file(path, shared=True)``
maps any file it can open). So what matters is also checked by hashing:

* :class:`PackageCopy`: the course package (``course_utils`` and the ``data`` folder beside it)
  copied for one kernel, which imports it from there and never from the instructor's checkout.
  The copy is read-only where the operating system enforces it (root ignores permission bits;
  the sandbox mounts it read-only) and its files' hashes are compared after the kernel's turn.
* :class:`FileGuard`: the files around the kernels (the class's folders, the solutions, the
  instructor's checkout of the course): their bytes at the start; :meth:`FileGuard.check` names
  every file changed, added or removed since, and puts it back as it was.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .kernels import PACKAGE_ROOT

PACKAGE_PARTS = ("course_utils", "data")  # what a kernel imports and reads, beside each other
KEEP_BYTES = 64 * 2**20  # files up to this size are kept to be put back; larger ones are only hashed


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(2**20), b""):
            h.update(block)
    return h.hexdigest()


def _files(root: Path) -> Iterable[Path]:
    """Every regular file under ``root`` (``root`` itself when it is a file); links not followed."""
    if root.is_symlink() or not root.exists():
        return
    if root.is_file():
        yield root
        return
    for folder, dirs, names in os.walk(root):
        dirs.sort()
        for name in sorted(names):
            path = Path(folder, name)
            if path.is_file() and not path.is_symlink():
                yield path


@dataclass
class Change:
    path: str
    how: str  # "changed", "added" or "removed"
    undone: bool = False

    def __str__(self) -> str:
        return f"{self.how} {self.path}" + ("" if self.undone else " (could not be put back)")


COPY_PREFIX = "course-grade-package-"


def remove_stale_copies(folder: Path | None = None) -> list[Path]:
    """Remove the package copies (``course-grade-package-<pid>-*`` in ``folder``, the
    temporary folder by default) of graders that are gone (killed before they could remove
    them); only this user's, and never one whose process still runs. Returns those removed."""
    folder = Path(folder or tempfile.gettempdir())
    removed = []
    for path in folder.glob(f"{COPY_PREFIX}*-*"):
        pid = path.name[len(COPY_PREFIX):].split("-", 1)[0]
        try:
            if not pid.isdigit() or path.is_symlink() or not path.is_dir() or path.stat().st_uid != os.getuid():
                continue
            os.kill(int(pid), 0)
            continue  # its grader still runs (or the PID is another process's now): left alone
        except ProcessLookupError:
            pass
        except OSError:
            continue
        copy = PackageCopy.__new__(PackageCopy)
        copy.root = path
        copy.remove()
        removed.append(path)
    return removed


class PackageCopy:
    """A private, read-only copy of the course package for one kernel (see the module's docstring).
    ``root`` goes first on the kernel's ``PYTHONPATH``; :meth:`changes` after its turn."""

    def __init__(self, source: Path = PACKAGE_ROOT):
        # the grader's PID in the name: a copy whose grader is gone is removed by the next one
        self.root = Path(tempfile.mkdtemp(prefix=f"{COPY_PREFIX}{os.getpid()}-")).resolve()
        for part in PACKAGE_PARTS:
            if (source / part).is_dir():
                shutil.copytree(source / part, self.root / part, symlinks=False,
                                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        self.hashes = {str(p.relative_to(self.root)): _digest(p) for p in _files(self.root)}
        for folder, dirs, names in os.walk(self.root, topdown=False):
            for name in names:
                os.chmod(Path(folder, name), 0o444)
            os.chmod(folder, 0o555)

    @property
    def package(self) -> Path:
        return self.root / "course_utils"

    def changes(self) -> list[Change]:
        """The copy's files that are not as made (changed, added, removed)."""
        now = {str(p.relative_to(self.root)): p for p in _files(self.root)}
        found = [Change(rel, "removed", True) for rel in self.hashes if rel not in now]
        for rel, path in now.items():
            if rel not in self.hashes:
                found.append(Change(rel, "added", True))
            elif _digest(path) != self.hashes[rel]:
                found.append(Change(rel, "changed", True))
        return found  # (undone: the copy is thrown away)

    def remove(self) -> None:
        for folder, _, _ in os.walk(self.root):
            try:
                os.chmod(folder, 0o755)
            except OSError:
                pass
        shutil.rmtree(self.root, ignore_errors=True)


@dataclass
class _Saved:
    quick: tuple  # size, modification and change times, inode: a change of content changes one of them
    digest: str
    data: bytes | None  # None: too large to keep
    mode: int
    times: tuple[int, int]


class FileGuard:
    """The files under ``roots`` as they were when it was made; :meth:`check` puts back every
    change since (see the module's docstring). A file's ``stat`` is compared first, so a check
    reads only files that were touched."""

    def __init__(self, roots: Iterable[Path], known: dict[Path, bytes] | None = None):
        """``known``: files' bytes already read (the submissions), kept once, not twice."""
        self.roots = sorted({Path(r).resolve() for r in roots if Path(r).exists()})
        self.saved: dict[Path, _Saved] = {}
        self.folders: set[Path] = set()
        known = {Path(p).resolve(): data for p, data in (known or {}).items()}
        for path in self._walk():
            self.saved[path] = self._save(path, known.get(path))
        self.folders = set(self._folders())

    def _walk(self) -> Iterable[Path]:
        for root in self.roots:
            yield from _files(root)

    def _folders(self) -> Iterable[Path]:
        for root in self.roots:
            if root.is_dir() and not root.is_symlink():
                for folder, _, _ in os.walk(root):
                    yield Path(folder)

    @staticmethod
    def _quick(st: os.stat_result) -> tuple:
        return st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino

    def _save(self, path: Path, known: bytes | None = None) -> _Saved:
        st = path.stat()
        data = known if known is not None and len(known) == st.st_size else (
            path.read_bytes() if st.st_size <= KEEP_BYTES else None)
        digest = hashlib.sha256(data).hexdigest() if data is not None else _digest(path)
        return _Saved(self._quick(st), digest, data, stat.S_IMODE(st.st_mode), (st.st_atime_ns, st.st_mtime_ns))

    def check(self) -> list[Change]:
        """Every file changed, added or removed since the guard was made, each put back."""
        found: list[Change] = []
        seen = set()
        for path in self._walk():
            seen.add(path)
            saved = self.saved.get(path)
            if saved is None:
                # byte code that another process compiled for a module first imported now (a checkout
                # runs more than the grader); a changed one is caught below, as is its source
                if "__pycache__" not in path.parts:
                    found.append(Change(str(path), "added"))
                continue
            try:
                st = path.stat()
                if self._quick(st) == saved.quick:
                    continue
                if _digest(path) == saved.digest:
                    saved.quick = self._quick(st)  # touched, same bytes (times are put back below)
                    if (st.st_atime_ns, st.st_mtime_ns) == saved.times:
                        continue
                    os.utime(path, ns=saved.times)
                    saved.quick = self._quick(path.stat())
                    continue
            except OSError:
                pass
            found.append(Change(str(path), "changed"))
        found += [Change(str(p), "removed") for p in self.saved if p not in seen]
        for change in found:
            change.undone = self._undo(Path(change.path), change.how)
        for folder in sorted(set(self._folders()) - self.folders, reverse=True):
            if folder.name != "__pycache__":
                shutil.rmtree(folder, ignore_errors=True)  # a folder it added (its files are named above)
        return found

    def _undo(self, path: Path, how: str) -> bool:
        try:
            if how == "added":
                path.unlink()
                return True
            saved = self.saved[path]
            if saved.data is None:
                return False
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            elif path.is_symlink():
                path.unlink()
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                path.write_bytes(saved.data)
            except PermissionError:
                os.chmod(path, 0o600)
                path.write_bytes(saved.data)
            os.chmod(path, saved.mode)
            os.utime(path, ns=saved.times)
            saved.quick = self._quick(path.stat())
            return True
        except OSError:
            return False
