"""Stage: the kernel side. What runs inside a graded kernel before any student code, sent there
as source (:func:`kernel_setup_source`: this module's kernel functions and those of
:mod:`.hide_references`, compiled into the notebook's first cell and run with private globals).

:func:`_kernel_side` imports the checkers, snapshots ``torch``, ``course_utils`` and the
builtins, moves the checkers' ``course_utils`` out of reach (a public copy with the graded
notebook's references hidden takes its place), and installs the audit hook: the only holder of
this run's key, it refuses what graded code has no reason to do, runs each check when the
grader's check cell asks (undoing any change to the snapshot first) and publishes the verdict
signed with HMAC-SHA256 (:func:`sign` is the grader's side of that signature).
:func:`uses_reference` is the second line of reference detection: how an answer holds or names
the course's reference."""

from __future__ import annotations

import hashlib
import hmac
import inspect
import textwrap

from ipykernel.compiler import murmur2_x86

from . import hide_references


def _kernel_side(config):  # pragma: no cover - runs inside the graded kernel
    """Set up grading in the kernel, before any student code: runs with private globals
    (a copy of the builtins), so nothing a student cell binds changes how it works. What
    it keeps lives only in the closure of the audit hook it installs."""
    import builtins
    import hashlib
    import os
    import sys
    import types
    import weakref

    import torch
    import torch.nn
    import torch.nn.functional
    import torch.testing
    from ipykernel.compiler import get_file_name
    from IPython import get_ipython
    from IPython.display import publish_display_data

    import course_utils
    import course_utils.checks
    from course_utils.checks import CheckResult

    package_root = os.path.realpath(config["package_root"])
    if not os.path.realpath(course_utils.__file__).startswith(package_root + os.sep):
        raise RuntimeError(f"grading: course_utils came from {course_utils.__file__}, not the grader's copy")

    with open(config["key_path"], "rb") as f:
        key = f.read().ljust(64, b"\0")
    os.unlink(config["key_path"])
    sha256 = hashlib.sha256  # a C function: nothing in Python can change what it computes
    ipad, opad = bytes(b ^ 0x36 for b in key), bytes(b ^ 0x5C for b in key)

    def sign(text):
        return sha256(opad + sha256(ipad + text.encode()).digest()).hexdigest()

    shell = get_ipython()
    missing = object()
    workdir = os.path.realpath(config["workdir"])
    turn = os.path.realpath(config["turn"])
    mime, event_name = config["mime"], config["event"]
    checkers = {name: getattr(course_utils.checks, fn) for name, fn in config["exercises"].items()}
    references = {name: getattr(course_utils, name, None) for name in config["exercises"]}
    # ipykernel compiles each cell under a file name made from a hash of its source: the
    # frames of the students' exercise cells, and the grader's own cells, are known by it.
    student_files = {get_file_name(src): name for name, src in config["exercise_sources"]}
    stdlib = os.path.dirname(os.__file__) + os.sep
    import linecache

    linecache_file = linecache.__file__
    readable = [workdir, turn, sys.prefix, sys.base_prefix, sys.exec_prefix, package_root,
                *(p for p in sys.path if "site-packages" in p or "dist-packages" in p),
                "/usr", "/lib", "/lib64", "/etc", "/dev", "/sys", "/proc/self", f"/proc/{os.getpid()}"]
    readable = [os.path.realpath(p) for p in readable if p]
    writable = [workdir, turn, "/dev/null"]
    # the references of this notebook out of reach (course_tools/grade/hide_references.py): the
    # checkers' copy of course_utils is kept here only; the kernel gets a public copy
    hidden_event, gate_event = event_name + "-hidden", event_name + "-gate"
    private, public, guards, fetch_code, gates = public_course(
        config["hidden"], hidden_event, config["guard_source"], config["skipped_modules"], gate_event,
        [e for e in config["hidden"] if e not in config["exercises"]])
    made = {}  # id -> weak reference: instances of hidden classes made where that was allowed
    course_files = {get_file_name(src) for src in config["course_sources"]} - set(student_files)
    package = os.path.realpath(os.path.dirname(course_utils.__file__)) + os.sep
    # what the course's other code may call: the helpers, and later notebooks' references
    helper_labels = {label for label in guards if label.rpartition(".")[2] not in config["exercises"]}
    # how a hidden name is shown: an exercise as course_utils exports it, a helper by its module
    shown = {label: label.rpartition(".")[2] if label.rpartition(".")[2] in config["hidden"] else label
             for label in guards}
    others = {}  # id -> (object, label): the hidden names' guards and the real helpers
    for label, (guard, real) in guards.items():
        others[id(guard)] = (guard, f"{shown[label]} (hidden while grading)")
        others[id(real)] = (real, shown[label])
    for entry in gates.values():  # the public copy's own objects, gated: the reference as well
        others.setdefault(id(entry[6]), (entry[6], shown.get(entry[1].rpartition(".")[0] if entry[4] else entry[1],
                                                             entry[1])))
    hidden_hits = []  # refused requests of a student's code: dicts with exercise, line, code, what
    checked = {}  # exercise label -> the student's own definition, once checked

    def watched():
        """(label, namespace owner, snapshot) of what a student could patch to fool a check."""
        owners = [("torch", torch), ("torch.nn", torch.nn), ("torch.nn.functional", torch.nn.functional),
                  ("torch.testing", torch.testing), ("torch.Tensor", torch.Tensor),
                  ("torch._C.TensorBase", torch._C.TensorBase), ("torch.nn.Module", torch.nn.Module),
                  ("torch.nn.Parameter", torch.nn.Parameter), ("torch.UntypedStorage", torch.UntypedStorage),
                  ("torch.TypedStorage", torch.TypedStorage), ("torch.serialization", torch.serialization),
                  ("builtins", builtins), ("CheckResult", CheckResult)]
        owners += [(n, m) for n, m in sorted(private.items())]
        owners += [(n, m) for n, m in sorted(public.items())]
        return [(label, owner, dict(vars(owner))) for label, owner in owners]

    pending = []  # findings not yet sent: dicts with exercise, line, what
    state = {"busy": 0, "checking": ""}

    def restore():
        """Put back what was saved; name the changes a student made (torch replaces a few of
        its own functions lazily: those are put back too, but are nobody's doing)."""
        changed = []
        for label, owner, saved in snapshot:
            now = vars(owner)
            # what a student added to a class (`torch.Tensor.__eq__ = ...` shadows the C method) or
            # to the course's modules; a module that appears in a package was imported, nobody's doing
            added = [n for n in now if n not in saved and (isinstance(owner, type) or label.startswith("course_utils"))
                     and not isinstance(now[n], types.ModuleType) and n != "__warningregistry__"]
            for name in added:
                code = getattr(now[name], "__code__", None)  # a library's addition (transformers adds
                if not (code is not None and "-packages" in code.co_filename):  # nn.Module.smart_apply)
                    changed.append(f"{label}.{name}")
                try:
                    if isinstance(owner, types.ModuleType):
                        del now[name]
                    else:
                        delattr(owner, name)
                except Exception:
                    pass
            for name, value in saved.items():
                new = now.get(name, missing)
                if name in ("_", "__", "___", "input", "raw_input", "getpass") or new is value:
                    continue
                module = getattr(new, "__module__", None)
                if owner is builtins or not (isinstance(module, str) and module.split(".")[0] == "torch"):
                    changed.append(f"{label}.{name}")
                try:
                    if isinstance(owner, types.ModuleType):
                        now[name] = value
                    else:
                        setattr(owner, name, value)
                except Exception:
                    pass
        return changed

    def stack():
        state["busy"] += 1
        try:
            frame = sys._getframe()
        finally:
            state["busy"] -= 1
        while frame is not None:
            yield frame
            frame = frame.f_back

    def student_frame(direct):
        """The innermost frame of a student's exercise cell on the stack (``direct``: only
        when it is the first frame outside the standard library, i.e. the student's code
        itself asked, not a library it called)."""
        for frame in stack():
            name = frame.f_code.co_filename
            if name in student_files:
                return frame
            if direct and not (name.startswith(stdlib) and "-packages" not in name) and name != "<course-grade>":
                return None
        return None

    def shown_by_linecache():
        """Whether the standard library's linecache, not a student's code, opens a file."""
        for frame in stack():
            name = frame.f_code.co_filename
            if name in student_files:
                return False
            if name == linecache_file:
                return True
        return False

    def flag(frame, what):
        name = frame.f_code.co_filename
        line = ""
        try:
            import linecache

            line = linecache.getline(name, frame.f_lineno).strip()
        except Exception:
            pass
        pending.append({"exercise": student_files.get(name), "line": frame.f_lineno, "code": line, "what": what})

    def inside(path, roots):
        return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)

    def paths(args):
        for arg in args:
            if isinstance(arg, (str, bytes, os.PathLike)):
                try:
                    yield os.path.realpath(os.fsdecode(arg))
                except Exception:
                    continue

    # refused when a student's cell is anywhere on the stack (a library may be its tool) ...
    spawn = {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
             "pty.spawn", "os.startfile", "os.kill", "os.killpg", "socket.connect", "socket.bind", "socket.sendto"}
    # ... or when the student's own code asks (libraries use these for their own ends)
    introspection = {"ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.call_function",
                     "sys.settrace", "sys.setprofile", "gc.get_objects", "gc.get_referrers", "gc.get_referents",
                     "sys._current_frames", "sys.monitoring.register_callback"}
    changing = {"os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.truncate",
                "os.utime", "os.symlink", "os.link", "shutil.rmtree", "shutil.move", "shutil.copyfile",
                "shutil.copytree", "os.chdir"}
    listing = {"os.listdir", "os.scandir", "glob.glob"}
    frame_attrs = {"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back"}

    def refused_by_system(exc):
        text = str(exc)
        return getattr(exc, "errno", None) in (1, 13, 30) or any(
            t in text for t in ("Read-only file system", "Permission denied", "Operation not permitted"))

    def file_function(fn, label, path_of, write_of):
        """``fn`` (a torch function that opens files in C, out of the audit hook's sight) with the
        hook's rule for files; an attempt the system refused (the sandbox) is reported too."""
        def guarded(*args, **kwargs):
            frame = student_frame(direct=False)
            if frame is None:
                return fn(*args, **kwargs)
            write = bool(write_of(args, kwargs))
            for path in paths([path_of(args, kwargs)]):
                if not inside(path, writable if write else readable):
                    refuse = f"{'writes' if write else 'reads'} {path} ({label}), outside its folder"
                    flag(frame, refuse + " (refused)")
                    raise PermissionError(f"grading: not allowed in graded code: {refuse}")
            try:
                return fn(*args, **kwargs)
            except (OSError, RuntimeError) as exc:
                if refused_by_system(exc):
                    flag(frame, f"{label} stopped by the system: {str(exc).strip().splitlines()[0][:160]}")
                raise
        return guarded

    def arg(i, name, default=None):
        return lambda args, kwargs: args[i] if len(args) > i else kwargs.get(name, default)

    for owner, attr, label, path_of, write_of in (
        (torch, "from_file", "torch.from_file", arg(0, "filename"), arg(1, "shared")),
        (torch.UntypedStorage, "from_file", "UntypedStorage.from_file", arg(0, "filename"), arg(1, "shared")),
        (torch.TypedStorage, "from_file", "TypedStorage.from_file", arg(0, "filename"), arg(1, "shared")),
        (torch, "save", "torch.save", arg(1, "f"), lambda a, k: True),
        (torch.serialization, "save", "torch.save", arg(1, "f"), lambda a, k: True),
        (torch, "load", "torch.load", arg(0, "f"), lambda a, k: False),
        (torch.serialization, "load", "torch.load", arg(0, "f"), lambda a, k: False),
        (torch.ops.aten, "from_file", "torch.ops.aten.from_file", arg(0, "filename"), arg(1, "shared")),
    ):
        wrapped = file_function(getattr(owner, attr), label, path_of, write_of)
        setattr(owner, attr, staticmethod(wrapped) if isinstance(owner, type) else wrapped)

    snapshot = watched()

    hidden_seen = set()

    def deliver(args):
        """A guard asks for a hidden reference: handed over to the course's own cells (one on
        the stack, no student cell, no check running), and a helper to the course's other
        code that calls it (``MultiHeadAttention`` computes its weights with notebook 01's
        helper); anyone else is refused."""
        if len(args) != 2 or type(args[0]) is not str or type(args[1]) is not list or args[0] not in guards:
            return
        label = args[0]
        state["busy"] += 1
        try:
            asker = sys._getframe(2)  # deliver <- hook <- the guard's request <- the guard <- its caller
            caller = asker.f_back.f_back if asker.f_back is not None else None
        finally:
            state["busy"] -= 1
        if asker.f_code is fetch_code and label in helper_labels and caller is not None \
                and caller.f_code.co_filename.startswith(package):
            args[1].append(guards[label][1])
            return
        if asker.f_code is fetch_code and not state["checking"]:
            course = False
            for frame in stack():
                name = frame.f_code.co_filename
                if name in student_files:
                    course = False
                    break
                course = course or name in course_files
            if course:
                args[1].append(guards[label][1])
                return
        if asker.f_code is fetch_code and label in checked:  # an exercise already checked: the student's own
            args[1].append(checked[label])
            return
        refused(label, shown[label])

    def gate(args):
        """A hidden object's own code asks to run (:func:`gate_allows` says who may)."""
        if len(args) != 2 or type(args[0]) is not list or type(args[1]) is not tuple:
            return
        state["busy"] += 1
        try:
            asker = sys._getframe(2)  # gate <- hook <- the gated function
            entry = gates.get(id(asker.f_code))
            if entry is None or entry[0] is not asker.f_code:
                return
            allowed = gate_allows(asker.f_back, entry, args[1], student_files, course_files, package, gates,
                                   stdlib, made)
            # an instance the course's code made or used (a checker's copy of a reference model):
            # its methods may then run for the student's code it is handed to
            if allowed and args[1] and entry[4] is not None and isinstance(args[1][0], entry[4]):
                try:
                    made[id(args[1][0])] = weakref.ref(args[1][0])
                except TypeError:
                    pass
        finally:
            state["busy"] -= 1
        if allowed:
            args[0].append(entry[2])
            return
        label = entry[1]
        exercise = next((e for e in config["hidden"] if label == e or label.startswith(e + ".")
                         or f".{e}." in f".{label}."), None)
        refused(label, label if exercise is None else label[label.index(exercise):])

    def refused(label, name):
        """Report a hidden object a student's code asked for: used the reference (R)."""
        what = f"calls course_utils.{name} (hidden while grading, refused)"
        frame = student_frame(direct=False)
        key = (frame.f_code.co_filename, frame.f_lineno, label) if frame is not None else (state["checking"], label)
        if key in hidden_seen:
            return
        hidden_seen.add(key)
        if frame is not None:
            flag(frame, what)
            hidden_hits.append(pending.pop())  # used the reference (R), not a finding to review
        elif state["checking"]:
            hidden_hits.append({"exercise": state["checking"], "line": None, "code": "", "what": what})
        else:
            pending.append({"exercise": None, "line": None, "code": "", "what": what})

    def hook(event, args):
        if state["busy"]:
            return
        if event == "sys.addaudithook":
            raise RuntimeError("grading: no other audit hook")
        if event == event_name:
            return request(args)
        if event == hidden_event:
            return deliver(args)
        if event == gate_event:
            return gate(args)
        state["busy"] += 1
        try:
            refuse = None
            if event in spawn or event in introspection:
                frame = student_frame(direct=event in introspection)
                if frame is not None and not (event in ("os.kill", "os.killpg") and args[0] == os.getpid()):
                    refuse = f"{event}{_short(args)}"
            elif event == "open" or event in changing or event in listing:
                frame = student_frame(direct=False)
                if frame is not None:
                    write = event in changing
                    if event == "open":
                        mode, flags = (args[1], args[2]) if len(args) > 2 else (args[1] if len(args) > 1 else "r", 0)
                        write = (isinstance(mode, str) and any(c in mode for c in "wax+")) or bool(
                            isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT))
                    for path in paths(args[:2] if event != "open" else args[:1]):
                        if not inside(path, writable if write else readable):
                            what = "writes" if write else "reads"
                            refuse = f"{what} {path} ({event}), outside its folder"
                            break
            elif event in ("sys._getframe", "object.__getattr__"):
                attr = args[1] if event == "object.__getattr__" and len(args) > 1 else ""
                if event == "sys._getframe" or attr in frame_attrs or attr == "__code__":
                    frame = student_frame(direct=True)
                    if frame is not None:
                        flag(frame, f"inspects the call stack or code ({event}{' ' + attr if attr else ''})")
                        if attr != "__code__":
                            raise PermissionError(f"grading: {event} {attr} is not allowed in graded code")
            elif event == "_thread.start_new_thread":
                frame = student_frame(direct=True)
                if frame is not None:
                    flag(frame, "starts a thread")
            elif event in ("compile", "code.__new__") and len(args) > 1 and isinstance(args[1], str) and (
                    args[1] in course_files or args[1].startswith(package)):
                frame = student_frame(direct=False)  # code passed off as the course's
                if frame is not None:
                    refuse = f"{event} of code named as the course's {args[1]}"
            if refuse is None and event in ("open", "exec") and args:
                # the course's code read or run again would be the hidden references anew
                code = getattr(args[0], "co_filename", None) if event == "exec" else next(paths(args[:1]), None)
                if isinstance(code, str) and code.startswith(package) and (event == "exec" or code.endswith((".py", ".pyc"))):  # noqa: E501
                    frame = student_frame(direct=False)
                    # linecache reads source lines to show a warning or a traceback (a
                    # student's `warnings.warn` during a check names the checker's line)
                    if frame is not None and not (event == "open" and shown_by_linecache()):
                        refuse = f"reads or runs the course's code {code} ({event}): hidden while grading"
            if refuse is not None:
                flag(frame, refuse + " (refused)")
                raise PermissionError(f"grading: not allowed in graded code: {refuse}")
        finally:
            state["busy"] -= 1

    def verdict_of(name):
        obj = shell.user_ns.get(name, missing)
        if obj is missing:
            return {"status": "undefined", "passed": False, "mistake": None,
                    "feedback": f"{name} is not defined (its cell did not define it)"}
        state["checking"] = name
        try:
            result = checkers[name](obj)
        finally:
            state["checking"] = ""
        if type(result) is not CheckResult:
            return {"status": "error", "passed": False, "mistake": None, "feedback": "the checker gave no result"}
        out = {"status": result.status, "passed": result.passed is True, "mistake": result.mistake,
               "feedback": result.feedback}
        return {k: (v if type(v) in (str, bool) or v is None else repr(v)) for k, v in out.items()}

    def request(args):
        if len(args) != 3 or not all(type(a) is str for a in args):
            return
        action, nonce, name = args
        source = config["check_source"] if action == "check" else config["end_source"]
        expected = get_file_name(source.format(nonce=nonce, name=name))
        state["busy"] += 1
        try:
            caller = sys._getframe(2).f_code.co_filename  # request <- hook <- the cell
        finally:
            state["busy"] -= 1
        if caller != expected or (action == "check" and name not in checkers):
            return  # not the grader's cell: ignored (its nonce would not be the grader's anyway)
        message = {"action": action, "exercise": name}
        if action == "check":
            changed = restore()
            own = shell.user_ns.get(name, missing)
            message["verdict"] = verdict_of(name)  # course_utils.<name> is still a guard: no way round
            state["busy"] += 1
            try:
                message["reference"] = uses_reference(own, name, references.get(name), student_files, others)
            finally:
                state["busy"] -= 1
            changed += [c + " (while being checked)" for c in restore()]
            hits = [h for h in hidden_hits if h["exercise"] == name]
            hidden_hits[:] = [h for h in hidden_hits if h["exercise"] != name]
            said = [message["reference"]] if message["reference"] else []
            said += [(f"line {h['line']}: " if h["line"] else "") + h["what"] + (f": `{h['code']}`" if h["code"] else "")  # noqa: E501
                     for h in hits]
            message["reference"] = "; ".join(said) or None
            if own is not missing:  # checked: course_utils.<name> is the student's own for the student's code
                checked.update({label: own for label, (guard, _) in guards.items()
                                if label.rpartition(".")[2] == name and own is not guard})
            for what in changed:
                pending.append({"exercise": name, "line": None, "code": "",
                                "what": f"changed {what}; undone before checking"})
        if action == "end":  # a reference a student's code asked for after its exercise's check
            pending.extend(hidden_hits)
            hidden_hits.clear()
        message["flags"] = list(pending)
        pending.clear()
        text = repr(message)
        publish_display_data({mime: {"payload": text, "mac": sign(nonce + text)}})

    sys.addaudithook(hook)


def _short(args) -> str:  # pragma: no cover - runs inside the graded kernel too
    text = ", ".join(repr(a)[:60] for a in args[:2])
    return f" ({text})" if text else ""


def uses_reference(obj, name, ref, student_files, others=None):  # pragma: no cover - runs inside the graded kernel too
    """How ``obj``, a student's answer to exercise ``name``, uses ``ref``, the course's
    reference (``None``: it does not): it is ``ref`` (an alias), subclasses it, or a function
    or class of the student's (code from ``student_files``) holds or names it (a wrapper,
    a closure, a default, ``functools.partial``, a method, a helper it calls). ``others``:
    ``{id: (object, label)}``, more objects that count as the reference (in a graded kernel,
    the hidden names' guards and the reference's helpers)."""
    import functools
    import types

    if ref is None:
        return None
    others = dict(others or {})
    others[id(ref)] = (ref, name)
    missing = object()
    seen, todo, steps = set(), [(obj, "it is")], 0
    while todo and steps < 500:
        x, how = todo.pop()
        steps += 1
        if id(x) in seen:
            continue
        seen.add(id(x))
        if id(x) in others and others[id(x)][0] is x:
            return f"{how} course_utils.{others[id(x)][1]}"
        kind = type(x)  # an object the reference made (a course cell's model, say): its class is the reference
        if id(kind) in others and others[id(kind)][0] is kind:
            return f"{how} a course_utils.{others[id(kind)][1]} object"
        if isinstance(x, type):
            for base in x.__mro__[1:]:
                if id(base) in others and others[id(base)][0] is base:
                    return f"it subclasses course_utils.{others[id(base)][1]}"
            if getattr(x, "__module__", "").split(".")[0] in ("torch", "builtins", "course_utils"):
                continue
            todo += [(v, "it uses") for v in vars(x).values()]
            todo += [(b, "it uses") for b in x.__bases__]
        elif isinstance(x, (staticmethod, classmethod)):
            todo.append((x.__func__, how))
        elif isinstance(x, property):
            todo += [(f, "it uses") for f in (x.fget, x.fset) if f is not None]
        elif isinstance(x, functools.partial):
            todo += [(v, "it wraps") for v in (x.func, *x.args, *x.keywords.values())]
        elif isinstance(x, types.MethodType):
            todo.append((x.__func__, how))
        elif isinstance(x, types.FunctionType):
            if x.__code__.co_filename not in student_files and x is not obj:
                continue  # a library's function: what it uses is not the student's doing
            if "__wrapped__" in x.__dict__:
                todo.append((x.__dict__["__wrapped__"], "it wraps"))
            for cell in x.__closure__ or ():
                try:
                    todo.append((cell.cell_contents, "it wraps"))
                except ValueError:  # an empty cell
                    pass
            todo += [(v, "it uses") for v in (*(x.__defaults__ or ()), *(x.__kwdefaults__ or {}).values())]
            names, codes = set(), [x.__code__]
            while codes:
                code = codes.pop()
                names.update(code.co_names)
                codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
            for n in names:
                v = x.__globals__.get(n, missing)
                if isinstance(v, types.ModuleType):
                    # `course_utils.name` (or a submodule's): both names are in the code
                    if v.__name__.split(".")[0] == "course_utils":
                        for attr in sorted(names):
                            got = getattr(v, attr, None)
                            if id(got) in others and others[id(got)][0] is got:
                                return f"it uses course_utils.{others[id(got)][1]}"
                elif v is not missing:
                    todo.append((v, "it calls"))
    return None


def kernel_setup_source(config: dict) -> str:
    """The first cell of a graded notebook: runs :func:`_kernel_side` with private globals."""
    code = "\n\n".join(textwrap.dedent(inspect.getsource(f))
                       for f in (_short, uses_reference, hide_references.gate_objects, hide_references.gate_allows,
                                 hide_references.public_course, _kernel_side))
    code += f"\n\n_kernel_side({config!r})\n"
    return (
        "# Added by course_tools.grade: set up grading before any student code runs.\n"
        f"exec(compile({code!r}, '<course-grade>', 'exec'), "
        "{'__builtins__': dict(vars(__import__('builtins'))), '__name__': 'course_grade'})\n"
    )


def sign(key: bytes, nonce: str, text: str) -> str:
    """The signature :func:`_kernel_side` puts on a message (HMAC-SHA256)."""
    return hmac.new(key.ljust(64, b"\0"), (nonce + text).encode(), hashlib.sha256).hexdigest()


def ipykernel_file_name(source: str) -> str:
    """The base name ipykernel gives the code of a cell with this source."""
    return f"{murmur2_x86(source, 0xC70F6907)}.py"

