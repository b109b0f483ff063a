"""Stage: the references hidden. The graded notebook's references out of reach, by construction
(used by :mod:`.kernel_side` and :mod:`.run`).

Detecting a reference by reading a student's code is a race the grader loses
(``getattr(course_utils, "scaled_dot_" + "product_attention")``, ``operator.attrgetter``,
a helper of the reference, the reference class's ``forward``...). So in a graded kernel
the references of the notebook being graded, and the helpers that compute them
(:data:`HELPERS`), do not exist where a student can reach them:

* the grader's set-up imports ``course_utils`` and its checkers as usual (the checkers
  compute the expected values with the references), then moves every ``course_utils``
  module out of ``sys.modules``: that copy is kept only by the audit hook's closure, which
  refuses frame and garbage-collector walking;
* it imports a second, public copy of ``course_utils`` (every submodule), in which each
  hidden name is replaced, wherever the package binds it (module globals, class
  attributes, module-level tables, defaults, closures), by a *guard* of the same name;
* a guard holds nothing: called, it asks the audit hook (an audit event) for the real
  object. The hook hands it over only to the course's own cells of the notebook (a
  course cell on the stack, no student cell, no check running), and a helper also to the
  course's other code that calls it (an earlier notebook's ``MultiHeadAttention`` uses
  notebook 01's ``attention_weights``); a student's code gets ``NotAvailableWhileGrading``
  and the exercise is "used the reference", with the line that asked;
* once an exercise has been checked (with the guard refusing, so that an answer which
  delegates to ``course_utils`` meets it), its guard hands the student's code the
  student's own definition (a later exercise may build on it); the course's cells still
  get the reference (notebook 09's cells use ``generate``'s ``use_cache``);
* ``course_utils.checks`` in the public copy is a stand-in whose ``check_*`` do nothing
  (the grader calls the real checkers itself): no checker, whose globals lead to the
  references, is reachable.

Earlier notebooks' references stay in the public copy, as the notebooks teach. The
kernel-side functions below (:func:`gate_objects`, :func:`gate_allows`, :func:`public_course`)
are sent to the kernel as source (see :func:`.kernel_side.kernel_setup_source`); they run there
with the set-up's private globals.
"""

from __future__ import annotations

from collections.abc import Iterable

# exercise -> what else computes its answer, as ``module.name`` under course_utils. The
# exercise itself (``course_utils.<exercise>``) is always hidden with these. The one table
# of what a graded notebook's references are; tests/test_hide_references.py proves it
# complete by calling every callable the public copy still has.
HELPERS: dict[str, tuple[str, ...]] = {
    # 01
    "scaled_dot_product_attention": ("attention.attention_weights", "fastpaths.softmax_last_axis"),
    # 02: attend_cached is MultiHeadAttention.forward for one query position
    "MultiHeadAttention": ("decoding.attend_cached",),
    # 04
    "LayerNorm": ("fastpaths.layer_norm",),
    # 06: the cached decoders give greedy_decode's tokens
    "greedy_decode": ("decoding._greedy_loop", "decoding.greedy_decode_cached", "decoding.decode_step"),
    # 07
    "train_step": ("training.train_step_with_loss",),
    # 09: GPTBlock.forward's CPU speed path (the whole block, fused attention)
    "GPTBlock": ("fastpaths.gpt_block",),
    # 09: one cached decoding step of a GPT, and the sampler generate draws with
    "generate": ("generation.gpt_decode_step", "generation.sample_next_token"),
    # 10: half of apply_rotary's formula (x * cos + rotate_half(x) * sin)
    "apply_rotary": ("llama.rotate_half",),
    # 11: the tokenizer class encodes and decodes as the two function exercises do
    "bpe_encode": ("tokenizer.BPETokenizer",),
    "bpe_decode": ("tokenizer.BPETokenizer",),
}

# Modules of course_utils the public copy does not import: the checkers (a stand-in takes their place).
SKIPPED_MODULES = ("checks",)


def hidden_names(exercises: Iterable[str]) -> dict[str, list[str]]:
    """``{exercise: [its helpers]}`` for the exercises of the notebook being graded."""
    return {e: list(HELPERS.get(e, ())) for e in exercises}


GUARD_SOURCE = '''
import sys as _sys

_audit = _sys.audit


class NotAvailableWhileGrading(RuntimeError):
    """The course's reference of the notebook being graded: not available to graded code."""


def _fetch(label):
    box = []
    _audit(EVENT, label, box)
    if not box:
        raise NotAvailableWhileGrading(
            f"course_utils.{label} is not available while grading: the grader checks your own code")
    return box[0]


def guard_function(label, name, doc):
    def guard(*args, **kwargs):
        return _fetch(label)(*args, **kwargs)

    guard.__name__ = guard.__qualname__ = name
    guard.__doc__ = doc
    return guard


class _Hidden(type):
    def __call__(cls, *args, **kwargs):
        return _fetch(cls._course_label)(*args, **kwargs)

    def __getattr__(cls, name):  # GPT.forward, ...: the reference's too
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(_fetch(cls._course_label), name)


def guard_class(label, name, doc):
    return _Hidden(name, (), {"_course_label": label, "__doc__": doc})
'''


def gate_objects(objects, gate_event, error):  # pragma: no cover - runs inside the graded kernel
    """Make each hidden object inert by itself, wherever it is reachable from (a checker's
    hook's ``__globals__``, ``nn.Module.__subclasses__()``, an instance's class...): the
    code of each function, and of each method of each class, in ``objects`` (``[(label,
    object, strict)]``) is swapped for a *gate*, which asks the audit hook (``gate_event``,
    with its arguments) for the original code, kept only in the hook's closure, and raises
    ``error`` when refused. The objects keep their identity, so every binding of them,
    however made, is a gate.

    Returns ``{id(gate code): (gate code, label, original function, strict, class or None,
    family, object)}`` (``class``: the hidden class a method belongs to; ``family``: it and
    its subclasses now, all the course's: a class a student derives from it later is not
    one; ``object``: the hidden function or class, now a gate)."""
    import inspect
    import sys
    import types

    gates, done = {}, set()

    def gate_code(fn, label):
        n = len(fn.__code__.co_freevars)  # a function's code can only be swapped for one with as many
        free = ", ".join(f"_v{i}" for i in range(n))
        message = f"course_utils.{label} is not available while grading: the grader checks your own code"
        lines = [f"def {fn.__name__}(*args, _grading_gate=None, **kwargs):",
                 *(["    if False:", f"        ({free},)"] if n else []),
                 "    audit, event, error = _grading_gate",
                 "    box = []",
                 "    audit(event, box, args)",
                 "    if not box:",
                 f"        raise error({message!r})",
                 "    return box[0](*args, **kwargs)"]
        if n:
            lines = ["def _outer():", f"    {' = '.join(f'_v{i}' for i in range(n))} = None",
                     *("    " + line for line in lines), f"    return {fn.__name__}"]
        namespace = {"__builtins__": {}}
        exec(compile("\n".join(lines) + "\n", f"<course-grade-gate {label}>", "exec"), namespace)  # noqa: S102
        made = namespace["_outer"]() if n else namespace[fn.__name__]
        return made.__code__

    def gate(fn, label, strict, owner, family):
        if not isinstance(fn, types.FunctionType) or id(fn) in done:
            return
        done.add(id(fn))
        original = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
        original.__kwdefaults__ = dict(fn.__kwdefaults__) if fn.__kwdefaults__ else None
        original.__qualname__ = fn.__qualname__
        try:
            signature = inspect.signature(fn)
        except (TypeError, ValueError):
            signature = None
        code = gate_code(fn, label)
        fn.__code__ = code
        fn.__defaults__ = None
        fn.__kwdefaults__ = {"_grading_gate": (sys.audit, gate_event, error)}
        if signature is not None:
            fn.__signature__ = signature
        gates[id(code)] = (code, label, original, strict, owner, family, owner or fn)

    def subclasses(cls):
        found = [cls]
        for sub in type.__subclasses__(cls):
            found += [c for c in subclasses(sub) if c not in found]
        return found

    def copier(cls):
        """A ``__setstate__`` of ``cls``'s own (the inherited one's work), so that a copy
        (``copy.deepcopy``, pickle: no ``__init__``) passes a gate too."""
        namespace = {"__builtins__": {"super": super}}
        exec(compile("def make(cls):\n    def __setstate__(self, state):\n"  # noqa: S102
                     "        return super(cls, self).__setstate__(state)\n    return __setstate__\n",
                     "<course-grade-copier>", "exec"), namespace)
        method = namespace["make"](cls)
        method.__qualname__ = f"{cls.__qualname__}.__setstate__"
        return method

    for label, obj, strict in objects:
        if isinstance(obj, type):
            family = tuple(subclasses(obj))
            if "__setstate__" not in vars(obj) and hasattr(obj, "__setstate__"):
                obj.__setstate__ = copier(obj)
                gate(obj.__setstate__, f"{label}.__setstate__", strict, obj, family)
            for key, value in list(vars(obj).items()):
                if isinstance(value, (staticmethod, classmethod)):
                    value = value.__func__
                parts = [value.fget, value.fset, value.fdel] if isinstance(value, property) else [value]
                for part in parts:
                    if isinstance(part, types.FunctionType) and str(part.__module__).startswith("course_utils"):
                        # a method with a speed path (fastpaths.speed_path) wraps its plain body: both
                        inner = part.__dict__.get("__wrapped__")
                        gate(part, f"{label}.{key}", strict, obj, family)
                        if isinstance(inner, types.FunctionType):
                            gate(inner, f"{label}.{key}", strict, obj, family)
        else:
            gate(obj, label, strict, None, ())
    return gates


def gate_allows(frame, entry, args, student_files, course_files, package, gates, stdlib, made):  # pragma: no cover
    """Whether a gate (``entry`` of :func:`gate_objects`), asked from ``frame`` (its caller)
    with ``args``, runs the original. Who asks is the first frame outward that is neither a
    gate nor a library's (the standard library, site-packages, the grader's own
    ``<course-grade...>`` code): the course's code (``course``; its checkers:
    ``checks``), one of the notebook's course cells (``cell``), a student's exercise cell
    (``student``) or anything else (``other``: refused). Allowed: the course's code, the
    checkers or a course cell with no student cell anywhere on the stack; a helper
    (``strict`` false) called by the course's code even with a student cell below (an
    earlier notebook's ``MultiHeadAttention`` computes its weights with notebook 01's
    helper); a method of an instance that was made or used where it was allowed (``made``:
    ``{id: weak reference}``; a checker hands the student's ``generate`` a reference model).
    Never a method of an instance of a class derived from the hidden class outside the
    course (``class GPTBlock(<the reference>)``), whoever calls."""
    _, _, original, strict, owner, family, _ = entry
    if owner is not None and args and isinstance(args[0], owner) and not any(type(args[0]) is c for c in family):
        return False  # a class derived from the reference outside the course: not the course's code
    first, student = None, False
    while frame is not None:
        name = frame.f_code.co_filename
        if name in student_files:
            student = True
            first = first or "student"
            break
        if first is None and id(frame.f_code) not in gates:
            if name.startswith(package):
                first = "checks" if name.startswith(package + "checks") else "course"
            elif name in course_files:
                first = "cell"
            elif not (name.startswith(("<course-grade", "<frozen")) or name.startswith(stdlib) or "-packages" in name):
                first = "other"
        frame = frame.f_back
    if first in ("course", "checks", "cell") and not student:
        return True
    if first == "course" and not strict:
        return True
    if owner is not None and args and original.__name__ not in ("__init__", "__new__"):
        self = args[0]  # identity, not equality: a class's __eq__ and __hash__ are its own
        ref = made.get(id(self))
        return isinstance(self, owner) and ref is not None and ref() is self
    return False


def public_course(exercises, hidden_event, guard_source, skipped, gate_event, later=()):  # pragma: no cover - runs inside the graded kernel  # noqa: E501
    """Move the course package out of ``sys.modules`` and import a public copy with the
    references of ``exercises`` ({exercise: [helpers]}) replaced by guards.

    Returns ``(private, public, guards, fetch_code, gates)``: the checkers' modules ``{name:
    module}``; the public copy's; ``{label: (guard, real object)}`` for each hidden name
    (``label``: ``module.name`` under course_utils); the code object of the guards'
    request (the only code the hook answers); and the gates of :func:`gate_objects`: the
    real objects (the checkers' and the public copy's) are themselves made inert, their
    code asking the hook with ``gate_event``. ``later``: the exercises of later notebooks,
    which the course's code may use like helpers (notebook 04's ``Encoder`` builds notebook
    02's ``MultiHeadAttention``; in the course they are only later than what uses them in a
    fixture). ``guard_source``
    and ``skipped`` are :data:`GUARD_SOURCE` and :data:`SKIPPED_MODULES`."""
    import builtins
    import importlib
    import pkgutil
    import sys
    import types

    private = {n: m for n, m in sys.modules.items() if n == "course_utils" or n.startswith("course_utils.")}
    for n in private:
        del sys.modules[n]
    real_root = private["course_utils"]

    def real_label(name):
        obj = getattr(real_root, name)
        return f"{obj.__module__.split('.', 1)[1]}.{name}", obj

    labels = {}  # label -> (exercise, real object)
    for exercise, helpers in exercises.items():
        if getattr(real_root, exercise, None) is None:
            continue
        label, obj = real_label(exercise)
        labels[label] = (exercise, obj)
        for helper in helpers:
            module, _, attr = helper.rpartition(".")
            labels[helper] = (None, getattr(private[f"course_utils.{module}"], attr))

    # the stand-in checkers: check_* do nothing (the grader calls the real ones)
    stub = types.ModuleType("course_utils.checks", "Checks run by the grader while grading; these do nothing.")
    core = types.ModuleType("course_utils.checks._core")
    core.__builtins__ = builtins  # not the set-up's private copy: a stand-in is public
    exec(compile(  # noqa: S102 - the stand-in's own code, in its own namespace
        "class CheckResult:\n"
        "    def __init__(self, exercise):\n"
        "        self.exercise, self.passed, self.status, self.mistake = exercise, False, 'not checked', None\n"
        "        self.feedback = f'[ ] {exercise}: checked by the grader'\n"
        "    def show(self):\n"
        "        pass\n"
        "    def __repr__(self):\n"
        "        return f'CheckResult({self.exercise!r}: checked by the grader)'\n"
        "def make_check(name, exercise):\n"
        "    def check(*args, **kwargs):\n"
        "        return CheckResult(exercise)\n"
        "    check.__name__ = check.__qualname__ = name\n"
        "    return check\n"
        "def hint(*args, **kwargs):\n"
        "    print('hints are not shown while grading')\n",
        "<course-grade-checks>", "exec"), vars(core))
    real_checks = private.get("course_utils.checks")
    for name in getattr(real_checks, "__all__", ()):
        exercise = getattr(getattr(real_checks, name), "exercise", None)
        if name.startswith("check_"):
            setattr(stub, name, core.make_check(name, exercise if isinstance(exercise, str) else name[6:]))
    stub.hint, stub.CheckResult, stub._core = core.hint, core.CheckResult, core
    del core.make_check
    stub.__all__ = [n for n in vars(stub) if not n.startswith("_")]
    sys.modules["course_utils.checks"], sys.modules["course_utils.checks._core"] = stub, core

    root = importlib.import_module("course_utils")
    root.checks = stub
    for info in pkgutil.iter_modules(root.__path__):
        if info.name not in skipped:
            try:
                importlib.import_module(f"course_utils.{info.name}")
            except Exception:
                pass
    public = {n: m for n, m in sys.modules.items()
              if (n == "course_utils" or n.startswith("course_utils.")) and isinstance(m, types.ModuleType)}

    # the guards' own globals and builtins: public, and nothing of the set-up's in them
    namespace = {"__name__": "course_utils._hidden", "EVENT": hidden_event, "__builtins__": builtins}
    exec(compile(guard_source, "<course-grade-guards>", "exec"), namespace)  # noqa: S102
    guards = {}
    targets = {}  # id(public object) -> label
    inert = []  # (label, object, strict): the real objects and the public copy's, made gates themselves
    for label, (exercise, real) in labels.items():
        module, _, attr = label.rpartition(".")
        old = getattr(public[f"course_utils.{module}"], attr)
        strict = exercise is not None and exercise not in later
        inert += [(label, real, strict), (label, old, strict)]
        doc = f"course_utils.{label}: not available while grading."
        make = namespace["guard_class"] if isinstance(real, type) else namespace["guard_function"]
        guards[label] = (make(label, attr, doc), real)
        targets[id(old)] = label

    def replace(label, setter):
        setter(guards[label][0])

    def dict_setter(d, k):
        return lambda v: d.__setitem__(k, v)

    def attr_setter(o, k):
        return lambda v: setattr(o, k, v)

    def cell_setter(c):
        def set_cell(v):
            c.cell_contents = v
        return set_cell

    def scan_function(fn):
        for i, cell in enumerate(fn.__closure__ or ()):
            try:
                value = cell.cell_contents
            except ValueError:
                continue
            if id(value) in targets:
                replace(targets[id(value)], cell_setter(cell))
        if fn.__defaults__ and any(id(v) in targets for v in fn.__defaults__):
            fn.__defaults__ = tuple(guards[targets[id(v)]][0] if id(v) in targets else v for v in fn.__defaults__)
        for k, v in (fn.__kwdefaults__ or {}).items():
            if id(v) in targets:
                replace(targets[id(v)], dict_setter(fn.__kwdefaults__, k))

    classes = []
    for name, module in public.items():
        for key, value in list(vars(module).items()):
            if id(value) in targets:
                replace(targets[id(value)], dict_setter(vars(module), key))
            elif isinstance(value, dict):
                for k, v in list(value.items()):
                    if id(v) in targets:
                        replace(targets[id(v)], dict_setter(value, k))
            elif isinstance(value, types.FunctionType) and value.__module__ == name:
                scan_function(value)
            elif isinstance(value, type) and value.__module__ == name:
                classes.append(value)
    for cls in classes:
        for key, value in list(vars(cls).items()):
            if id(value) in targets:
                replace(targets[id(value)], attr_setter(cls, key))
            elif isinstance(value, (staticmethod, classmethod)):
                value = value.__func__
            if isinstance(value, types.FunctionType):
                scan_function(value)
    del targets, classes
    gates = gate_objects(inert, gate_event, namespace["NotAvailableWhileGrading"])
    del inert
    import gc

    gc.collect()  # the public copy's own references, now unbound, leave type.__subclasses__()
    return private, public, guards, namespace["_fetch"].__code__, gates
