"""Figures for the course notebooks (backs notebooks 01-07).

=====================================  ===============================================
function                               used in
=====================================  ===============================================
:func:`plot_attention`                 01 attention weights, 02 one head, 05 cross-attention
:func:`plot_mask`                      01 padding and causal masks, 05-06 decoder masks
:func:`plot_attention_grid`            02 all heads, 04-07 every layer x head of a model
:func:`plot_positional_encoding`       03 the sinusoidal table
:func:`plot_positional_curves`         03 value vs position for a few dimensions
:func:`plot_training_curves`           06-07 loss and accuracy during training
=====================================  ===============================================

Every function accepts torch tensors (CPU or CUDA, with or without ``requires_grad``; they
are detached and copied to the CPU) or numpy arrays, checks shapes up front (a wrong rank
or a label count that does not match an axis raises ``ValueError`` naming the argument and
its shape), draws into a new figure or into the ``ax`` given, and returns the ``Axes`` or
``Figure`` without calling ``plt.show()``, so it works headless (Agg) and inline alike.
Importing this module changes no global matplotlib state. Seaborn is not needed: plain
``imshow`` gives exact control of colour limits and ticks.

Conventions: attention weights are ``(L_q, L_k)`` with queries as rows (y axis, top to
bottom) and keys as columns (x axis); masks are boolean with ``True`` = may attend.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:  # matplotlib itself is imported by the first figure drawn (see _pyplot)
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "plot_attention",
    "plot_attention_grid",
    "plot_mask",
    "plot_positional_encoding",
    "plot_positional_curves",
    "plot_training_curves",
]

# two colours that differ in hue and lightness, so they stay distinct in grey scale and
# for red-green colour blindness
MASK_ALLOWED_COLOR = "#2166ac"  # dark blue: True, may attend
MASK_BLOCKED_COLOR = "#e8e8e8"  # light grey: False, blocked

ATTENTION_CMAP = "viridis"
POSITIONAL_CMAP = "RdBu_r"


# --------------------------------------------------------------------------- helpers


def _pyplot():
    """``matplotlib.pyplot``, imported when the first figure is drawn rather than with this
    module: ``import course_utils.plotting`` then costs a process nothing that draws no figure
    (about 0.7 s of CPU otherwise: every kernel the grader starts imports every course module)."""
    import matplotlib.pyplot as plt

    return plt


def _shape(x: np.ndarray) -> str:
    return str(tuple(x.shape))


def _to_numpy(name: str, x: Any) -> np.ndarray:
    """A tensor (any device, with or without grad) or array-like as a numpy array."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu()
        # half and bfloat16 have no (or no exact) numpy dtype: plot them in float32
        return x.float().numpy() if x.is_floating_point() else x.numpy()
    if isinstance(x, (str, bytes)) or x is None:
        raise TypeError(f"{name} must be a torch.Tensor or numpy array, got {type(x).__name__}")
    try:
        return np.asarray(x)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{name} must be a torch.Tensor or numpy array, got {type(x).__name__}") from err


def _require_rank(name: str, x: np.ndarray, rank: int, letters: str, hint: str = "") -> None:
    if x.ndim != rank:
        raise ValueError(
            f"{name} must have {rank} dimensions {letters}, got {x.ndim} with shape {_shape(x)}"
            + (f"; {hint}" if hint else "")
        )


def _labels(name: str, labels: Any, n: int, axis_desc: str, shape: str) -> list[str] | None:
    """Labels as a list of ``n`` strings (or None). A string is one label per character."""
    if labels is None:
        return None
    if isinstance(labels, torch.Tensor):
        labels = labels.detach().cpu().reshape(-1).tolist()  # token ids
    elif isinstance(labels, np.ndarray):
        labels = labels.reshape(-1).tolist()
    out = [str(t) for t in labels]
    if len(out) != n:
        raise ValueError(f"{name} has {len(out)} entries but {axis_desc} has {n} (shape {shape})")
    return out


def _set_ticks(ax: Axes, axis: str, n: int, labels: list[str] | None, show_labels: bool = True) -> None:
    """One tick per cell, labelled with the tokens (or the index when no labels).

    The font size follows the room per cell (estimated from the Axes' current size), and
    x labels turn vertical when horizontal ones would run into each other.
    """
    if labels is None and n > 30:
        # index labels for every cell would be unreadable: let matplotlib pick integers
        ax.tick_params(axis=axis, labelbottom=show_labels, labelleft=show_labels)
        return
    ticks = np.arange(n)
    labels = labels if labels is not None else [str(i) for i in range(n)]
    bbox = ax.get_position()
    fig_w, fig_h = ax.figure.get_size_inches()
    span = bbox.width * fig_w if axis == "x" else bbox.height * fig_h  # inches
    cell_pt = span / n * 72.0  # room per tick, in points
    size = float(np.clip(cell_pt * 0.8, 5.0, 10.0))
    if axis == "x":
        # average glyph width is about 0.6 of the font size
        too_wide = max(len(s) for s in labels) * 0.6 * size > 0.9 * cell_pt
        ax.set_xticks(ticks, labels, fontsize=size, rotation=90 if too_wide else 0)
        ax.tick_params(axis="x", labelbottom=show_labels)
    else:
        ax.set_yticks(ticks, labels, fontsize=size)
        ax.tick_params(axis="y", labelleft=show_labels)


def _new_axes(figsize: tuple[float, float]) -> Axes:
    _, ax = _pyplot().subplots(figsize=figsize, layout="constrained")
    return ax


def _heatmap_figsize(L_q: int, L_k: int, extra_w: float = 1.4) -> tuple[float, float]:
    # about 0.4 in per cell, clamped so tiny and huge maps both stay moderate
    w = min(max(0.4 * L_k, 2.5), 7.0) + extra_w
    h = min(max(0.4 * L_q, 2.0), 6.0) + 0.8
    return (w, h)


# --------------------------------------------------------------------------- attention


def _draw_attention(
    ax: Axes,
    w: np.ndarray,
    q_labels: list[str] | None,
    k_labels: list[str] | None,
    cmap: str,
    annotate: bool,
    show_x: bool = True,
    show_y: bool = True,
):
    L_q, L_k = w.shape
    im = ax.imshow(w, cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
    _set_ticks(ax, "x", L_k, k_labels, show_x)
    _set_ticks(ax, "y", L_q, q_labels, show_y)
    if annotate:
        colormap = im.get_cmap()
        for i in range(L_q):
            for j in range(L_k):
                value = float(w[i, j])
                if not np.isfinite(value):
                    continue
                r, g, b, _ = colormap(im.norm(value))
                # dark text on light cells, light text on dark ones
                color = "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white"
                ax.text(j, i, f"{value:.2f}", ha="center", va="center", color=color,
                        fontsize=8 if max(L_q, L_k) > 6 else 9)
    return im


def plot_attention(
    weights: Any,
    query_labels: Sequence | None = None,
    key_labels: Sequence | None = None,
    ax: Axes | None = None,
    title: str | None = None,
    cmap: str = ATTENTION_CMAP,
    annotate: bool | None = None,
    colorbar: bool = True,
) -> Axes:
    """Heatmap of one attention weight matrix.

    Args:
        weights: ``(L_q, L_k)`` weights, row ``i`` = how query ``i`` spreads its attention
            over the keys (each row sums to 1). Index batch and head first, e.g.
            ``weights[0, h]`` for ``(B, H, L_q, L_k)``.
        query_labels: ``L_q`` tokens for the rows (y axis); a string gives one per character.
        key_labels: ``L_k`` tokens for the columns (x axis).
        ax: Axes to draw into; a new figure when ``None``.
        title: optional title.
        cmap: colormap; the colour scale is fixed to ``[0, 1]`` so maps are comparable
            (values outside are shown with the end colours).
        annotate: write each weight in its cell; by default only when ``L_q, L_k <= 10``.
        colorbar: add a colour bar labelled "attention weight".

    Returns:
        The Axes.
    """
    w = _to_numpy("weights", weights)
    _require_rank("weights", w, 2, "(L_q, L_k)",
                  "index the batch and head first, e.g. weights[0, h] for (B, H, L_q, L_k)")
    L_q, L_k = w.shape
    q_labels = _labels("query_labels", query_labels, L_q, "weights' query axis L_q (rows)", _shape(w))
    k_labels = _labels("key_labels", key_labels, L_k, "weights' key axis L_k (columns)", _shape(w))
    if annotate is None:
        annotate = max(L_q, L_k) <= 10
    if ax is None:
        ax = _new_axes(_heatmap_figsize(L_q, L_k))
    im = _draw_attention(ax, w, q_labels, k_labels, cmap, annotate)
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    if title is not None:
        ax.set_title(title)
    if colorbar:
        ax.figure.colorbar(im, ax=ax, label="attention weight")
    return ax


def plot_attention_grid(
    weights: Any,
    query_labels: Sequence | None = None,
    key_labels: Sequence | None = None,
    layer_names: Sequence[str] | None = None,
    title: str | None = None,
    cmap: str = ATTENTION_CMAP,
) -> Figure:
    """Grid of attention maps: one row per layer, one column per head.

    Args:
        weights: ``(num_layers, H, L_q, L_k)``, or ``(H, L_q, L_k)`` drawn as one layer
            (the weights of one ``MultiHeadAttention`` call for one batch element).
            For a model, record and stack the layers, then index the batch element::

                with record_attention(model) as maps:
                    model(src, tgt, src_mask, tgt_mask)
                w = stack_layers(maps, "encoder", "self_attn")  # (num_layers, B, H, L, L)
                plot_attention_grid(w[:, 0], src_tokens, src_tokens)

        query_labels: ``L_q`` tokens (y axis of the left column).
        key_labels: ``L_k`` tokens (x axis of the bottom row).
        layer_names: one name per layer (default ``"layer 0"``, ...).
        title: figure title.
        cmap: colormap, colour scale fixed to ``[0, 1]`` and shared by all cells.

    Returns:
        The Figure; its first ``num_layers * H`` axes are the cells (row-major), the last
        one is the shared colour bar.
    """
    w = _to_numpy("weights", weights)
    if w.ndim == 3:
        w = w[None]  # (1, H, L_q, L_k)
    elif w.ndim != 4:
        hint = (
            "for the output of stack_layers (num_layers, B, H, L_q, L_k) index the batch "
            "element first, e.g. weights[:, 0]"
            if w.ndim == 5
            else "expected the weights of every head"
        )
        raise ValueError(
            f"weights must have 4 dimensions (num_layers, H, L_q, L_k) or 3 (H, L_q, L_k), "
            f"got {w.ndim} with shape {_shape(w)}; {hint}"
        )
    num_layers, H, L_q, L_k = w.shape
    q_labels = _labels("query_labels", query_labels, L_q, "weights' query axis L_q", _shape(w))
    k_labels = _labels("key_labels", key_labels, L_k, "weights' key axis L_k", _shape(w))
    if layer_names is None:
        names = [f"layer {i}" for i in range(num_layers)]
    else:
        names = [str(n) for n in layer_names]
        if len(names) != num_layers:
            raise ValueError(
                f"layer_names has {len(names)} entries but weights has {num_layers} layers "
                f"(shape {_shape(w)})"
            )

    # cells of about 2 in, or a bit more for long sequences, within a moderate figure
    cell = 1.8 if max(L_q, L_k) <= 12 else 2.4
    figsize = (min(cell * H + 1.6, 18.0), min(cell * num_layers + 1.0, 16.0))
    fig, axes = _pyplot().subplots(num_layers, H, figsize=figsize, squeeze=False, layout="constrained")
    im = None
    for layer in range(num_layers):
        for h in range(H):
            ax = axes[layer, h]
            im = _draw_attention(
                ax, w[layer, h], q_labels, k_labels, cmap, annotate=False,
                show_x=layer == num_layers - 1, show_y=h == 0,
            )
            if layer == 0:
                ax.set_title(f"head {h}", fontsize=10)
            if h == 0:
                ax.set_ylabel(names[layer])
    fig.supxlabel("key", fontsize=10)
    fig.supylabel("query", fontsize=10)
    fig.colorbar(im, ax=axes.ravel().tolist(), label="attention weight", shrink=0.9)
    if title is not None:
        fig.suptitle(title)
    return fig


# --------------------------------------------------------------------------- masks


def _as_bool_mask(m: np.ndarray) -> np.ndarray:
    if m.dtype == np.bool_:
        return m
    if m.size and not np.isin(m, (0, 1)).all():
        raise ValueError(
            f"mask must be boolean (True = may attend), got dtype {m.dtype} with values other "
            "than 0 and 1; for an additive mask of 0 / -inf use `mask == 0`"
        )
    return m.astype(bool)


def plot_mask(
    mask: Any,
    query_labels: Sequence | None = None,
    key_labels: Sequence | None = None,
    ax: Axes | None = None,
    title: str | None = None,
) -> Axes:
    """Picture of a boolean attention mask: blue = ``True`` (may attend), grey = ``False`` (blocked).

    Args:
        mask: ``(L_q, L_k)`` boolean (0/1 numbers are accepted), ``True`` = query ``i`` may
            attend to key ``j``. Index the batch first: ``padding_mask(...)[b]`` is
            ``(1, L_k)``, one row shared by every query; ``causal_mask(L)`` is ``(L, L)``.
        query_labels: ``L_q`` tokens for the rows (y axis).
        key_labels: ``L_k`` tokens for the columns (x axis).
        ax: Axes to draw into; a new figure when ``None``.
        title: optional title.

    Returns:
        The Axes; its legend names both colours.
    """
    m = _to_numpy("mask", mask)
    _require_rank("mask", m, 2, "(L_q, L_k)",
                  "index the batch first, e.g. mask[0] for (B, L_q, L_k) or (B, 1, L_k)")
    m = _as_bool_mask(m)
    L_q, L_k = m.shape
    q_labels = _labels("query_labels", query_labels, L_q, "mask's query axis L_q (rows)", _shape(m))
    k_labels = _labels("key_labels", key_labels, L_k, "mask's key axis L_k (columns)", _shape(m))
    if ax is None:
        ax = _new_axes(_heatmap_figsize(L_q, L_k, extra_w=2.2))
    from matplotlib.colors import BoundaryNorm, ListedColormap
    from matplotlib.patches import Patch

    cmap = ListedColormap([MASK_BLOCKED_COLOR, MASK_ALLOWED_COLOR])
    norm = BoundaryNorm([-0.5, 0.5, 1.5], cmap.N)  # 0 -> blocked colour, 1 -> allowed colour
    ax.imshow(m.astype(np.int8), cmap=cmap, norm=norm, aspect="auto", interpolation="nearest")
    _set_ticks(ax, "x", L_k, k_labels)
    _set_ticks(ax, "y", L_q, q_labels)
    # white lines between cells, so single cells and diagonals are easy to count
    ax.set_xticks(np.arange(-0.5, L_k, 1.0), minor=True)
    ax.set_yticks(np.arange(-0.5, L_q, 1.0), minor=True)
    ax.grid(which="minor", color="white", linewidth=1.0 if max(L_q, L_k) <= 30 else 0.3)
    ax.tick_params(which="minor", length=0)
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    if title is not None:
        ax.set_title(title)
    handles = [
        Patch(facecolor=MASK_ALLOWED_COLOR, edgecolor="grey", label="True: may attend"),
        Patch(facecolor=MASK_BLOCKED_COLOR, edgecolor="grey", label="False: blocked"),
    ]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0),
              borderaxespad=0.0, fontsize=9, frameon=False)
    return ax


# --------------------------------------------------------------------------- positions


def _pe_array(pe: Any) -> np.ndarray:
    p = _to_numpy("pe", pe)
    _require_rank("pe", p, 2, "(max_len, d_model)",
                  "pass the table itself, e.g. sinusoidal_positional_encoding(max_len, d_model) "
                  "or PositionalEncoding(...).pe")
    return p


def plot_positional_encoding(pe: Any, ax: Axes | None = None, title: str | None = None) -> Axes:
    """Heatmap of a positional-encoding table.

    Args:
        pe: ``(max_len, d_model)``; row = position (y axis, 0 at the top), column =
            dimension (x axis). Diverging colours on the fixed scale ``[-1, 1]`` (red
            positive, blue negative, white 0).
        ax: Axes to draw into; a new figure when ``None``.
        title: optional title.

    Returns:
        The Axes.
    """
    p = _pe_array(pe)
    if ax is None:
        ax = _new_axes((8.0, 4.5))
    im = ax.imshow(p, cmap=POSITIONAL_CMAP, vmin=-1.0, vmax=1.0, aspect="auto",
                   interpolation="nearest")
    ax.set_xlabel("dimension")
    ax.set_ylabel("position")
    if title is not None:
        ax.set_title(title)
    ax.figure.colorbar(im, ax=ax, label="value")
    return ax


def plot_positional_curves(
    pe: Any, dims: Sequence[int] | None = None, ax: Axes | None = None, title: str | None = None
) -> Axes:
    """Value against position for a few dimensions of a positional-encoding table.

    Args:
        pe: ``(max_len, d_model)`` table (even columns sin, odd columns cos).
        dims: the columns to draw. Default: the fastest sin/cos pair ``(0, 1)`` (period
            ``2*pi`` positions) and the pair at ``d_model / 4``, ten times slower (period
            ``20*pi``), e.g. ``(0, 1, 16, 17)`` for ``d_model = 64``. A sin column and its
            cos partner share a colour; cos is dashed.
        ax: Axes to draw into; a new figure when ``None``.
        title: optional title.

    Returns:
        The Axes, with a legend ``dim i (sin)`` / ``dim i (cos)``.
    """
    p = _pe_array(pe)
    max_len, d_model = p.shape
    if dims is None:
        # 10000^(2i / d_model) = 10 at 2i = d_model / 4: a pair ten times slower than (0, 1)
        slow = 2 * round(d_model / 8)
        dims = sorted({d for d in (0, 1, slow, slow + 1) if d < d_model})
    dims = [int(d) for d in dims]
    bad = [d for d in dims if not 0 <= d < d_model]
    if not dims or bad:
        raise ValueError(
            f"dims must be a non-empty list of columns in [0, {d_model}) for pe of shape "
            f"{_shape(p)}, got {dims}"
        )
    if ax is None:
        ax = _new_axes((8.0, 3.8))
    positions = np.arange(max_len)
    palette = _pyplot().rcParams["axes.prop_cycle"].by_key().get("color", ["C0"])
    pairs = sorted({d // 2 for d in dims})
    for d in dims:
        kind = "sin" if d % 2 == 0 else "cos"
        # the pair (2i, 2i+1) shares a colour; pairs take the cycle's colours in order
        color = palette[pairs.index(d // 2) % len(palette)]
        ax.plot(positions, p[:, d], color=color, linestyle="-" if kind == "sin" else "--",
                marker="." if max_len <= 30 else None, label=f"dim {d} ({kind})")
    ax.set_ylim(-1.1, 1.1)
    ax.set_xlim(0, max(max_len - 1, 1))
    ax.axhline(0.0, color="grey", linewidth=0.5)
    ax.set_xlabel("position")
    ax.set_ylabel("value")
    if title is not None:
        ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize=9)
    return ax


# --------------------------------------------------------------------------- training


def _series(key: str, values: Any) -> np.ndarray:
    """A history entry as a 1-D float array; a list of 0-d tensors (``loss`` itself) works."""
    if isinstance(values, (list, tuple)):
        values = [float(v.detach()) if isinstance(v, torch.Tensor) else v for v in values]
    try:
        s = _to_numpy(f"history[{key!r}]", values)
    except TypeError as err:
        raise TypeError(f"history[{key!r}] must be a list of numbers, got {type(values).__name__}") from err
    if s.ndim != 1:
        raise ValueError(f"history[{key!r}] must be a 1-D list of numbers, got shape {_shape(s)}")
    return s.astype(float)


def plot_training_curves(
    history: Mapping[str, Any],
    ax: Axes | Sequence[Axes] | None = None,
    x_label: str = "step",
    title: str | None = None,
) -> Figure:
    """Training curves: loss (and any other metric) on the left, accuracy on the right.

    Args:
        history: ``{name: list of numbers}``, e.g. ``{"train_loss": [...], "val_loss":
            [...], "val_accuracy": [...]}``. Keys containing ``"acc"`` go to a second
            panel; all others to the first. Values may be lists of floats or of 0-d tensors
            (``history["train_loss"].append(loss)`` works). If ``history`` has a key equal
            to ``x_label`` (``"step"``, ``"epoch"``), it gives the x values of the series
            of the same length. Otherwise the longest series is at x = 1, 2, ..., N and a
            shorter one (a validation loss per epoch next to a training loss per step) is
            spread evenly over the same range, its k-th point at ``k * N / n``: the end of
            the k-th of n equal chunks.
        ax: one Axes (no accuracy series) or a pair of Axes to draw into; a new figure
            (one or two panels) when ``None``.
        x_label: label of the x axis, e.g. ``"step"`` or ``"epoch"``.
        title: figure title.

    Returns:
        The Figure.
    """
    if not isinstance(history, Mapping) or not history:
        raise ValueError("history must be a non-empty dict {name: list of numbers}")
    x_values = None
    if x_label in history:
        x_values = _series(x_label, history[x_label])
    series = {str(k): _series(str(k), v) for k, v in history.items() if k != x_label}
    if not series:
        raise ValueError(f"history has no series to plot besides the x values {x_label!r}")
    acc_keys = [k for k in series if "acc" in k.lower()]
    loss_keys = [k for k in series if k not in acc_keys]
    panels = [keys for keys in (loss_keys, acc_keys) if keys]

    if ax is None:
        fig, axes = _pyplot().subplots(1, len(panels), figsize=(5.0 * len(panels) + 1.0, 3.8),
                                 squeeze=False, layout="constrained")
        axes = list(axes[0])
    else:
        from matplotlib.axes import Axes

        axes = [ax] if isinstance(ax, Axes) else list(ax)
        if len(axes) != len(panels):
            raise ValueError(
                f"ax must hold {len(panels)} Axes (one per panel: "
                f"{' and '.join('loss' if p is loss_keys else 'accuracy' for p in panels)}), "
                f"got {len(axes)}"
            )
        fig = axes[0].figure

    N = max(len(s) for s in series.values())
    for panel_ax, keys in zip(axes, panels):
        for k in keys:
            s = series[k]
            n = len(s)
            if n == 0:
                panel_ax.plot([], [], label=k)  # keeps the legend entry before data arrives
                continue
            if x_values is not None and len(x_values) == n:
                x = x_values
            else:
                x = np.arange(1, n + 1) * (N / n)  # (n,)
            panel_ax.plot(x, s, label=k, marker="o" if n <= 30 else None, markersize=4)
        panel_ax.set_xlabel(x_label)
        panel_ax.grid(True, alpha=0.3)
        panel_ax.legend(fontsize=9)
        if keys is acc_keys:
            panel_ax.set_ylabel("accuracy")
            values = np.concatenate([series[k] for k in keys])
            if values.size and np.nanmin(values) >= 0 and np.nanmax(values) <= 1:
                panel_ax.set_ylim(0.0, 1.02)  # fractions: show the whole scale
        else:
            panel_ax.set_ylabel("loss" if all("loss" in k.lower() for k in keys) else "value")
    if title is not None:
        fig.suptitle(title)
    return fig
