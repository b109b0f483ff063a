"""Tests for course_utils/training.py, translator_training.py and student_functions.py
(notebook 07): the exercises' references (``T``), the schedules, evaluation, and fit with
checkpoints and exact resumption (``TR``), and the choice of the student's own functions (``S``)."""

from __future__ import annotations

import dataclasses
import inspect
import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_utils import Transformer
from course_utils import data as D
from course_utils import student_functions as S
from course_utils import training as T
from course_utils import translator_training as TR


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def tiny_model(dropout: float = 0.0, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(len(D.source_vocab()), len(D.target_vocab()), d_model=16, num_heads=2, num_layers=1,
                       d_ff=32, dropout=dropout, max_len=32)


def a_batch(n: int = 6, offset: int = 0) -> D.Batch:
    pairs = D.load_split("valid")[offset : offset + n]
    ds = D.NumberWordsDataset(pairs, D.source_vocab(), D.target_vocab())
    return D.collate([ds[i] for i in range(len(ds))])


# ---------------------------------------------------------------- shift_targets
def test_shift_targets_is_teacher_forcing():
    tgt = torch.tensor([[1, 5, 6, 2, 0], [1, 7, 2, 0, 0]])
    tgt_in, tgt_out = T.shift_targets(tgt)
    assert torch.equal(tgt_in, tgt[:, :-1]) and torch.equal(tgt_out, tgt[:, 1:])
    batch = a_batch()
    tgt_in, tgt_out = T.shift_targets(batch.tgt)
    assert torch.equal(tgt_in, batch.tgt_in) and torch.equal(tgt_out, batch.tgt_out)


@pytest.mark.parametrize("bad, error", [
    (torch.ones(3, 1, dtype=torch.long), ValueError),
    (torch.ones(4, dtype=torch.long), ValueError),
    (torch.ones(2, 3), TypeError),
])
def test_shift_targets_rejects_bad_input(bad, error):
    with pytest.raises(error, match="tgt"):
        T.shift_targets(bad)


# ---------------------------------------------------------------- masked_cross_entropy
@pytest.mark.parametrize("pad_id", [0, 3])
@pytest.mark.parametrize("eps", [0.0, 0.1, 0.35])
def test_masked_cross_entropy_equals_torch(pad_id, eps):
    torch.manual_seed(1)
    B, L, V = 3, 7, 11
    full = torch.randint(0, V, (B, L + 1))
    full[:, 5:] = pad_id
    full[0, 1] = 0 if pad_id else 4
    targets = full[:, 1:]  # non-contiguous, like batch.tgt_out
    logits = (3 * torch.randn(B, L, V)).requires_grad_(True)
    ours = T.masked_cross_entropy(logits, targets, pad_id, label_smoothing=eps)
    (g_ours,) = torch.autograd.grad(ours, logits)
    ref = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=pad_id, label_smoothing=eps)
    (g_ref,) = torch.autograd.grad(ref, logits)
    assert ours.dim() == 0
    torch.testing.assert_close(ours, ref)
    torch.testing.assert_close(g_ours, g_ref)


def test_masked_cross_entropy_ignores_whatever_sits_at_the_pads():
    torch.manual_seed(0)
    logits = torch.randn(2, 4, 6)
    targets = torch.tensor([[1, 2, 0, 0], [3, 4, 5, 0]])
    other = logits.clone()
    other[0, 2:] = 1e4  # huge logits at padded positions change nothing
    assert torch.equal(T.masked_cross_entropy(logits, targets, 0), T.masked_cross_entropy(other, targets, 0))
    assert math.isnan(float(T.masked_cross_entropy(logits, torch.zeros(2, 4, dtype=torch.long), 0)))


@pytest.mark.parametrize("logits, targets, kwargs, match", [
    (torch.randn(2, 4, 6), torch.zeros(2, 5, dtype=torch.long), {}, "shape"),
    (torch.randn(2, 4, 6), torch.full((2, 4), 6), {}, r"\[0, 6\)"),
    (torch.randn(2, 4, 6), torch.ones(2, 4, dtype=torch.long), {"label_smoothing": 1.5}, "label_smoothing"),
    (torch.randint(0, 3, (2, 4, 6)), torch.ones(2, 4, dtype=torch.long), {}, "logits"),
])
def test_masked_cross_entropy_rejects_bad_input(logits, targets, kwargs, match):
    with pytest.raises(ValueError, match=match):
        T.masked_cross_entropy(logits, targets, 0, **kwargs)


# ---------------------------------------------------------------- schedules
def test_noam_lr_is_the_papers_formula():
    assert T.noam_lr(4000, 512, 4000) == pytest.approx(512**-0.5 * 4000**-0.5)
    assert T.noam_lr(4000, 512, 4000) == pytest.approx(6.99e-4, rel=1e-3)
    values = [T.noam_lr(s, 64, 100, factor=2.0) for s in range(1, 400)]
    peak = max(range(len(values)), key=values.__getitem__) + 1
    assert peak == 100
    assert values[0] == pytest.approx(2.0 * 64**-0.5 * 100**-1.5)  # step 1: linear branch
    assert values[399 - 1] == pytest.approx(2.0 * 64**-0.5 * 399**-0.5)  # decay branch
    assert all(a < b for a, b in zip(values[:99], values[1:100]))
    assert all(a > b for a, b in zip(values[99:-1], values[100:]))


@pytest.mark.parametrize("args", [(0, 64, 100), (-3, 64, 100), (1, 0, 100), (1, 64, 0), (True, 64, 100)])
def test_noam_lr_rejects_bad_input(args):
    with pytest.raises(ValueError):
        T.noam_lr(*args)
    with pytest.raises(ValueError, match="step must be >= 1"):
        T.noam_lr(0, 64, 100)


def rates(shape: str, steps: int, **kwargs) -> list[float]:
    p = nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([p], lr=kwargs.pop("lr", 1.0))
    scheduler = T.warmup_schedule(optimizer, kwargs.pop("warmup"), shape, **kwargs)
    out = []
    for _ in range(steps):
        out.append(optimizer.param_groups[0]["lr"])  # the rate this step runs at
        optimizer.step()
        scheduler.step()
    return out


def test_warmup_schedule_noam_counts_from_one():
    got = rates("noam", 50, warmup=10, d_model=32, factor=0.5)
    assert got == pytest.approx([T.noam_lr(k + 1, 32, 10, 0.5) for k in range(50)])


def test_warmup_schedule_other_shapes():
    lin = rates("linear", 30, warmup=5, total_steps=30, lr=2e-3)
    assert lin[0] == pytest.approx(2e-3 / 5) and lin[4] == pytest.approx(2e-3)
    assert max(lin) == pytest.approx(2e-3) and lin[-1] == pytest.approx(2e-3 / 26) and lin[-1] > 0
    assert all(a > b for a, b in zip(lin[4:-1], lin[5:]))
    inv = rates("inverse_sqrt", 40, warmup=10, lr=1.0)
    assert inv[9] == pytest.approx(1.0) and inv[39] == pytest.approx(math.sqrt(10 / 40))
    noam = rates("noam", 40, warmup=10, d_model=16)
    assert [a / noam[9] for a in noam] == pytest.approx(inv)  # the same shape, the peak given directly
    const = rates("constant", 20, warmup=4, lr=0.5)
    assert const[:4] == pytest.approx([0.125, 0.25, 0.375, 0.5]) and set(const[4:]) == {0.5}


@pytest.mark.parametrize("kwargs, match", [
    (dict(shape="linear"), "total_steps"),
    (dict(shape="noam"), "d_model"),
    (dict(shape="cosine"), "shape"),
    (dict(shape="linear", total_steps=5), "total_steps"),
])
def test_warmup_schedule_rejects_bad_settings(kwargs, match):
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    with pytest.raises(ValueError, match=match):
        T.warmup_schedule(optimizer, 10, **kwargs)


# ---------------------------------------------------------------- train_step
def test_train_step_is_one_clipped_update_of_the_masked_loss():
    model = tiny_model()
    batch = a_batch()
    reference = tiny_model()
    for p in model.parameters():
        p.grad = torch.ones_like(p)  # leftovers: train_step must discard them
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: 0.5**k)
    model.eval()  # an evaluation left it there: train_step must switch back
    loss = T.train_step(model, batch, optimizer, scheduler, pad_id=D.PAD_ID, label_smoothing=0.1, clip_norm=0.05)
    assert isinstance(loss, float) and model.training and scheduler.last_epoch == 1

    logits = reference(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
    ref_loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), batch.tgt_out.reshape(-1),
                               ignore_index=D.PAD_ID, label_smoothing=0.1)
    ref_loss.backward()
    norm = nn.utils.clip_grad_norm_(reference.parameters(), 0.05)
    assert norm > 0.05  # the clipping did something
    with torch.no_grad():
        for p in reference.parameters():
            p -= 0.1 * p.grad
    assert loss == pytest.approx(ref_loss.item(), rel=1e-5)
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, atol=1e-6, rtol=1e-5)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.05)


def test_train_step_learns_a_batch():
    model = tiny_model()
    batch = a_batch(8)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = [T.train_step(model, batch, optimizer, clip_norm=None) for _ in range(40)]
    assert losses[-1] < 0.5 * losses[0]


# ---------------------------------------------------------------- evaluation
class Oracle:
    """A decoder that answers the true targets, with chosen corruptions: lets the
    metrics be tested without training a model."""

    def __init__(self, pairs, corrupt):
        sv, tv = D.source_vocab(), D.target_vocab()
        self.answers = {tuple(sv.encode(s)): tv.encode(t) for s, t in pairs}
        self.corrupt = corrupt
        self.calls = 0

    def __call__(self, model, src, max_len, bos_id, eos_id, src_mask=None, pad_id=None):
        self.calls += 1
        rows = []
        for row in src.tolist():
            key = tuple(i for i in row if i != D.PAD_ID)
            words = self.corrupt(list(self.answers[key]))[:max_len]
            ids = [bos_id, *words] + ([eos_id] if len(words) < max_len else [])
            rows.append(ids)
        T_ = max(len(r) for r in rows)
        return torch.tensor([r + [pad_id] * (T_ - len(r)) for r in rows])


def test_evaluate_scores_exact_match_and_token_accuracy(monkeypatch):
    pairs = [("12", "twelve"), ("3.5", "three point five"), ("-7", "minus seven"), ("40", "forty")]
    tv = D.target_vocab()

    def corrupt(words):
        if words == tv.encode("three point five"):
            return words[:2] + [tv.stoi["six"]]  # 3 of 4 tokens right (the <eos> too)
        if words == tv.encode("forty"):
            return words + [tv.stoi["one"]]  # too long: the <eos> position is wrong
        return words

    oracle = Oracle(pairs, corrupt)
    monkeypatch.setattr(TR, "greedy_decode_cached", oracle)  # the name evaluate decodes with
    result = TR.evaluate(tiny_model(), pairs, batch_size=3)
    assert oracle.calls == 2  # the cached decoder is used, in batches of 3
    assert result["n"] == 4 and result["exact_match"] == pytest.approx(0.5)
    # tokens (words + <eos>): twelve 2/2, three point five 3/4, minus seven 3/3, forty 1/2
    assert result["token_accuracy"] == pytest.approx(9 / 11)
    assert TR.predict(tiny_model(), "3.5") == "three point six"
    assert TR.predict(tiny_model(), ["12", "40"]) == ["twelve", "forty one"]
    assert TR.mistakes(tiny_model(), pairs) == [("3.5", "three point five", "three point six"),
                                               ("40", "forty", "forty one")]
    assert len(TR.mistakes(tiny_model(), pairs, limit=1)) == 1
    # the same from a DataLoader of batches
    ds = D.NumberWordsDataset(pairs, D.source_vocab(), tv)
    loader = torch.utils.data.DataLoader(ds, batch_size=3, collate_fn=D.collate)
    assert TR.evaluate(tiny_model(), loader) == result


def test_evaluate_runs_the_real_decoder_and_restores_nothing_it_should_not():
    model = tiny_model()
    model.train()
    pairs = D.load_split("valid")[:7]
    result = TR.evaluate(model, pairs, batch_size=4, max_len=5)
    assert set(result) == {"exact_match", "token_accuracy", "n"} and result["n"] == 7
    assert 0.0 <= result["token_accuracy"] <= 1.0
    assert model.training  # greedy decoding puts the mode back
    with pytest.raises(ValueError, match="batch_size"):
        TR.evaluate(model, pairs, batch_size=0)
    with pytest.raises(ValueError, match="not in the source vocabulary"):
        TR.predict(model, "12a")


# ---------------------------------------------------------------- fit
def test_epoch_batches_are_seeded_full_and_bucketed():
    lengths = [(i * 7) % 23 for i in range(100)]
    a = TR.epoch_batches(lengths, 8, torch.Generator().manual_seed(3), bucket=4)
    b = TR.epoch_batches(lengths, 8, torch.Generator().manual_seed(3), bucket=4)
    c = TR.epoch_batches(lengths, 8, torch.Generator().manual_seed(4), bucket=4)
    assert a == b and a != c
    assert len(a) == 12 and all(len(x) == 8 for x in a)
    flat = [i for x in a for i in x]
    assert len(set(flat)) == 96
    assert all([lengths[i] for i in x] == sorted(lengths[i] for i in x) for x in a)  # sorted within a batch
    plain = TR.epoch_batches(lengths, 8, torch.Generator().manual_seed(3))
    assert len(plain) == 12 and not all([lengths[i] for i in x] == sorted(lengths[i] for i in x) for x in plain)


FIT = dict(batch_size=16, lr=3e-3, warmup=5, clip_norm=1.0, label_smoothing=0.1, bucket=3, seed=7, progress=False)


def test_fit_history_and_validation():
    train, valid = D.load_split("train")[:200], D.load_split("valid")[:20]
    model = tiny_model()
    history = TR.fit(model, train, valid, steps=30, schedule="inverse_sqrt", eval_every=10, **FIT)
    assert len(history["train_loss"]) == 30 and history.steps == 30
    assert history.eval_steps == [10, 20, 30]
    assert all(len(history[k]) == 3 for k in ("val_loss", "val_accuracy", "val_token_accuracy"))
    assert history["train_loss"][-1] < history["train_loss"][0]
    assert history.train_seconds > 0 and history.train_cpu_seconds > 0
    assert not model.training
    # one pass = 200 // 16 = 12 steps; validated at each epoch's end and at the last step
    history = TR.fit(tiny_model(), train, valid, epochs=2, schedule="linear", **FIT)
    assert history.steps == 24 and history.eval_steps == [12, 24]
    import matplotlib

    matplotlib.use("Agg")
    from course_utils.plotting import plot_training_curves

    fig = plot_training_curves(history)
    assert len(fig.axes) == 2


def params(model: nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("schedule, extra", [("inverse_sqrt", {}), ("linear", {"total_steps": 30})])
def test_fit_resumed_equals_uninterrupted(tmp_path, schedule, extra):
    train, valid = D.load_split("train")[:200], D.load_split("valid")[:10]
    kwargs = dict(FIT, schedule=schedule, **extra)
    whole = tiny_model(dropout=0.2)  # dropout: torch's random state must be resumed too
    full = TR.fit(whole, train, valid, steps=30, checkpoint_path=tmp_path / "whole.pt", **kwargs)

    # 12 steps per epoch: stop inside the second epoch, then go on from the checkpoint
    part = tiny_model(dropout=0.2)
    TR.fit(part, train, valid, steps=17, checkpoint_path=tmp_path / "part.pt", **kwargs)
    resumed_model = tiny_model(dropout=0.2, seed=99)  # other initial weights: all must come from the file
    torch.manual_seed(12345)  # and another global random state
    resumed = TR.fit(resumed_model, train, valid, steps=30, checkpoint_path=tmp_path / "part.pt", resume=True,
                    **kwargs)
    for p, q in zip(params(whole), params(resumed_model)):
        assert torch.equal(p, q)
    assert resumed["train_loss"] == full["train_loss"]
    assert resumed.steps == 30

    # resuming a finished run trains no further
    again = TR.fit(resumed_model, train, valid, steps=30, checkpoint_path=tmp_path / "part.pt", resume=True, **kwargs)
    assert again["train_loss"] == full["train_loss"]
    for p, q in zip(params(whole), params(resumed_model)):
        assert torch.equal(p, q)


def test_fit_refuses_to_resume_with_other_settings(tmp_path):
    train = D.load_split("train")[:100]
    path = tmp_path / "run.pt"
    TR.fit(tiny_model(), train, None, steps=8, schedule="linear", checkpoint_path=path, **FIT)
    with pytest.raises(ValueError, match="total_steps"):
        # linear decay ends at `steps` by default: a longer run is another schedule
        TR.fit(tiny_model(), train, None, steps=12, schedule="linear", checkpoint_path=path, resume=True, **FIT)
    with pytest.raises(ValueError, match="lr"):
        TR.fit(tiny_model(), train, None, steps=8, schedule="linear", checkpoint_path=path, resume=True,
              **dict(FIT, lr=1e-3))
    # no file yet: resume starts from scratch
    history = TR.fit(tiny_model(), train, None, steps=2, schedule="constant", checkpoint_path=tmp_path / "new.pt",
                    resume=True, **FIT)
    assert history.steps == 2 and (tmp_path / "new.pt").is_file()


@pytest.mark.parametrize("kwargs, match", [
    (dict(batch_size=0), "batch_size"),
    (dict(batch_size=1000), "batch_size"),
    (dict(steps=-1), "steps"),
    (dict(steps=5, epochs=1), "not both"),
    (dict(epochs=-2), "epochs"),
    (dict(lr=0.0), "lr"),
    (dict(warmup=0), "warmup"),
    (dict(schedule="cosine"), "schedule"),
    (dict(clip_norm=-1.0), "clip_norm"),
    (dict(label_smoothing=2.0), "label_smoothing"),
    (dict(eval_every=0), "eval_every"),
    (dict(resume=True), "checkpoint_path"),
    (dict(steps=5, warmup=10, schedule="linear"), "warmup"),
])
def test_fit_rejects_bad_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TR.fit(tiny_model(), D.load_split("valid")[:100], None, progress=False, **kwargs)


def test_fit_takes_a_config_or_keywords_alike():
    """fit(model, train, valid, FitConfig(...)) trains exactly as fit(..., **the same keywords), and a
    keyword replaces the config's field."""
    pairs = D.load_split("train")[:64]
    config = TR.FitConfig(**dict(FEW, steps=6))
    models = [tiny_model() for _ in range(3)]
    TR.fit(models[0], pairs, None, config)
    TR.fit(models[1], pairs, None, **dict(FEW, steps=6))
    TR.fit(models[2], pairs, None, dataclasses.replace(config, lr=1.0, steps=50), lr=FEW["lr"], steps=6)
    first, *others = (m.state_dict() for m in models)
    for name, value in first.items():
        assert all(torch.equal(value, other[name]) for other in others), name


@pytest.mark.parametrize("call, error, match", [
    (lambda: TR.fit(tiny_model(), [], None, stepz=3), TypeError, "unexpected keyword argument 'stepz'"),
    (lambda: TR.fit(tiny_model(), [], None, {"steps": 3}), TypeError, "config must be a FitConfig.*got dict"),
    (lambda: TR.FitConfig(resume="yes"), TypeError, "resume must be True or False, got 'yes'"),
    (lambda: TR.FitConfig(checkpoint_path=5), TypeError, "checkpoint_path must be a path.*got int"),
    (lambda: TR.FitConfig(eval_batch_size=0), ValueError, "eval_batch_size must be a positive int, got 0"),
    (lambda: TR.FitConfig(weight_decay=-1.0), ValueError, "weight_decay must be a non-negative number"),
    (lambda: TR.FitConfig(total_steps=0), ValueError, "total_steps must be a positive int"),
    (lambda: TR.FitConfig(factor="1"), ValueError, "factor must be a positive number, got '1'"),
    (lambda: TR.FitConfig(progress="bar"), ValueError, "progress must be True, False or 'text'"),
    (lambda: dataclasses.replace(TR.FitConfig(), lr=-1), ValueError, "lr must be a positive number, got -1"),
], ids=["unknown-keyword", "config-dict", "resume", "checkpoint_path", "eval_batch_size", "weight_decay",
        "total_steps", "factor", "progress", "replace-lr"])
def test_fit_config_names_a_bad_setting(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_fit_rejects_bad_pairs():
    with pytest.raises(TypeError, match="pairs"):
        TR.fit(tiny_model(), [("1", 2)], None, steps=1, batch_size=1, progress=False)


@pytest.mark.parametrize("module", [T, TR, S])
def test_every_public_name_is_listed_in_all(module):
    """Each public function or class a module defines is in its __all__ (what the contract lists)."""
    defined_here = {name for name, value in vars(module).items() if not name.startswith("_")
                    and getattr(value, "__module__", None) == module.__name__}
    assert defined_here <= set(module.__all__)
    assert all(hasattr(module, name) for name in module.__all__)


def test_history_state_round_trip():
    history = TR.History(train_loss=[1.0, 0.5], val_loss=[0.7])
    history.eval_steps, history.steps, history.train_seconds, history.train_cpu_seconds = [2], 2, 1.5, 3.0
    back = TR.History.from_state(history.state())
    assert back == history and (back.eval_steps, back.steps, back.train_seconds, back.train_cpu_seconds) == (
        [2], 2, 1.5, 3.0)
    old = {"series": {"train_loss": [1.0]}, "eval_steps": [], "steps": 1}  # written before the timings
    assert TR.History.from_state(old).train_cpu_seconds == 0.0


def test_recipe_is_fits_default_and_builds_a_model():
    defaults = {f.name: f.default for f in dataclasses.fields(TR.FitConfig)}
    for key, value in TR.RECIPE["fit"].items():
        if key != "steps":
            assert defaults[key] == value, key
    assert defaults["steps"] is None and TR.FitConfig().num_steps == TR.RECIPE["fit"]["steps"]  # None: the recipe's
    assert inspect.signature(TR.fit).parameters["config"].default is None  # None: FitConfig()
    model = Transformer(len(D.source_vocab()), len(D.target_vocab()), **TR.RECIPE["model"])
    assert model.d_model == TR.RECIPE["model"]["d_model"]
    assert TR.RECIPE["model"]["max_len"] >= D.MAX_TARGET_WORDS + 2


# ---------------------------------------------------------------- the student's own functions
def solution_functions() -> dict:
    """The four exercise answers of solutions/07_training.ipynb, run as a student's cells
    (written otherwise than the reference: a mean over the selected tokens, loss.item())."""
    import nbformat

    nb = nbformat.read(Path(__file__).resolve().parents[1] / "solutions" / "07_training.ipynb", as_version=4)
    namespace = {"torch": torch, "nn": nn, "F": F}
    for cell in nb.cells:
        if cell.cell_type == "code" and "### BEGIN SOLUTION" in cell.source:
            exec(cell.source, namespace)  # noqa: S102 - the course's own solution cells
    return {name: namespace[name] for name in S.EXERCISES}


def stub(name):
    def fn(*args, **kwargs):
        raise NotImplementedError(f"{name} is not written yet: fill in its exercise cell")
    fn.__name__ = name
    return fn


FEW = dict(steps=12, batch_size=16, lr=3e-3, warmup=4, label_smoothing=0.1, clip_norm=1.0, seed=3, progress=False)


def trained(**functions):
    model = tiny_model()
    TR.fit(model, D.load_split("train")[:240], None, **FEW, **functions)
    return model


@pytest.mark.parametrize("schedule, lr", [("linear", 3e-3), ("noam", 1.0)])
def test_fit_with_the_solutions_functions_gives_the_reference_model(schedule, lr):
    mine = solution_functions()
    assert all(mine[name] is not getattr(T, name) for name in S.EXERCISES)
    settings = dict(FEW, schedule=schedule, lr=lr)
    reference, student = tiny_model(), tiny_model()
    TR.fit(reference, D.load_split("train")[:240], None, **settings)
    TR.fit(student, D.load_split("train")[:240], None, **settings, **mine)
    for (name, a), b in zip(reference.state_dict().items(), student.state_dict().values()):
        assert torch.equal(a, b), name  # exactly: the same model, not a close one


def test_the_notebooks_fit_in_brief_takes_fits_steps():
    """Notebook 07 shows fit's loop in brief (cell nb07-042b) and says it ends with fit's weights:
    with dropout, label smoothing, clipping and three epochs, exactly."""
    import nbformat

    nb = nbformat.read(Path(__file__).resolve().parents[1] / "solutions" / "07_training.ipynb", as_version=4)
    source = next(c.source for c in nb.cells if c.get("id") == "nb07-042b")
    namespace = {"torch": torch, "NumberWordsDataset": D.NumberWordsDataset, "collate": D.collate,
                 "PAD_ID": D.PAD_ID, "src_vocab": D.source_vocab(), "tgt_vocab": D.target_vocab(),
                 **{name: getattr(T, name) for name in ("warmup_schedule", "shift_targets", "train_step")},
                 **{name: getattr(TR, name) for name in ("make_optimizer", "epoch_batches", "shifted_batch")}}
    exec(source, namespace)  # noqa: S102 - the course's own cell
    pairs = D.load_split("train")[:64]  # 4 batches an epoch: 3 epochs
    settings = {key: value for key, value in FEW.items() if key != "progress"}
    reference, brief = tiny_model(dropout=0.1), tiny_model(dropout=0.1)
    history = TR.fit(reference, pairs, None, **settings, progress=False)
    losses = namespace["fit_in_brief"](brief, pairs, **settings)
    assert losses == history["train_loss"]
    for (name, a), b in zip(reference.state_dict().items(), brief.state_dict().values()):
        assert torch.equal(a, b), name


def test_fit_uses_each_function_it_is_given():
    calls = {name: 0 for name in S.EXERCISES}

    def counting(name):
        def fn(*args, **kwargs):
            calls[name] += 1
            return getattr(T, name)(*args, **kwargs)
        return fn

    TR.fit(tiny_model(), D.load_split("train")[:64], None, **dict(FEW, schedule="noam", lr=1.0),
          **{name: counting(name) for name in S.EXERCISES})
    assert calls["shift_targets"] == calls["train_step"] == 12 and calls["noam_lr"] >= 12
    assert calls["masked_cross_entropy"] == 0  # a given train_step computes its own loss
    del calls["train_step"]
    TR.fit(tiny_model(), D.load_split("train")[:64], None, **FEW, masked_cross_entropy=counting("masked_cross_entropy"))
    assert calls["masked_cross_entropy"] == 12  # the reference step calls the loss it is given


def test_a_shift_that_differs_reaches_the_batches():
    seen = []

    def no_shift(tgt):  # the bug of section 2: the labels are the inputs
        seen.append(tgt.shape)
        return tgt[:, :-1], tgt[:, :-1]

    batch = a_batch()
    wrong = TR.shifted_batch(batch, no_shift)
    assert torch.equal(wrong.tgt_out, batch.tgt_in) and wrong.num_tokens == int((batch.tgt_in != 0).sum())
    assert torch.equal(TR.shifted_batch(batch, T.shift_targets).tgt_mask, batch.tgt_mask)


@pytest.mark.parametrize("name", ["train_step", "shift_targets", "masked_cross_entropy", "noam_lr"])
def test_fit_rejects_a_function_that_is_not_callable(name):
    with pytest.raises(TypeError, match=name):
        TR.fit(tiny_model(), D.load_split("valid")[:100], None, **FEW, **{name: 3})


def test_choose_functions_keeps_what_passes_and_says_so(capsys):
    mine = solution_functions()
    chosen = S.choose_functions(**mine)
    out = capsys.readouterr().out
    assert chosen == mine
    assert out.startswith("Training with:\n")
    for name in S.EXERCISES:
        assert re.search(rf"^  {name} +yours", out, re.M), out
    assert "[OK]" not in out  # the checks ran quietly


def test_choose_functions_runs_with_the_graders_stand_in_checks(monkeypatch, capsys):
    """A graded kernel's course_utils.checks is a plain module whose check_* do nothing (the grader
    checks): notebook 07's cell that calls choose_functions crashed there when it imported a checker's
    submodule (ModuleNotFoundError: 'course_utils.checks' is not a package)."""
    import sys
    import types

    import course_utils

    class NotChecked:
        passed, status, mistake, feedback = False, "not checked", None, "[ ] checked by the grader"

    stand_in = types.ModuleType("course_utils.checks")
    for name in S.EXERCISES:
        setattr(stand_in, f"check_{name}", lambda *args, **kwargs: NotChecked())
    monkeypatch.setitem(sys.modules, "course_utils.checks", stand_in)
    monkeypatch.setattr(course_utils, "checks", stand_in, raising=False)
    chosen = S.choose_functions(**solution_functions())
    assert chosen == dict.fromkeys(S.EXERCISES)  # not passed: the reference trains
    assert capsys.readouterr().out.startswith("Training with:\n")


def test_choose_functions_falls_back_on_stubs_with_the_reason(capsys):
    chosen = S.choose_functions(**{name: stub(name) for name in S.EXERCISES})
    out = capsys.readouterr().out
    assert chosen == dict.fromkeys(S.EXERCISES)
    for name in S.EXERCISES:
        # noam_lr's line also says that the recipe's schedule uses neither noam_lr
        end = re.escape(' (used with schedule="noam" only; the recipe decays linearly)') if name == "noam_lr" else ""
        assert re.search(rf"^  {name} +the reference: yours is not written yet{end}$", out, re.M), out
    # falling back trains the reference model
    reference = trained()
    fallback = trained(**chosen)
    assert all(torch.equal(a, b) for a, b in zip(reference.state_dict().values(), fallback.state_dict().values()))


def test_choose_functions_falls_back_on_a_failed_check_and_on_what_depends_on_it(capsys):
    mine = solution_functions()

    def shift_targets(tgt):  # the bug of section 2: the labels are the inputs
        return tgt[:, :-1], tgt[:, :-1]

    chosen = S.choose_functions(shift_targets, mine["masked_cross_entropy"], mine["noam_lr"], mine["train_step"])
    out = capsys.readouterr().out
    assert chosen == dict(mine, shift_targets=None)
    assert re.search(r"^  shift_targets +the reference: yours has not passed its check: \S", out, re.M), out
    # a train_step that calls an unfinished masked_cross_entropy: the dependency is named
    mine["train_step"].__globals__["masked_cross_entropy"] = stub("masked_cross_entropy")
    chosen = S.choose_functions(mine["shift_targets"], mine["train_step"].__globals__["masked_cross_entropy"],
                                mine["noam_lr"], mine["train_step"])
    out = capsys.readouterr().out
    assert chosen["masked_cross_entropy"] is None and chosen["train_step"] is None
    assert re.search(r"^  train_step +the reference: yours calls your masked_cross_entropy, which has not passed "
                     r"its check$", out, re.M), out


def test_choose_functions_reports_train_steps_own_failure_and_the_loss_it_calls(capsys):
    """The trial's train_step (`if clip_norm:`) calling a masked_cross_entropy that failed:
    the line names train_step's own mistake as well as the loss."""
    mine = solution_functions()

    namespace = {"nn": nn}  # the student's notebook: train_step finds masked_cross_entropy there
    exec(inspect.cleandoc("""
        def train_step(model, batch, optimizer, scheduler=None, pad_id=0, label_smoothing=0.0, clip_norm=1.0):
            model.train()
            optimizer.zero_grad()
            logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
            loss = masked_cross_entropy(logits, batch.tgt_out, pad_id, label_smoothing)
            loss.backward()
            if clip_norm:  # the mistake: 0.0 is a bound too
                nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            return loss.item()
        """), namespace)
    train_step = namespace["train_step"]
    namespace["masked_cross_entropy"] = mine["masked_cross_entropy"]  # a loss that passes: the step's mistake alone
    S.choose_functions(mine["shift_targets"], mine["masked_cross_entropy"], mine["noam_lr"], train_step)
    line = next(l for l in capsys.readouterr().out.splitlines() if l.startswith("  train_step"))
    assert line.endswith("the reference: yours has not passed its check: clip_norm 0 not clipped; its check cell "
                         "says more"), line
    namespace["masked_cross_entropy"] = per_sequence_mean_loss  # both fail (the step's check meets the loss first)
    S.choose_functions(mine["shift_targets"], per_sequence_mean_loss, mine["noam_lr"], train_step)
    line = next(l for l in capsys.readouterr().out.splitlines() if l.startswith("  train_step"))
    assert re.search(r"the reference: yours has not passed its check: [^;()]+; its check cell says more; and it calls "
                     r"your masked_cross_entropy, which has not passed its check either$", line), line


def test_choose_functions_names_the_imported_reference(capsys):
    chosen = S.choose_functions(T.shift_targets, None, None, None)
    out = capsys.readouterr().out
    assert chosen == dict.fromkeys(S.EXERCISES)
    assert "shift_targets         the reference: you imported it from course_utils" in out


def test_fit_text_progress_ends_finished_on_stdout(capsys):
    TR.fit(tiny_model(), D.load_split("train")[:64], None, **dict(FEW, progress="text"))
    out = capsys.readouterr().out
    assert "training: 100%" in out.split("\r")[-1] and "12/12" in out.split("\r")[-1]
    with pytest.raises(ValueError, match="progress"):
        TR.fit(tiny_model(), D.load_split("train")[:64], None, **dict(FEW, progress="yes"))


def per_sequence_mean_loss(logits, targets, pad_id, label_smoothing=0.0):
    """A wrong masked_cross_entropy: each sequence's mean over its real tokens, then the batch mean."""
    per_position = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none",
                                   label_smoothing=label_smoothing)  # (B, L)
    real = (targets != pad_id).float()  # (B, L)
    return ((per_position * real).sum(dim=1) / real.sum(dim=1)).mean()


def test_choose_functions_gives_a_named_mistake_by_its_name(capsys):
    mine = solution_functions()
    S.choose_functions(mine["shift_targets"], per_sequence_mean_loss, mine["noam_lr"], None)
    line = next(l for l in capsys.readouterr().out.splitlines() if l.startswith("  masked_cross_entropy"))
    assert line.endswith("the reference: yours has not passed its check: mean of per-sequence means; its check cell "
                         "says more"), line


@pytest.mark.parametrize("first, expected", [
    ("short (2, 3) verdict", "short (2, 3) verdict"),
    # cut at the last word outside parentheses: they stay balanced, no word is cut
    ("tgt_out (tgt of shape (3, 8)) has the right shape but the wrong values: the largest difference is 17 at "
     "index (1, 0) (yours 0, expected 17)",
     "tgt_out (tgt of shape (3, 8)) has the right shape but the wrong values: the largest difference is 17 ..."),
    ("your code raised TypeError while calling f(logits (4, 6, 10), targets (4, 6), pad_id=0, label_smoothing=0.1): "
     "unexpected keyword", "your code raised TypeError while calling ..."),
    ("(" + "x " * 80 + ")", "its verdict is long"),
])
def test_an_unnamed_verdict_is_cut_outside_parentheses(first, expected):
    from course_utils.checks._core import CheckResult

    result = CheckResult("shift_targets", False, f"[X] shift_targets: {first}\n    (seed 1: ...)")
    assert S._what_failed(result, "shift_targets") == expected


def test_yours_or_reference_keeps_what_passes_quietly(capsys):
    mine = solution_functions()
    for name in S.EXERCISES:
        assert S.yours_or_reference(name, mine[name]) is mine[name]
        assert S.yours_or_reference(name, getattr(T, name)) is getattr(T, name)  # imported: nothing to say
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("name", S.EXERCISES)
def test_yours_or_reference_falls_back_on_a_stub_and_says_how_to_continue(name, capsys):
    assert S.yours_or_reference(name, stub(name)) is getattr(T, name)
    assert capsys.readouterr().out == (f"{name}: this cell uses the reference (yours is not written yet); "
                                       "write yours and run its check to use it here\n")


def test_yours_or_reference_falls_back_on_a_failed_check(capsys):
    assert S.yours_or_reference("masked_cross_entropy", per_sequence_mean_loss) is T.masked_cross_entropy
    assert capsys.readouterr().out == (
        "masked_cross_entropy: this cell uses the reference (yours has not passed its check: mean of per-sequence "
        "means; its check cell says more); fix yours and run its check to use it here\n")
    # the trial's exchanged slices: the line is whole, its parentheses balanced
    assert S.yours_or_reference("shift_targets", lambda tgt: (tgt[:, 1:], tgt[:, :-1])) is T.shift_targets
    assert capsys.readouterr().out == (
        "shift_targets: this cell uses the reference (yours has not passed its check: shifted the wrong way; its "
        "check cell says more); fix yours and run its check to use it here\n")
    with pytest.raises(ValueError, match="name must be one of"):
        S.yours_or_reference("fit", per_sequence_mean_loss)
