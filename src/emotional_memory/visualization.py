"""Matplotlib figures of the model (extra ``viz``: ``pip install 'emotional-memory-jax[viz]'``).

Every function returns a :class:`matplotlib.figure.Figure`. Pass ``ax=`` to draw into
an existing Axes (the figure returned is then that Axes' figure; anything else is a
``TypeError`` naming ``ax``); otherwise a new
figure is built without pyplot (no global state, no GUI backend needed), ready for
``fig.savefig("out.png")``.

The original library's figures: :func:`plot_circumplex`, :func:`plot_decay_curves`,
:func:`plot_yerkes_dodson`, :func:`plot_retrieval_radar`, :func:`plot_mood_evolution`,
:func:`plot_adaptive_weights_heatmap`, :func:`plot_resonance_network`,
:func:`plot_appraisal_radar`. This project's own: :func:`plot_fitted_weights` (weights
across moods, default vs fitted), :func:`plot_learning_curves` (a fit's history) and
:func:`plot_signal_breakdown` (the six signals of one retrieval).

The curves are computed with the library's own functions (decay, consolidation,
mood-adaptive weights), so the figures show what the model does.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np

from emotional_memory._extras import install_hint
from emotional_memory._validation import finite, in_range, weight_vector
from emotional_memory._viz_model import SIGNAL_FIELDS as _SIGNAL_FIELDS
from emotional_memory._viz_model import appraisal_axes as _appraisal_axes
from emotional_memory._viz_model import breakdown_of as _breakdown_of
from emotional_memory._viz_model import engine_config as _engine_config
from emotional_memory._viz_model import families as _families
from emotional_memory._viz_model import flat_series as _flat_series
from emotional_memory._viz_model import history_rows as _history_rows
from emotional_memory._viz_model import items as _items
from emotional_memory._viz_model import mood_pairs as _mood_pairs
from emotional_memory._viz_model import six_values as _six
from emotional_memory._viz_model import weights_grid as _weights_grid

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "APPRAISAL_LABELS",
    "LINK_TYPE_COLORS",
    "MAX_HEATMAP_RESOLUTION",
    "SIGNAL_LABELS",
    "plot_adaptive_weights_heatmap",
    "plot_appraisal_radar",
    "plot_circumplex",
    "plot_decay_curves",
    "plot_fitted_weights",
    "plot_learning_curves",
    "plot_mood_evolution",
    "plot_resonance_network",
    "plot_retrieval_radar",
    "plot_signal_breakdown",
    "plot_yerkes_dodson",
]

MAX_HEATMAP_RESOLUTION = 1000
"""Most grid cells per axis of :func:`plot_adaptive_weights_heatmap` (a million cells)."""

SIGNAL_LABELS: list[str] = ["Semantic", "Mood", "Affect", "Momentum", "Recency", "Resonance"]
"""Short names of the six retrieval signals, in kernel order."""

APPRAISAL_LABELS: list[str] = [
    "Novelty",
    "Goal Relevance",
    "Coping Potential",
    "Norm Congruence",
    "Self Relevance",
]
"""The five appraisal dimensions, in :class:`AppraisalVector` order."""

LINK_TYPE_COLORS: dict[str, str] = {
    "semantic": "#4C72B0",
    "emotional": "#DD5555",
    "temporal": "#55A868",
    "causal": "#C4A000",
    "contrastive": "#8172B3",
}
"""Edge colour per resonance link type."""


def _require_matplotlib() -> None:
    """Raise a helpful ImportError when matplotlib (extra ``viz``) is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise ImportError(f"visualization needs matplotlib: {install_hint('viz')}") from exc


def _figure(ax: Axes | None, figsize: tuple[float, float], polar: bool = False) -> tuple[Any, Any]:
    """(figure, axes): ``ax`` and its (root, for a SubFigure's Axes) figure, or a new
    pyplot-free figure."""
    _require_matplotlib()
    if ax is not None:
        from matplotlib.axes import Axes

        if not isinstance(ax, Axes):
            raise TypeError(f"ax must be a matplotlib Axes, got {type(ax).__name__}")
        return getattr(ax.figure, "figure", None) or ax.figure, ax
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, layout="constrained")
    return fig, fig.add_subplot(1, 1, 1, projection="polar" if polar else None)


def _radar(ax: Any, values: Sequence[float], labels: Sequence[str], color: str, title: str) -> None:
    n = len(values)
    angles = [2 * math.pi * i / n for i in range(n)]
    closed_v = [*values, values[0]]
    closed_a = [*angles, angles[0]]
    ax.plot(closed_a, closed_v, color=color, linewidth=2)
    ax.fill(closed_a, closed_v, color=color, alpha=0.25)
    ax.set_xticks(angles)
    ax.set_xticklabels(list(labels))
    ax.set_title(title)


# ------------------------------------------------------------------ the original's


def plot_circumplex(
    memories: Sequence[Any],
    *,
    ax: Axes | None = None,
    title: str = "Valence-Arousal Circumplex",
    cmap: str = "RdYlGn",
) -> Figure:
    """Memories on Russell's valence-arousal circumplex, coloured by consolidation.

    Args:
        memories: ``(valence, arousal, consolidation_strength)`` tuples, or
            :class:`~emotional_memory.models.Memory` objects.
        ax: Axes to draw into (default: a new figure).
        title: Axes title.
        cmap: Colormap name for consolidation strength.

    Returns:
        The figure.

    Raises:
        TypeError: For ``memories`` that is no sequence, or an item that is neither a
            memory nor a tuple.
        ValueError: For a tuple that does not hold three finite values.
    """
    fig, axes = _figure(ax, (6.5, 5.0))
    points = []
    for i, m in enumerate(_items("memories", memories)):
        tag = getattr(m, "tag", None)
        if tag is not None:
            points.append(
                (tag.core_affect.valence, tag.core_affect.arousal, tag.consolidation_strength)
            )
            continue
        if isinstance(m, str | bytes) or not hasattr(m, "__len__"):
            raise TypeError(
                f"memories[{i}] must be a Memory or a (valence, arousal, "
                f"consolidation_strength) tuple, got {type(m).__name__}"
            )
        if len(m) != 3:
            raise ValueError(
                f"memories[{i}] must be (valence, arousal, consolidation_strength), "
                f"got {len(m)} values"
            )
        valence, arousal, strength = (finite(f"memories[{i}]", x) for x in m)
        points.append((valence, arousal, strength))
    axes.axhline(0.5, color="0.8", linewidth=0.8, zorder=0)
    axes.axvline(0.0, color="0.8", linewidth=0.8, zorder=0)
    if points:
        v, a, c = (np.asarray(col, dtype=float) for col in zip(*points, strict=True))
        sizes = 40 + 120 * np.clip(c, 0, 1)  # a strength outside [0, 1] stays drawable
        sc = axes.scatter(v, a, c=c, cmap=cmap, vmin=0.0, vmax=1.0, s=sizes, alpha=0.85)
        fig.colorbar(sc, ax=axes, label="consolidation strength")
    for text, (x, y) in {
        "excited": (0.7, 0.95),
        "calm": (0.7, 0.05),
        "tense": (-0.7, 0.95),
        "sad": (-0.7, 0.05),
    }.items():
        axes.text(x, y, text, ha="center", va="center", color="0.5", fontsize=9)
    axes.set_xlim(-1.05, 1.05)
    axes.set_ylim(-0.05, 1.05)
    axes.set_xlabel("valence")
    axes.set_ylabel("arousal")
    axes.set_title(title)
    return fig


def plot_decay_curves(
    *,
    base_decay: float = 0.5,
    arousal_modulation: float = 0.5,
    retrieval_boost: float = 0.1,
    floor_arousal_threshold: float = 0.7,
    floor_value: float = 0.1,
    arousal_values: Sequence[float] = (0.0, 0.5, 1.0),
    retrieval_counts: Sequence[int] = (0, 5, 10),
    initial_strength: float = 1.0,
    ax: Axes | None = None,
    title: str = "Memory Decay — ACT-R Power Law",
) -> Figure:
    """Effective strength over 30 days for several arousals and retrieval counts.

    Computed with :func:`~emotional_memory.decay.compute_effective_strength_batch`.

    Args:
        base_decay, arousal_modulation, retrieval_boost, floor_arousal_threshold,
            floor_value: The :class:`~emotional_memory.decay.DecayConfig` fields.
        arousal_values: Arousal of each curve family (line colour).
        retrieval_counts: Retrieval counts of each family (line style).
        initial_strength: Consolidation strength at encoding, in [0, 1].
        ax: Axes to draw into (default: a new figure).
        title: Axes title.

    Returns:
        The figure.

    Raises:
        ValueError: ``initial_strength`` outside [0, 1] (NaN included), an empty
            ``arousal_values`` / ``retrieval_counts``, or a decay field, arousal or
            retrieval count the model refuses (named).
    """
    from emotional_memory.affect import AffectiveMomentum, CoreAffect
    from emotional_memory.decay import DecayConfig, compute_effective_strength_batch
    from emotional_memory.models import EmotionalTag
    from emotional_memory.mood import MoodField

    initial_strength = in_range("initial_strength", initial_strength, 0.0, 1.0)
    arousal_values, retrieval_counts = _families(arousal_values, retrieval_counts)
    config = DecayConfig(
        base_decay=base_decay,
        arousal_modulation=arousal_modulation,
        retrieval_boost=retrieval_boost,
        floor_arousal_threshold=floor_arousal_threshold,
        floor_value=floor_value,
    )
    now = datetime(2026, 1, 31, tzinfo=UTC)
    hours = np.geomspace(1 / 60, 30 * 24, 120)
    curves = []  # every curve first: a refused value leaves a given Axes untouched
    for i, arousal in enumerate(arousal_values):
        for j, count in enumerate(retrieval_counts):
            tags = [
                EmotionalTag(
                    core_affect=CoreAffect(valence=0.0, arousal=arousal),
                    momentum=AffectiveMomentum.zero(),
                    mood_snapshot=MoodField.neutral(now),
                    timestamp=now - timedelta(hours=float(h)),
                    consolidation_strength=initial_strength,
                    retrieval_count=count,
                )
                for h in hours
            ]
            strength = compute_effective_strength_batch(tags, now, config)
            curves.append((i, j, f"arousal {arousal:g}, {count} retrievals", strength))
    fig, axes = _figure(ax, (8.0, 5.0))
    styles = ["-", "--", ":", "-."]
    colors = ["#4C72B0", "#DD8452", "#C44E52", "#55A868", "#8172B3"]
    for i, j, label, strength in curves:
        axes.plot(
            hours / 24,
            strength,
            color=colors[i % len(colors)],
            linestyle=styles[j % len(styles)],
            label=label,
        )
    axes.set_xscale("log")
    axes.set_xlabel("age (days)")
    axes.set_ylabel("effective strength")
    axes.set_ylim(0, max(1.0, initial_strength) * 1.05)
    axes.legend(fontsize=7, ncol=2)
    axes.set_title(title)
    return fig


def plot_yerkes_dodson(
    *,
    mood_arousal: float = 0.3,
    ax: Axes | None = None,
    title: str = "Yerkes-Dodson: Consolidation vs Arousal",
) -> Figure:
    """Consolidation strength against event arousal (inverted U), for one mood arousal.

    Computed with :func:`~emotional_memory.models.consolidation_strength`.

    Args:
        mood_arousal: The mood's arousal (shifts the optimum).
        ax: Axes to draw into (default: a new figure).
        title: Axes title.

    Returns:
        The figure.
    """
    from emotional_memory.models import consolidation_strength

    fig, axes = _figure(ax, (7.0, 4.5))
    arousal = np.linspace(0.0, 1.0, 101)
    strength = np.array([consolidation_strength(float(a), mood_arousal) for a in arousal])
    best = int(np.argmax(strength))
    axes.plot(arousal, strength, color="#4C72B0", linewidth=2)
    axes.axvline(arousal[best], color="#C44E52", linestyle="--", linewidth=1)
    axes.annotate(
        f"optimum {arousal[best]:.2f}",
        (arousal[best], strength[best]),
        textcoords="offset points",
        xytext=(8, -14),
        fontsize=8,
    )
    axes.set_xlabel("event arousal")
    axes.set_ylabel("consolidation strength")
    axes.set_ylim(0, 1.05)
    axes.set_title(f"{title} (mood arousal {mood_arousal:g})")
    return fig


def plot_retrieval_radar(
    scores: Any,
    labels: Sequence[str] = SIGNAL_LABELS,
    *,
    ax: Axes | None = None,
    title: str = "Retrieval Signal Breakdown",
    color: str = "#4C72B0",
) -> Figure:
    """The six retrieval signals of one result on a radar chart.

    Args:
        scores: Six values, or a ``RetrievalSignals`` / ``RetrievalBreakdown`` /
            ``RetrievalExplanation`` (its weighted signals are drawn).
        labels: Axis labels, one per value.
        ax: A polar Axes to draw into (default: a new figure).
        title: Axes title.
        color: Line and fill colour.

    Returns:
        The figure.

    Raises:
        ValueError: When the number of values and labels differ, there is no value,
            or a value is outside [0, 1] (NaN included), as in the original.
        TypeError: ``scores`` is none of these, or holds a non-number (named), or
            ``labels`` is no sequence of names.
    """
    values = _six(scores)
    if isinstance(labels, str) or not isinstance(labels, Sequence | np.ndarray):
        raise TypeError(f"labels must be a sequence of names, got {type(labels).__name__}")
    if len(values) != len(labels):
        raise ValueError(
            f"scores and labels must have the same length, got {len(values)} and {len(labels)}"
        )
    if not values:
        raise ValueError("scores must contain at least one value")
    for value in values:
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"scores must be in [0, 1], got {value}")
    fig, axes = _figure(ax, (5.5, 5.5), polar=True)
    _radar(axes, values, labels, color, title)
    return fig


def plot_mood_evolution(
    history: Sequence[Any],
    *,
    ax: Axes | None = None,
    title: str = "Mood Field Evolution",
) -> Figure:
    """Valence, arousal and dominance over time.

    Args:
        history: ``(t, valence, arousal, dominance)`` tuples in time order, ``t`` in
            seconds or a datetime (e.g. ``AffectiveState.history``), or
            :class:`~emotional_memory.mood.MoodField` objects.
        ax: Axes to draw into (default: a new figure).
        title: Axes title.

    Returns:
        The figure.

    Raises:
        ValueError: For a tuple that does not hold four values, or a NaN / inf.
        TypeError: For ``history`` that is no sequence, an entry that is neither, or
            datetimes and numbers (or aware and naive datetimes) mixed as times.
    """
    rows = _history_rows(history)
    fig, axes = _figure(ax, (9.0, 4.5))
    if rows:
        t0 = rows[0][0]
        ts = [
            (t - t0).total_seconds() / 60 if isinstance(t, datetime) else float(t) / 60
            for t, *_ in rows
        ]
        for k, (name, color) in enumerate(
            [("valence", "#4C72B0"), ("arousal", "#DD8452"), ("dominance", "#55A868")], start=1
        ):
            axes.plot(ts, [r[k] for r in rows], marker="o", markersize=3, color=color, label=name)
        axes.axhline(0.0, color="0.85", linewidth=0.8, zorder=0)
        axes.legend(fontsize=8)
    axes.set_ylim(-1.05, 1.05)
    axes.set_xlabel("time (minutes)")
    axes.set_ylabel("value")
    axes.set_title(title)
    return fig


def plot_adaptive_weights_heatmap(
    *,
    base_weights: Sequence[float] = (0.35, 0.25, 0.15, 0.10, 0.10, 0.05),
    resolution: int = 20,
    ax: Axes | None = None,
    title: str = "Adaptive Retrieval Weights vs Mood",
) -> Figure:
    """Six heatmaps: each retrieval weight over mood valence x arousal.

    Args:
        base_weights: The six base weights.
        resolution: Grid cells per axis, 2 to ``MAX_HEATMAP_RESOLUTION`` (1000).
        ax: Must be None (the figure has its own 2 x 3 grid).
        title: Figure title.

    Returns:
        The figure.

    Raises:
        ValueError: When ``ax`` is given, ``resolution`` is out of range, or ``base_weights`` does
            not hold 6 finite values.
        TypeError: When ``resolution`` is not an int or ``base_weights`` is a string.
    """
    if ax is not None:
        raise ValueError(
            "ax is not supported: plot_adaptive_weights_heatmap draws its own 2x3 grid; "
            "pass ax=None"
        )
    if isinstance(resolution, bool) or not isinstance(resolution, numbers.Integral):
        raise TypeError(f"resolution must be an int, got {type(resolution).__name__}")
    if not 2 <= resolution <= MAX_HEATMAP_RESOLUTION:
        raise ValueError(f"resolution must be in [2, {MAX_HEATMAP_RESOLUTION}], got {resolution}")
    if hasattr(base_weights, "__len__") and len(base_weights) != 6:
        raise ValueError(f"base_weights must contain 6 values, got {len(base_weights)}")
    # as RetrievalConfig checks them: finite, any sign, total magnitude bounded
    weights = weight_vector("base_weights", base_weights, nonneg=False, weights=True)
    valences, arousals, grid = _weights_grid(weights, int(resolution))
    fig, _ = _figure(None, (12.0, 7.0))
    fig.clear()
    axs = fig.subplots(2, 3)
    extent = (valences[0], valences[-1], arousals[0], arousals[-1])
    for k, panel in enumerate(axs.flat):
        im = panel.imshow(
            grid[:, :, k], origin="lower", extent=extent, aspect="auto", cmap="viridis"
        )
        panel.set_title(SIGNAL_LABELS[k])
        panel.set_xlabel("mood valence")
        panel.set_ylabel("mood arousal")
        fig.colorbar(im, ax=panel, shrink=0.8)
    fig.suptitle(title)
    return fig


def plot_resonance_network(
    links: Sequence[Any],
    node_labels: dict[str, str] | None = None,
    *,
    ax: Axes | None = None,
    title: str = "Resonance Network",
) -> Figure:
    """Memories as nodes on a circle and their resonance links as edges.

    Edge colour shows the link type, width the strength.

    Args:
        links: :class:`~emotional_memory.models.ResonanceLink` objects, or
            :class:`~emotional_memory.models.Memory` objects (their tags' links are
            drawn, and every memory is a node).
        node_labels: Optional ``memory id -> label`` (default: the first 16 characters
            of the content for memories, the first 8 of the id for other nodes).
        ax: Axes to draw into (default: a new figure).
        title: Axes title.

    Returns:
        The figure.

    Raises:
        TypeError: For ``links`` that is no sequence, an item that is neither a link nor
            a memory, a link whose ids are not text, or ``node_labels`` no mapping.
    """
    labels: dict[str, str] = {}
    edges: list[Any] = []
    for i, item in enumerate(_items("links", links)):
        tag = getattr(item, "tag", None)
        if tag is not None:
            labels.setdefault(item.id, item.content[:16])
            edges.extend(tag.resonance_links)
        elif hasattr(item, "source_id") and hasattr(item, "target_id"):
            for end in ("source_id", "target_id"):
                if not isinstance(getattr(item, end), str):
                    raise TypeError(f"links[{i}].{end} must be a str, "
                                    f"got {type(getattr(item, end)).__name__}")
            edges.append(item)
        else:
            raise TypeError(
                f"links[{i}] must be a ResonanceLink or a Memory, got {type(item).__name__}"
                " (for a RetrievalExplanation pass its .memory)"
            )
    if node_labels is not None and not isinstance(node_labels, Mapping):
        raise TypeError(f"node_labels must be a mapping of id to label, "
                        f"got {type(node_labels).__name__}")
    nodes = list(labels)
    for e in edges:
        for node in (e.source_id, e.target_id):
            if node not in labels:
                labels[node] = node[:8]
                nodes.append(node)
    if node_labels:
        labels.update(node_labels)
    fig, axes = _figure(ax, (7.0, 7.0))
    n = len(nodes)
    pos = {
        node: (math.cos(2 * math.pi * i / max(n, 1)), math.sin(2 * math.pi * i / max(n, 1)))
        for i, node in enumerate(nodes)
    }
    seen_types: set[str] = set()
    for e in edges:
        (x0, y0), (x1, y1) = pos[e.source_id], pos[e.target_id]
        kind = str(e.link_type)
        color = LINK_TYPE_COLORS.get(kind, "0.5")
        axes.plot(
            [x0, x1],
            [y0, y1],
            color=color,
            linewidth=0.5 + 4 * float(e.strength),
            alpha=0.7,
            label=kind if kind not in seen_types else None,
            zorder=1,
        )
        seen_types.add(kind)
    if nodes:
        xs, ys = zip(*(pos[node] for node in nodes), strict=True)
        axes.scatter(xs, ys, s=300, color="#EEEEEE", edgecolors="0.3", zorder=2)
        for node in nodes:
            x, y = pos[node]
            axes.text(x, y - 0.13, labels[node], ha="center", va="top", fontsize=7)
    if seen_types:
        axes.legend(fontsize=8, loc="upper right")
    axes.set_xlim(-1.4, 1.4)
    axes.set_ylim(-1.4, 1.4)
    axes.set_aspect("equal")
    axes.axis("off")
    axes.set_title(title)
    return fig


def plot_appraisal_radar(
    appraisal: Any,
    *,
    ax: Axes | None = None,
    title: str = "Appraisal Vector (Scherer CPM)",
    color: str = "#DD5555",
) -> Figure:
    """An appraisal on a radar chart, each dimension's range mapped to [0, 1].

    Args:
        appraisal: An :class:`~emotional_memory.appraisal.AppraisalVector` (or any
            object with its five fields), a
            :class:`~emotional_memory.appraisal_schema.GenericAppraisalVector` (its
            schema's dimensions and ranges), a ``{dimension: value}`` dict (values
            drawn as given), or five values in ``AppraisalVector`` order and ranges.
        ax: A polar Axes to draw into (default: a new figure).
        title: Axes title.
        color: Line and fill colour.

    Returns:
        The figure.

    Raises:
        TypeError: For any other ``appraisal`` (as in the original).
        ValueError: For a sequence that does not hold five values, an empty dict, or a
            NaN / inf value (named ``appraisal[key]``).
    """
    labels, values = _appraisal_axes(appraisal, APPRAISAL_LABELS)
    fig, axes = _figure(ax, (5.5, 5.5), polar=True)
    _radar(axes, values, labels, color, title)
    axes.set_ylim(0, 1)
    return fig


# ------------------------------------------------------------- this project's own


def plot_fitted_weights(
    fitted: Any,
    baseline: Any = None,
    *,
    moods: Mapping[str, tuple[float, float]] | None = None,
    ax: Axes | None = None,
    title: str = "Retrieval weights across moods",
) -> Figure:
    """The six mood-adaptive weights in several moods: baseline vs fitted config.

    Args:
        fitted: The fitted ``EmotionalMemoryConfig`` (e.g. ``FitResult.config``).
        baseline: The config to compare with (default: ``EmotionalMemoryConfig()``).
        moods: ``label -> (valence, arousal)``; default: five moods from calm-positive
            to anxious-negative.
        ax: Axes to draw into (default: a new figure).
        title: Axes title.

    Returns:
        The figure: per mood, one bar group per signal; hatched bars are the
        baseline, solid bars the fitted weights.

    Raises:
        TypeError: When ``fitted`` or ``baseline`` is not an ``EmotionalMemoryConfig``.
        ValueError: When ``moods`` is empty or a mood is not a finite pair (named).
    """
    from emotional_memory.engine import EmotionalMemoryConfig
    from emotional_memory.mood import MoodField
    from emotional_memory.retrieval import mood_weights
    from emotional_memory.scoring_config import params_from_config

    fitted = _engine_config("fitted", fitted)
    base_cfg = EmotionalMemoryConfig() if baseline is None else _engine_config("baseline", baseline)
    chosen = _mood_pairs(moods)
    if not chosen:
        raise ValueError("moods must hold at least one mood, got an empty mapping")
    now = datetime(2026, 1, 1, tzinfo=UTC)

    def weights(cfg: Any) -> np.ndarray:
        params = params_from_config(cfg.retrieval, cfg.decay)
        return np.stack(
            [
                mood_weights(
                    params,
                    MoodField(valence=v, arousal=a, dominance=0.5, inertia=0.5, timestamp=now),
                )
                for v, a in chosen.values()
            ]
        )

    w_base, w_fit = weights(base_cfg), weights(fitted)
    fig, axes = _figure(ax, (10.0, 5.0))
    n_moods = len(chosen)
    width = 0.8 / 6
    x = np.arange(n_moods)
    colors = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860"]
    for k in range(6):
        offset = (k - 2.5) * width
        axes.bar(
            x + offset,
            w_base[:, k],
            width * 0.45,
            color=colors[k],
            alpha=0.45,
            hatch="//",
            align="edge",
        )
        axes.bar(
            x + offset + width * 0.45,
            w_fit[:, k],
            width * 0.45,
            color=colors[k],
            label=SIGNAL_LABELS[k],
            align="edge",
        )
    axes.set_xticks(x)
    axes.set_xticklabels(list(chosen))
    axes.set_ylabel("weight (hatched: baseline, solid: fitted)")
    axes.legend(fontsize=8, ncol=3)
    axes.set_title(title)
    return fig


def plot_learning_curves(
    history: Any,
    *,
    ax: Axes | None = None,
    title: str = "Fit learning curves",
) -> Figure:
    """Losses (left axis) and top-1 accuracy (right axis) per optimisation step.

    Args:
        history: A ``FitResult`` (its ``history`` and ``best_step`` are used) or a
            mapping of series name to values, e.g. ``train_loss``, ``val_loss``,
            ``val_top1``.
        ax: Axes to draw into (default: a new figure).
        title: Axes title.

    Returns:
        The figure; a dotted line marks the kept step of a ``FitResult``.

    Raises:
        TypeError: When ``history`` is neither a ``FitResult`` nor a mapping.
        ValueError: A series that is not one number per step (named).
    """
    best = getattr(history, "best_step", None)
    series: Mapping[str, Sequence[float]] = getattr(history, "history", history)
    if not isinstance(series, Mapping):
        raise TypeError(
            "history must be a FitResult or a mapping of series name to values, got "
            f"{type(history).__name__}"
        )
    # every series converted first: a bad one leaves a given Axes untouched
    arrays = _flat_series(series)
    fig, axes = _figure(ax, (8.0, 4.5))
    right = None
    for name, ys in arrays.items():
        if ys.size == 0:
            continue
        target = axes
        if "top" in name or "acc" in name:
            right = right if right is not None else axes.twinx()
            target = right
        target.plot(np.arange(ys.size), ys, label=name, linestyle="--" if target is right else "-")
    if best is not None:
        axes.axvline(best, color="0.4", linestyle=":", linewidth=1)
    handles, names = axes.get_legend_handles_labels()
    if right is not None:
        right.set_ylabel("accuracy")
        h2, n2 = right.get_legend_handles_labels()
        handles, names = handles + h2, names + n2
    if handles:
        axes.legend(handles, names, fontsize=8)
    axes.set_xlabel("step")
    axes.set_ylabel("loss")
    axes.set_title(title)
    return fig


def plot_signal_breakdown(
    explanation: Any,
    *,
    ax: Axes | None = None,
    title: str | None = None,
) -> Figure:
    """One retrieval's score taken apart: raw signal, weight and contribution per signal.

    Args:
        explanation: A ``RetrievalExplanation`` (from ``retrieve_with_explanations``)
            or a ``RetrievalBreakdown``.
        ax: Axes to draw into (default: a new figure).
        title: Axes title (default: the memory's content and total score).

    Returns:
        The figure: grouped horizontal bars per signal (a seventh, "Lexical", when
        the opt-in lexical signal s7 took part).

    Raises:
        TypeError: ``explanation`` is neither.
    """
    breakdown = _breakdown_of(explanation)
    raw = [float(getattr(breakdown.raw_signals, f)) for f in _SIGNAL_FIELDS]
    weights = [float(getattr(breakdown.weights, f)) for f in _SIGNAL_FIELDS]
    weighted = [float(getattr(breakdown.weighted_signals, f)) for f in _SIGNAL_FIELDS]
    labels = list(SIGNAL_LABELS)
    lexical_weight = getattr(breakdown, "lexical_weight", None)
    if lexical_weight is not None:  # the opt-in lexical signal s7 took part
        lexical = float(breakdown.lexical_signal or 0.0)
        raw.append(lexical)
        weights.append(float(lexical_weight))
        weighted.append(float(lexical_weight) * lexical)
        labels.append("Lexical")
    memory = getattr(explanation, "memory", None)
    if title is None:
        head = f"{memory.content[:40]!r}: " if memory is not None else ""
        title = f"{head}score {float(breakdown.total_score):.3f}"
    fig, axes = _figure(ax, (8.0, 4.5))
    y = np.arange(len(labels))
    h = 0.27
    axes.barh(y - h, raw, h, label="raw signal", color="#8DA0CB")
    axes.barh(y, weights, h, label="weight", color="#FC8D62")
    axes.barh(y + h, weighted, h, label="contribution", color="#66C2A5")
    axes.set_yticks(y)
    axes.set_yticklabels(labels)
    axes.invert_yaxis()
    axes.axvline(0.0, color="0.6", linewidth=0.8)
    axes.legend(fontsize=8)
    axes.set_title(title)
    return fig
