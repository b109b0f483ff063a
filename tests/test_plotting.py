"""Tests for course_utils.plotting: return types, labels, colour limits, shapes, errors."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from course_utils import (  # noqa: E402
    Encoder,
    MultiHeadAttention,
    causal_mask,
    padding_mask,
    record_attention,
    sinusoidal_positional_encoding,
    stack_layers,
)
from course_utils.plotting import (  # noqa: E402
    MASK_ALLOWED_COLOR,
    MASK_BLOCKED_COLOR,
    plot_attention,
    plot_attention_grid,
    plot_mask,
    plot_positional_curves,
    plot_positional_encoding,
    plot_training_curves,
)

TOKENS_Q = ["the", "cat", "sat"]
TOKENS_K = ["le", "chat", "s'est", "assis"]


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def texts(labels) -> list[str]:
    return [t.get_text() for t in labels]


def weights(*shape: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return torch.softmax(torch.randn(*shape, generator=g), dim=-1)


def cell_images(fig: Figure) -> list[Axes]:
    """The heatmap axes of a figure (the colour bar's axes hold no AxesImage)."""
    return [ax for ax in fig.axes if ax.images]


# --------------------------------------------------------------------------- plot_attention


def test_plot_attention_axes_labels_and_colour_scale():
    w = weights(3, 4)  # (L_q, L_k)
    ax = plot_attention(w, TOKENS_Q, TOKENS_K, title="cross")
    assert isinstance(ax, Axes)
    assert texts(ax.get_yticklabels()) == TOKENS_Q  # queries on y
    assert texts(ax.get_xticklabels()) == TOKENS_K  # keys on x
    assert ax.get_title() == "cross"
    image = ax.images[0]
    assert image.get_clim() == (0.0, 1.0)
    np.testing.assert_allclose(image.get_array(), w.numpy(), rtol=0, atol=1e-7)
    assert image.get_array().shape == (3, 4)
    assert len(ax.figure.axes) == 2  # heatmap + colour bar


def test_plot_attention_annotates_small_maps_only():
    small = plot_attention(weights(3, 4))
    w = weights(3, 4)
    small_texts = texts(small.texts)
    assert len(small_texts) == 12
    assert f"{w[0, 0].item():.2f}" == small_texts[0]
    big = plot_attention(weights(11, 12))
    assert len(big.texts) == 0
    forced = plot_attention(weights(11, 12), annotate=True)
    assert len(forced.texts) == 11 * 12
    off = plot_attention(weights(3, 4), annotate=False)
    assert len(off.texts) == 0


def test_plot_attention_into_given_axes_with_grad_tensor():
    fig, (a, b) = plt.subplots(1, 2)
    scores = torch.randn(2, 2, requires_grad=True)
    w = torch.softmax(scores, dim=-1)  # (L_q, L_k), carries grad
    ax = plot_attention(w, ["a", "b"], "xy", ax=b, colorbar=False)
    assert ax is b and ax.figure is fig
    assert texts(ax.get_xticklabels()) == ["x", "y"]  # a string: one label per character
    assert len(fig.axes) == 2  # no colour bar added
    assert len(a.images) == 0


def test_plot_attention_accepts_numpy_and_token_id_tensors():
    w = weights(2, 3).numpy()
    ax = plot_attention(w, query_labels=torch.tensor([5, 7]), key_labels=np.array([1, 2, 3]))
    assert texts(ax.get_yticklabels()) == ["5", "7"]
    assert texts(ax.get_xticklabels()) == ["1", "2", "3"]


def test_plot_attention_without_labels_uses_indices():
    ax = plot_attention(weights(2, 3))
    assert texts(ax.get_xticklabels()) == ["0", "1", "2"]
    assert texts(ax.get_yticklabels()) == ["0", "1"]


def test_plot_attention_half_precision():
    ax = plot_attention(weights(2, 3).to(torch.bfloat16))
    assert ax.images[0].get_array().dtype == np.float32


@pytest.mark.parametrize("shape", [(4,), (2, 3, 4), (1, 1, 3, 4)])
def test_plot_attention_wrong_rank(shape):
    with pytest.raises(ValueError, match=r"weights must have 2 dimensions \(L_q, L_k\)") as err:
        plot_attention(torch.rand(*shape))
    assert f"shape {tuple(shape)}" in str(err.value)


def test_plot_attention_label_count_mismatch():
    with pytest.raises(ValueError, match=r"key_labels has 3 entries .* 4 \(shape \(3, 4\)\)"):
        plot_attention(weights(3, 4), TOKENS_Q, TOKENS_Q)
    with pytest.raises(ValueError, match=r"query_labels has 4 entries .* 3 \(shape \(3, 4\)\)"):
        plot_attention(weights(3, 4), TOKENS_K, TOKENS_K)


def test_plot_attention_rejects_non_array():
    with pytest.raises(TypeError, match="weights"):
        plot_attention("not weights")


# --------------------------------------------------------------------------- grid


def test_plot_attention_grid_layers_by_heads():
    w = weights(2, 3, 4, 5)  # (num_layers, H, L_q, L_k)
    q = ["a", "b", "c", "d"]
    k = ["v", "w", "x", "y", "z"]
    fig = plot_attention_grid(w, q, k, layer_names=["enc 0", "enc 1"], title="grid")
    assert isinstance(fig, Figure)
    cells = cell_images(fig)
    assert len(cells) == 2 * 3
    assert len(fig.axes) == 2 * 3 + 1  # one shared colour bar
    assert all(ax.images[0].get_clim() == (0.0, 1.0) for ax in cells)
    # row-major order: cell (layer, head) shows w[layer, head]
    np.testing.assert_allclose(cells[1 * 3 + 2].images[0].get_array(), w[1, 2].numpy())
    assert [ax.get_title() for ax in cells[:3]] == ["head 0", "head 1", "head 2"]
    assert cells[0].get_ylabel() == "enc 0" and cells[3].get_ylabel() == "enc 1"
    assert fig.get_suptitle() == "grid"
    for i, ax in enumerate(cells):
        layer, head = divmod(i, 3)
        # every cell has one tick per token ...
        assert ax.xaxis.get_major_formatter().format_ticks(ax.get_xticks()) == k
        assert ax.yaxis.get_major_formatter().format_ticks(ax.get_yticks()) == q
        # ... but labels are drawn only on the outer axes: bottom row (x), left column (y)
        assert texts(ax.get_xticklabels()) == (k if layer == 1 else []), (layer, head)
        assert texts(ax.get_yticklabels()) == (q if head == 0 else []), (layer, head)


def test_plot_attention_grid_one_layer_and_default_names():
    fig = plot_attention_grid(weights(4, 3, 3))  # (H, L_q, L_k)
    cells = cell_images(fig)
    assert len(cells) == 4
    assert cells[0].get_ylabel() == "layer 0"


def test_plot_attention_grid_from_record_attention_and_stack_layers():
    torch.manual_seed(0)
    encoder = Encoder(num_layers=2, d_model=8, num_heads=2, d_ff=16).eval()
    x = torch.randn(3, 5, 8)  # (B, L, D)
    with record_attention(encoder) as maps:
        encoder(x)
    stacked = stack_layers(maps, "", "self_attn")  # (num_layers, B, H, L, L)
    assert stacked.shape == (2, 3, 2, 5, 5)
    fig = plot_attention_grid(stacked[:, 1])
    assert len(cell_images(fig)) == 2 * 2
    with pytest.raises(ValueError, match=r"\(2, 3, 2, 5, 5\).*index the batch element first"):
        plot_attention_grid(stacked)


def test_plot_attention_grid_errors():
    with pytest.raises(ValueError, match=r"\(5, 5\)"):
        plot_attention_grid(weights(5, 5))
    with pytest.raises(ValueError, match=r"layer_names has 1 entries .* 2 layers"):
        plot_attention_grid(weights(2, 2, 3, 3), layer_names=["only one"])
    with pytest.raises(ValueError, match=r"key_labels has 2 entries .*\(2, 2, 3, 4\)"):
        plot_attention_grid(weights(2, 2, 3, 4), key_labels=["a", "b"])


def test_plot_attention_grid_grad_tensor():
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(1, 4, 8)
    _, w = mha(x, x, x)  # (B, H, L_q, L_k), requires grad
    assert w.requires_grad
    fig = plot_attention_grid(w[0])
    assert len(cell_images(fig)) == 2


# --------------------------------------------------------------------------- masks


def test_plot_mask_colours_and_legend():
    L = 4
    mask = causal_mask(L)  # (L, L)
    ax = plot_mask(mask, list("abcd"), list("abcd"), title="causal")
    assert isinstance(ax, Axes)
    assert ax.get_title() == "causal"
    assert texts(ax.get_xticklabels()) == list("abcd")
    assert texts(ax.get_yticklabels()) == list("abcd")
    image = ax.images[0]
    shown = image.get_array()
    np.testing.assert_array_equal(np.asarray(shown), mask.numpy().astype(int))
    allowed = image.cmap(image.norm(1))
    blocked = image.cmap(image.norm(0))
    assert allowed == to_rgba(MASK_ALLOWED_COLOR)
    assert blocked == to_rgba(MASK_BLOCKED_COLOR)
    assert allowed != blocked
    legend = ax.get_legend()
    labels = texts(legend.get_texts())
    assert labels == ["True: may attend", "False: blocked"]
    handle_colours = [h.get_facecolor() for h in legend.legend_handles]
    assert handle_colours == [allowed, blocked]


def test_plot_mask_padding_row_and_numeric_masks():
    tokens = torch.tensor([[4, 5, 0]])
    row = padding_mask(tokens, 0)[0]  # (1, L_k)
    ax = plot_mask(row, key_labels=["x", "y", "<pad>"])
    np.testing.assert_array_equal(np.asarray(ax.images[0].get_array()), [[1, 1, 0]])
    ax2 = plot_mask(np.array([[1, 0], [0, 1]]))  # 0/1 numbers are read as bools
    np.testing.assert_array_equal(np.asarray(ax2.images[0].get_array()), [[1, 0], [0, 1]])


def test_plot_mask_errors():
    with pytest.raises(ValueError, match=r"mask must have 2 dimensions .*\(2, 1, 3\)"):
        plot_mask(torch.ones(2, 1, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="additive mask"):
        plot_mask(torch.tensor([[0.0, float("-inf")]]))
    with pytest.raises(ValueError, match=r"query_labels has 2 entries .*\(3, 3\)"):
        plot_mask(causal_mask(3), query_labels=["a", "b"])


# --------------------------------------------------------------------------- positions


def test_plot_positional_encoding():
    pe = sinusoidal_positional_encoding(50, 16)  # (max_len, d_model)
    ax = plot_positional_encoding(pe, title="PE")
    assert isinstance(ax, Axes)
    image = ax.images[0]
    assert image.get_clim() == (-1.0, 1.0)
    assert image.get_array().shape == (50, 16)  # positions on y (rows), dimensions on x
    assert ax.get_xlabel() == "dimension" and ax.get_ylabel() == "position"
    assert ax.get_title() == "PE"


def test_plot_positional_encoding_errors():
    with pytest.raises(ValueError, match=r"pe must have 2 dimensions .*\(1, 50, 16\)"):
        plot_positional_encoding(sinusoidal_positional_encoding(50, 16)[None])


def test_plot_positional_curves_default_and_given_dims():
    pe = sinusoidal_positional_encoding(40, 32)
    ax = plot_positional_curves(pe)
    assert isinstance(ax, Axes)
    legend = texts(ax.get_legend().get_texts())
    assert legend == ["dim 0 (sin)", "dim 1 (cos)", "dim 8 (sin)", "dim 9 (cos)"]
    line = ax.lines[2]  # dim 8
    np.testing.assert_allclose(line.get_ydata(), pe[:, 8].numpy())
    np.testing.assert_array_equal(line.get_xdata(), np.arange(40))
    ax2 = plot_positional_curves(pe.numpy(), dims=[3])
    assert texts(ax2.get_legend().get_texts()) == ["dim 3 (cos)"]


def test_plot_positional_curves_errors():
    pe = sinusoidal_positional_encoding(10, 8)
    with pytest.raises(ValueError, match=r"dims .* \[0, 8\) .*\(10, 8\), got \[8\]"):
        plot_positional_curves(pe, dims=[8])
    with pytest.raises(ValueError, match=r"\(80,\)"):
        plot_positional_curves(pe.reshape(-1))


# --------------------------------------------------------------------------- training


def test_plot_training_curves_two_panels():
    history = {
        "train_loss": [3.0, 2.0, 1.5, 1.2, 1.0, 0.9],  # per step
        "val_loss": [1.8, 1.1],  # per epoch (3 steps each)
        "val_accuracy": [0.5, 0.7],
    }
    fig = plot_training_curves(history, x_label="step", title="run")
    assert isinstance(fig, Figure)
    loss_ax, acc_ax = fig.axes
    assert texts(loss_ax.get_legend().get_texts()) == ["train_loss", "val_loss"]
    assert texts(acc_ax.get_legend().get_texts()) == ["val_accuracy"]
    assert loss_ax.get_xlabel() == "step" and acc_ax.get_xlabel() == "step"
    assert loss_ax.get_ylabel() == "loss" and acc_ax.get_ylabel() == "accuracy"
    train, val = loss_ax.lines
    np.testing.assert_allclose(train.get_xdata(), [1, 2, 3, 4, 5, 6])
    np.testing.assert_allclose(train.get_ydata(), history["train_loss"])
    # the epoch values sit at the end of each epoch's steps
    np.testing.assert_allclose(val.get_xdata(), [3, 6])
    assert acc_ax.get_ylim() == (0.0, 1.02)
    assert fig.get_suptitle() == "run"


def test_plot_training_curves_loss_only_tensors_with_grad():
    w = torch.tensor(2.0, requires_grad=True)
    losses = [w * 1.0, w * 0.5]  # 0-d tensors as appended by a training loop
    fig = plot_training_curves({"train_loss": losses}, x_label="epoch")
    assert len(fig.axes) == 1
    np.testing.assert_allclose(fig.axes[0].lines[0].get_ydata(), [2.0, 1.0])
    assert fig.axes[0].get_xlabel() == "epoch"


def test_plot_training_curves_explicit_x_and_given_axes():
    fig, axes = plt.subplots(1, 2)
    history = {"epoch": [10, 20], "loss": torch.tensor([1.0, 0.5]), "acc": np.array([0.2, 0.4])}
    out = plot_training_curves(history, ax=axes, x_label="epoch")
    assert out is fig
    np.testing.assert_allclose(axes[0].lines[0].get_xdata(), [10, 20])
    np.testing.assert_allclose(axes[1].lines[0].get_xdata(), [10, 20])
    assert len(axes[0].lines) == 1  # the x key itself is not plotted


def test_plot_training_curves_errors():
    with pytest.raises(ValueError, match="non-empty"):
        plot_training_curves({})
    with pytest.raises(ValueError, match=r"history\['loss'\] must be a 1-D .*\(2, 2\)"):
        plot_training_curves({"loss": [[1.0, 2.0], [3.0, 4.0]]})
    _, single = plt.subplots()
    with pytest.raises(ValueError, match="ax must hold 2 Axes"):
        plot_training_curves({"loss": [1.0], "acc": [0.5]}, ax=single)


# --------------------------------------------------------------------------- module


def test_import_changes_no_global_style():
    import importlib

    import course_utils.plotting as plotting

    before = dict(plt.rcParams)
    importlib.reload(plotting)
    assert dict(plt.rcParams) == before


def test_functions_never_show(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("show() called")

    monkeypatch.setattr(plt, "show", refuse)
    monkeypatch.setattr(Figure, "show", refuse)
    pe = sinusoidal_positional_encoding(6, 4)
    plot_attention(weights(2, 2))
    plot_attention_grid(weights(2, 2, 2))
    plot_mask(causal_mask(2))
    plot_positional_encoding(pe)
    plot_positional_curves(pe)
    plot_training_curves({"loss": [1.0]})
    assert len(plt.get_fignums()) == 6  # one new figure each


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_tensors():
    w = weights(3, 4).cuda().requires_grad_()
    ax = plot_attention(w)
    np.testing.assert_allclose(ax.images[0].get_array(), w.detach().cpu().numpy())
    plot_mask(causal_mask(3, device="cuda"))
    plot_positional_encoding(sinusoidal_positional_encoding(5, 4).cuda())
    plot_training_curves({"loss": [torch.tensor(1.0, device="cuda")]})
