"""PNG plots for fits: learning curves and weights versus mood."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from emotional_memory import EmotionalMemoryConfig, MoodField
from emotional_memory._files import replaced_whole
from emotional_memory.retrieval import SIGNAL_FIELDS, adaptive_weights


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("--plot needs matplotlib: pip install matplotlib") from exc
    return plt


def _save(plt: Any, fig: Any, path: Path) -> Path:
    """Write ``fig`` to ``path`` as a PNG, whole or not at all, and close it."""
    try:
        with replaced_whole(path) as temporary:
            fig.savefig(temporary, dpi=110, format="png")
    finally:
        plt.close(fig)
    return path


def learning_curves(history: dict[str, list[float]], best_step: int, path: Path) -> Path:
    """Train and validation loss per step, with the kept step marked.

    Args:
        history: ``FitResult.history`` (``train_loss``, optional ``val_loss``; the
            validation curve is drawn only when it is not all zeros).
        best_step: The step whose parameters were kept.
        path: Output PNG path.

    Returns:
        The written PNG path.
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(history.get("train_loss", []), label="train loss")
    if any(v != 0 for v in history.get("val_loss", [])):
        ax.plot(history["val_loss"], label="validation loss")
    ax.axvline(best_step, color="grey", linestyle="--", label=f"kept step {best_step}")
    ax.set_xlabel("step")
    ax.set_ylabel("listwise loss")
    ax.legend()
    fig.tight_layout()
    return _save(plt, fig, path)


def weight_grid(
    config: EmotionalMemoryConfig, n: int = 41
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Adaptive weights over a grid of mood valence x arousal.

    Args:
        config: Configuration whose base weights and gates are evaluated.
        n: Grid points per axis (valence in [-1, 1], arousal in [0, 1]).

    Returns:
        ``(valence (n,), arousal (n,), weights (n_arousal, n_valence, 6))``.
    """
    valence = np.linspace(-1.0, 1.0, n)
    arousal = np.linspace(0.0, 1.0, n)
    out = np.zeros((n, n, 6))
    ts = MoodField.neutral().timestamp
    cfg = config.retrieval
    for i, a in enumerate(arousal):
        for j, v in enumerate(valence):
            mood = MoodField(valence=v, arousal=a, dominance=0.5, inertia=0.5, timestamp=ts)
            out[i, j] = adaptive_weights(mood, cfg.base_weights, cfg.adaptive_weights_config)
    return valence, arousal, out


def weights_heatmap(
    fitted: EmotionalMemoryConfig, default: EmotionalMemoryConfig, path: Path, n: int = 41
) -> Path:
    """Six heatmaps (one per signal) of the fitted weight over mood, plus default contours.

    Args:
        fitted: The fitted configuration (colour).
        default: The starting configuration (white contours).
        path: Output PNG path.
        n: Grid points per mood axis.

    Returns:
        The written PNG path.
    """
    plt = _pyplot()
    v, a, wf = weight_grid(fitted, n)
    _, _, wd = weight_grid(default, n)
    fig, axes = plt.subplots(2, 3, figsize=(11, 6), sharex=True, sharey=True)
    for k, ax in enumerate(axes.ravel()):
        im = ax.imshow(wf[:, :, k], origin="lower", extent=(-1, 1, 0, 1), aspect="auto",
                       vmin=0.0, vmax=max(0.05, float(wf[:, :, k].max())), cmap="viridis")
        cs = ax.contour(v, a, wd[:, :, k], colors="white", linewidths=0.6)
        ax.clabel(cs, fontsize=6)
        ax.set_title(SIGNAL_FIELDS[k], fontsize=9)
        fig.colorbar(im, ax=ax, fraction=0.046)
    for ax in axes[-1]:
        ax.set_xlabel("mood valence")
    for ax in axes[:, 0]:
        ax.set_ylabel("mood arousal")
    fig.suptitle("Fitted weight by mood (colour); default weight (white contours)")
    fig.tight_layout()
    return _save(plt, fig, path)


def challenge_bars(default: dict[str, float], fitted: dict[str, float], path: Path) -> Path:
    """Top-1 per challenge type, default versus fitted.

    Args:
        default: Challenge type -> top-1 with the default config.
        fitted: Challenge type -> top-1 with the fitted config (missing types: 0).
        path: Output PNG path.

    Returns:
        The written PNG path.
    """
    plt = _pyplot()
    names = sorted(set(default) | set(fitted))
    x = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.bar(x - 0.2, [default.get(n, 0.0) for n in names], 0.4, label="default")
    ax.bar(x + 0.2, [fitted.get(n, 0.0) for n in names], 0.4, label="fitted")
    ax.set_xticks(x, names, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("top-1")
    ax.set_ylim(0, 1)
    ax.legend()
    fig.tight_layout()
    return _save(plt, fig, path)
