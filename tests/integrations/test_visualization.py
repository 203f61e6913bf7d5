"""visualization: every figure renders to a non-trivial PNG and draws the model's values."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("matplotlib", reason="the viz extra is not installed")

import matplotlib

matplotlib.use("Agg")

from matplotlib.figure import Figure
from matplotlib.image import imread

from emotional_memory import EmotionalMemory, InMemoryStore
from emotional_memory import visualization as viz
from emotional_memory.appraisal import AppraisalVector
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.engine import EmotionalMemoryConfig
from emotional_memory.models import ResonanceLink, consolidation_strength


def _png(fig: Figure, path: Path) -> np.ndarray:
    fig.savefig(path, dpi=60)
    assert path.stat().st_size > 5_000
    img = imread(path)
    assert img.ndim == 3 and img.shape[0] > 150 and img.shape[1] > 150
    flat = img[..., :3].reshape(-1, 3)
    # non-trivial: many distinct colours, and a good share of non-background pixels
    assert len(np.unique((flat * 255).astype(np.uint8), axis=0)) > 20
    assert (np.abs(flat - flat[0]).sum(axis=1) > 0.05).mean() > 0.01
    return img


class Clock:
    def __init__(self) -> None:
        self.t = datetime(2026, 2, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.t += timedelta(minutes=7)
        return self.t


@pytest.fixture(scope="module")
def engine() -> EmotionalMemory:
    em = EmotionalMemory(InMemoryStore(), HashingEmbedder(), clock=Clock())
    for text in [
        "We got engaged on the beach at sunset",
        "The beach party was loud and fun",
        "I was furious when the flight got cancelled",
        "A calm evening reading by the fire",
        "Our beach house flooded in the storm",
    ]:
        em.encode(text)
    em.retrieve("beach", top_k=3)
    em.retrieve("beach", top_k=3)  # strengthens resonance links
    return em


def test_circumplex(engine: EmotionalMemory, tmp_path: Path) -> None:
    _png(viz.plot_circumplex(engine.list_all()), tmp_path / "a.png")
    _png(viz.plot_circumplex([(0.5, 0.8, 0.9), (-0.7, 0.2, 0.3)]), tmp_path / "b.png")


def test_decay_curves_draw_the_decay_model(tmp_path: Path) -> None:
    fig = viz.plot_decay_curves(arousal_values=(0.0, 1.0), retrieval_counts=(0, 10))
    _png(fig, tmp_path / "decay.png")
    lines = fig.axes[0].get_lines()
    assert len(lines) == 4
    final = [line.get_ydata()[-1] for line in lines]  # strength after 30 days
    # high arousal and many retrievals decay less
    assert final[3] > final[0] and final[1] > final[0] and final[2] > final[0]
    assert all(np.all(np.diff(line.get_ydata()) <= 1e-12) for line in lines)


def test_yerkes_dodson_is_consolidation_strength(tmp_path: Path) -> None:
    fig = viz.plot_yerkes_dodson(mood_arousal=0.6)
    _png(fig, tmp_path / "yd.png")
    line = fig.axes[0].get_lines()[0]
    xs, ys = line.get_xdata(), line.get_ydata()
    assert ys[50] == consolidation_strength(float(xs[50]), 0.6)
    assert 0 < int(np.argmax(ys)) < len(ys) - 1  # an inverted U


def test_retrieval_radar_and_breakdown(engine: EmotionalMemory, tmp_path: Path) -> None:
    (exp,) = engine.retrieve_with_explanations("beach sunset", top_k=1)
    _png(viz.plot_retrieval_radar(exp), tmp_path / "radar.png")
    _png(viz.plot_retrieval_radar([0.9, 0.1, 0.4, 0.2, 0.7, 0.3]), tmp_path / "radar2.png")
    with pytest.raises(ValueError):
        viz.plot_retrieval_radar([0.1, 0.2])
    fig = viz.plot_signal_breakdown(exp)
    _png(fig, tmp_path / "breakdown.png")
    contributions = [p.get_width() for p in fig.axes[0].containers[2]]
    assert contributions == pytest.approx(
        list(exp.breakdown.weighted_signals.model_dump().values())
    )
    assert sum(contributions) == pytest.approx(exp.breakdown.total_score)


def test_mood_evolution(engine: EmotionalMemory, tmp_path: Path) -> None:
    history = engine.get_state().history
    assert len(history) >= 2
    _png(viz.plot_mood_evolution(history), tmp_path / "mood.png")
    series = [(60.0 * i, 0.1 * i, 0.5, 0.4) for i in range(8)]
    fig = viz.plot_mood_evolution(series)
    _png(fig, tmp_path / "mood2.png")
    assert list(fig.axes[0].get_lines()[0].get_ydata()) == [s[1] for s in series]


def test_adaptive_weights_heatmap(tmp_path: Path) -> None:
    fig = viz.plot_adaptive_weights_heatmap(resolution=6)
    _png(fig, tmp_path / "heat.png")
    images = [ax.get_images()[0].get_array() for ax in fig.axes if ax.get_images()]
    assert len(images) == 6
    total = np.sum([np.asarray(im) for im in images], axis=0)
    np.testing.assert_allclose(total, 1.0, atol=1e-9)  # weights sum to 1 in every mood
    assert max(float(np.ptp(im)) for im in images) > 0.01  # and they move with mood
    with pytest.raises(ValueError):
        viz.plot_adaptive_weights_heatmap(ax=fig.axes[0])


def test_resonance_network(engine: EmotionalMemory, tmp_path: Path) -> None:
    memories = engine.list_all()
    assert any(m.tag.resonance_links for m in memories)
    _png(viz.plot_resonance_network(memories), tmp_path / "net.png")
    links = [
        ResonanceLink(source_id="a", target_id="b", strength=0.9, link_type="semantic"),
        ResonanceLink(source_id="b", target_id="c", strength=0.3, link_type="emotional"),
    ]
    fig = viz.plot_resonance_network(links, {"a": "first"})
    _png(fig, tmp_path / "net2.png")
    assert "first" in [t.get_text() for t in fig.axes[0].texts]


def test_appraisal_radar(tmp_path: Path) -> None:
    vec = AppraisalVector(
        novelty=0.8,
        goal_relevance=-0.5,
        coping_potential=0.3,
        norm_congruence=0.1,
        self_relevance=0.9,
    )
    fig = viz.plot_appraisal_radar(vec)
    _png(fig, tmp_path / "appr.png")
    ys = list(fig.axes[0].get_lines()[0].get_ydata())
    # each range to [0, 1]: self_relevance (like coping_potential) lies in [0, 1]
    assert ys[:5] == pytest.approx([0.9, 0.25, 0.3, 0.55, 0.9])


def test_appraisal_radar_generic_dict_and_bad_types(tmp_path: Path) -> None:
    from emotional_memory.appraisal_schema import DIRECT_VAD_SCHEMA, GenericAppraisalVector

    dims = DIRECT_VAD_SCHEMA.dimensions
    ratings = {d.name: d.range[0] + 0.25 * (d.range[1] - d.range[0]) for d in dims}
    fig = viz.plot_appraisal_radar(GenericAppraisalVector(ratings, DIRECT_VAD_SCHEMA))
    assert list(fig.axes[0].get_lines()[0].get_ydata())[: len(dims)] == pytest.approx(
        [0.25] * len(dims)
    )
    fig = viz.plot_appraisal_radar({"novelty": 0.4, "self_relevance": -0.2})  # as given
    assert list(fig.axes[0].get_lines()[0].get_ydata()) == pytest.approx([0.4, -0.2, 0.4])
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["Novelty", "Self Relevance"]
    for bad in (None, 3.0, "novelty"):
        with pytest.raises(TypeError, match="AppraisalVector, GenericAppraisalVector, or dict"):
            viz.plot_appraisal_radar(bad)


@pytest.mark.parametrize(
    ("scores", "labels", "match"),
    [
        ([0.1, 0.2, 0.3], viz.SIGNAL_LABELS, "same length, got 3 and 6"),
        ([], [], "at least one value"),
        ([0.1, 0.2, 1.5, 0.1, 0.1, 0.1], viz.SIGNAL_LABELS, r"in \[0, 1\], got 1.5"),
        ([float("nan")] * 6, viz.SIGNAL_LABELS, r"in \[0, 1\], got nan"),
        ([-0.01] * 6, viz.SIGNAL_LABELS, r"in \[0, 1\]"),
    ],
)
def test_retrieval_radar_argument_checks(
    scores: list[float], labels: list[str], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        viz.plot_retrieval_radar(scores, labels)


def test_heatmap_needs_six_base_weights() -> None:
    with pytest.raises(ValueError, match="base_weights must contain 6 values, got 5"):
        viz.plot_adaptive_weights_heatmap(base_weights=[0.2] * 5)


def test_fitted_weights_and_learning_curves(tmp_path: Path) -> None:
    fitted = EmotionalMemoryConfig.model_validate(
        {"retrieval": {"base_weights": [0.6, 0.1, 0.1, 0.1, 0.05, 0.05]}}
    )
    _png(viz.plot_fitted_weights(fitted), tmp_path / "fit.png")
    history: dict[str, Any] = {
        "train_loss": list(np.linspace(1.0, 0.3, 40)),
        "val_loss": list(np.linspace(1.1, 0.45, 40)),
        "val_top1": list(np.linspace(0.2, 0.7, 40)),
    }
    fig = viz.plot_learning_curves(history)
    _png(fig, tmp_path / "curves.png")
    assert len(fig.axes) == 2  # accuracy on its own axis


def test_draws_into_given_axes(tmp_path: Path) -> None:
    fig = Figure(figsize=(10, 4))
    left = fig.add_subplot(1, 2, 1)
    right = fig.add_subplot(1, 2, 2, projection="polar")
    assert viz.plot_yerkes_dodson(ax=left) is fig
    assert viz.plot_retrieval_radar([0.2] * 6, ax=right) is fig
    _png(fig, tmp_path / "both.png")


def test_signal_breakdown_shows_the_lexical_signal_when_on(tmp_path: Path) -> None:
    config = EmotionalMemoryConfig.model_validate({"retrieval": {"lexical_weight": 0.3}})
    em = EmotionalMemory(InMemoryStore(), HashingEmbedder(), config=config, clock=Clock())
    em.encode("The harbour lights at night")
    em.encode("Lunch with my brother")
    (exp,) = em.retrieve_with_explanations("harbour lights", top_k=1)
    assert exp.breakdown.lexical_weight is not None
    fig = viz.plot_signal_breakdown(exp)
    _png(fig, tmp_path / "lexical.png")
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()][-1] == "Lexical"
    contributions = [p.get_width() for p in fig.axes[0].containers[2]]
    assert len(contributions) == 7
    assert sum(contributions) == pytest.approx(exp.breakdown.total_score)


def test_appraisal_radar_refuses_an_empty_dict() -> None:
    with pytest.raises(ValueError, match="appraisal must hold at least one dimension"):
        viz.plot_appraisal_radar({})


@pytest.mark.parametrize(
    ("weights", "error", "match"),
    [
        ([0.2, 0.2, float("nan"), 0.2, 0.2, 0.2], ValueError, r"base_weights\[2\]"),
        ([0.2, 0.2, 0.2, 0.2, 0.2, float("inf")], ValueError, r"base_weights\[5\]"),
        ("abcdef", TypeError, "base_weights"),
    ],
)
def test_heatmap_refuses_non_finite_base_weights(
    weights: Any, error: type[Exception], match: str
) -> None:
    """A NaN weight drew an all-blank figure without a word."""
    with pytest.raises(error, match=match):
        viz.plot_adaptive_weights_heatmap(base_weights=weights, resolution=3)


def test_heatmap_resolution_must_be_an_integer() -> None:
    with pytest.raises(TypeError, match="resolution must be an int"):
        viz.plot_adaptive_weights_heatmap(resolution=2.5)  # type: ignore[arg-type]
    fig = viz.plot_adaptive_weights_heatmap(
        base_weights=[-0.1, 0.3, 0.2, 0.2, 0.2, 0.2], resolution=np.int64(3)  # type: ignore[arg-type]
    )
    assert len(fig.axes) == 12  # six panels and their colour bars


def test_heatmap_cells_are_the_engines_weights_and_resolution_is_bounded() -> None:
    """Each cell was one kernel call in a Python loop, and the resolution had no upper
    bound: 2,000 asked for four million calls (hours, holding the caller)."""
    from emotional_memory.decay import DecayConfig
    from emotional_memory.mood import MoodField
    from emotional_memory.retrieval import RetrievalConfig, mood_weights
    from emotional_memory.scoring_config import params_from_config

    base = [0.3, 0.2, 0.2, 0.1, 0.1, 0.1]
    fig = viz.plot_adaptive_weights_heatmap(base_weights=base, resolution=5)
    images = [np.asarray(ax.get_images()[0].get_array()) for ax in fig.axes if ax.get_images()]
    params = params_from_config(RetrievalConfig(), DecayConfig(), base_weights=np.array(base))
    for i, arousal in enumerate(np.linspace(0.0, 1.0, 5)):
        for j, valence in enumerate(np.linspace(-1.0, 1.0, 5)):
            mood = MoodField(valence=float(valence), arousal=float(arousal), dominance=0.5,
                             inertia=0.5, timestamp=datetime(2026, 1, 1, tzinfo=UTC))
            expected = mood_weights(params, mood)
            np.testing.assert_allclose([im[i, j] for im in images], expected, atol=1e-12)
    top = viz.MAX_HEATMAP_RESOLUTION
    for bad in (top + 1, 2_000, 1):
        with pytest.raises(ValueError, match=rf"resolution must be in \[2, {top}\], got {bad}"):
            viz.plot_adaptive_weights_heatmap(resolution=bad)
    big = viz.plot_adaptive_weights_heatmap(resolution=300)  # 90,000 cells
    assert np.asarray(big.axes[0].get_images()[0].get_array()).shape == (300, 300)


def test_fitted_weights_refuses_no_moods() -> None:
    with pytest.raises(ValueError, match="moods must hold at least one mood"):
        viz.plot_fitted_weights(EmotionalMemoryConfig(), moods={})


def test_bad_input_leaves_a_given_axes_untouched() -> None:
    """A value refused part-way must not leave half a figure in the caller's Axes."""
    fig = Figure()
    axes = fig.add_subplot(1, 1, 1)
    with pytest.raises(ValueError, match="retrieval_count"):
        viz.plot_decay_curves(retrieval_counts=(0, -1), ax=axes)
    with pytest.raises(ValueError, match="could not convert"):
        viz.plot_learning_curves({"train_loss": [1.0, 0.5], "val_top1": ["x"]}, ax=axes)
    assert axes.get_lines() == [] and len(fig.axes) == 1


def test_resonance_network_refuses_what_it_cannot_draw(engine: EmotionalMemory) -> None:
    """Explanations (or ids) were skipped without a word: an empty network was drawn."""
    explanations = engine.retrieve_with_explanations("beach", top_k=2)
    with pytest.raises(TypeError, match=r"links\[0\] must be a ResonanceLink or a Memory"):
        viz.plot_resonance_network(explanations)
    with pytest.raises(TypeError, match=r"links\[1\].*got str"):
        viz.plot_resonance_network([engine.list_all()[0], "abc"])
    fig = viz.plot_resonance_network([e.memory for e in explanations])
    assert len(fig.axes[0].texts) >= 2  # the memories are nodes


def test_mood_evolution_refuses_mixed_time_kinds() -> None:
    """A datetime first and seconds after were plotted as if on one axis, silently."""
    t0 = datetime(2026, 2, 1, tzinfo=UTC)
    mixed: list[Any] = [(t0, 0.1, 0.5, 0.4), (120.0, 0.2, 0.5, 0.4)]
    with pytest.raises(TypeError, match="all datetimes or all numbers"):
        viz.plot_mood_evolution(mixed)
    with pytest.raises(TypeError, match="all datetimes or all numbers"):
        viz.plot_mood_evolution(mixed[::-1])
    with pytest.raises(ValueError, match=r"history\[1\] must be"):
        viz.plot_mood_evolution([(0.0, 0.1, 0.5, 0.4), (60.0, 0.2)])


def test_circumplex_names_a_point_it_cannot_read(engine: EmotionalMemory) -> None:
    with pytest.raises(ValueError, match=r"memories\[1\] must be .*got 2 values"):
        viz.plot_circumplex([(0.1, 0.5, 0.5), (0.2, 0.3)])
    (explanation,) = engine.retrieve_with_explanations("beach", top_k=1)
    with pytest.raises(TypeError, match=r"memories\[0\] must be a Memory or .*RetrievalExpl"):
        viz.plot_circumplex([explanation])
    rows = np.array([[0.1, 0.5, 0.5], [-0.4, 0.8, 0.9]])  # array rows are points too
    fig = viz.plot_circumplex(rows)
    np.testing.assert_allclose(fig.axes[0].collections[0].get_offsets(), rows[:, :2])


def test_fitted_weights_names_an_argument_that_is_not_a_config() -> None:
    """A FitResult (or None) failed with AttributeError: no attribute 'retrieval'."""
    from emotional_memory.learn.training import FitResult
    from emotional_memory.scoring_config import params_from_config

    config = EmotionalMemoryConfig()
    result = FitResult(config=config, params=params_from_config(config.retrieval, config.decay))
    with pytest.raises(TypeError, match=r"fitted must be an EmotionalMemoryConfig.*\.config"):
        viz.plot_fitted_weights(result)
    with pytest.raises(TypeError, match="fitted must be an EmotionalMemoryConfig, got NoneType"):
        viz.plot_fitted_weights(None)
    with pytest.raises(TypeError, match="baseline must be an EmotionalMemoryConfig, got dict"):
        viz.plot_fitted_weights(result.config, {"retrieval": {}})


@pytest.mark.parametrize("history", [None, 3.0, [0.5, 0.4]], ids=["None", "float", "list"])
def test_learning_curves_names_a_history_it_cannot_read(history: Any) -> None:
    """None failed with AttributeError: 'NoneType' object has no attribute 'items'."""
    with pytest.raises(TypeError, match="history must be a FitResult or a mapping"):
        viz.plot_learning_curves(history)


@pytest.mark.parametrize("strength", [1.5, -0.1, float("nan")])
def test_decay_curves_name_initial_strength(strength: float) -> None:
    """The error named the tag's consolidation_strength, not the argument given."""
    with pytest.raises(ValueError, match="initial_strength"):
        viz.plot_decay_curves(initial_strength=strength)


def test_radars_take_arrays_as_they_take_lists() -> None:
    """An array of five scores with five labels was refused: 'expected 6 signal values';
    an array of five appraisal values: 'appraisal must be AppraisalVector, ...'."""
    scores, labels = [0.1, 0.2, 0.3, 0.4, 0.5], list("abcde")
    as_list = viz.plot_retrieval_radar(scores, labels).axes[0].get_lines()[0].get_ydata()
    as_array = viz.plot_retrieval_radar(np.array(scores), labels).axes[0].get_lines()[0]
    np.testing.assert_array_equal(as_array.get_ydata(), as_list)
    with pytest.raises(ValueError, match="scores must be in"):
        viz.plot_retrieval_radar(np.array([0.1, 0.2, 0.3, 0.4, 0.5, 2.0]))
    appraisal = [0.0, 0.5, 0.5, -0.5, 1.0]
    drawn = viz.plot_appraisal_radar(appraisal).axes[0].get_lines()[0].get_ydata()
    from_array = viz.plot_appraisal_radar(np.array(appraisal)).axes[0].get_lines()[0]
    np.testing.assert_array_equal(from_array.get_ydata(), drawn)
    np.testing.assert_allclose(drawn[:5], [0.5, 0.75, 0.5, 0.25, 1.0])


def test_resonance_network_labels_memories_as_documented(engine: EmotionalMemory) -> None:
    memories = engine.list_all()
    fig = viz.plot_resonance_network(memories)
    texts = {t.get_text() for t in fig.axes[0].texts}
    assert {m.content[:16] for m in memories} <= texts


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_points_that_cannot_be_drawn_are_named(bad: float) -> None:
    """A NaN / inf point was left out of the figure without a word."""
    with pytest.raises(ValueError, match=r"memories\[1\]"):
        viz.plot_circumplex([(0.1, 0.5, 0.5), (0.2, bad, 0.5)])
    with pytest.raises(ValueError, match=r"history\[1\]"):
        viz.plot_mood_evolution([(0.0, 0.1, 0.5, 0.4), (60.0, 0.2, 0.5, bad)])
    with pytest.raises(ValueError, match=r"history\[0\]"):
        viz.plot_mood_evolution([(bad, 0.1, 0.5, 0.4)])


@pytest.mark.parametrize("appraisal", [
    [0.1, float("nan"), 0.5, 0.0, 0.5],
    {"novelty": 0.2, "goal_relevance": float("inf")},
    {"novelty": float("nan")},
], ids=["sequence-nan", "dict-inf", "dict-nan"])
def test_appraisal_radar_names_a_value_it_cannot_draw(appraisal: Any) -> None:
    """A NaN / inf dimension drew a radar with a hole in it, without a word."""
    with pytest.raises(ValueError, match=r"appraisal\["):
        viz.plot_appraisal_radar(appraisal)


@pytest.mark.parametrize("call", [
    lambda: viz.plot_mood_evolution([5]),
    lambda: viz.plot_mood_evolution([None]),
], ids=["int", "None"])
def test_mood_evolution_names_an_entry_that_is_no_tuple(call: Any) -> None:
    """``TypeError: object of type 'int' has no len()`` named nothing."""
    with pytest.raises(TypeError, match=r"history\[0\]"):
        call()


@pytest.mark.parametrize("bad", [None, [1, 2, 3], "explanation"])
def test_signal_breakdown_names_what_it_cannot_read(bad: Any) -> None:
    """An AttributeError about ``raw_signals`` came out of the figure's code."""
    with pytest.raises(TypeError, match="explanation must be a RetrievalExplanation"):
        viz.plot_signal_breakdown(bad)


@pytest.mark.parametrize("mood", [(0.5,), (0.1, 0.2, 0.3), "ab", 0.5])
def test_fitted_weights_names_a_mood_that_is_no_pair(mood: Any) -> None:
    """``not enough values to unpack`` named neither the argument nor the mood."""
    with pytest.raises((TypeError, ValueError), match=r"moods\['calm'\]"):
        viz.plot_fitted_weights(EmotionalMemoryConfig(), moods={"calm": mood})


def test_learning_curves_names_a_series_that_is_not_flat() -> None:
    """A 2-d series failed inside matplotlib after the others were drawn."""
    fig = Figure()
    ax = fig.add_subplot()
    with pytest.raises(ValueError, match="history 'val_loss'"):
        viz.plot_learning_curves({"train_loss": [1.0, 0.5], "val_loss": [[1.0, 2.0]]}, ax=ax)
    assert not ax.lines


@pytest.mark.parametrize("scores", ["abcdef", None, {"semantic": 0.5}, [0.1, "x", 0.2]])
def test_retrieval_radar_names_scores_it_cannot_read(scores: Any) -> None:
    """Was "could not convert string to float: 'a'" or "'NoneType' object is not
    iterable": nothing named the argument."""
    with pytest.raises((TypeError, ValueError), match="scores"):
        viz.plot_retrieval_radar(scores)


def test_mood_evolution_names_naive_and_aware_times_mixed() -> None:
    """Was "can't subtract offset-naive and offset-aware datetimes"."""
    t0 = datetime(2026, 2, 1, tzinfo=UTC)
    naive = datetime(2026, 2, 1, 0, 5)
    with pytest.raises(TypeError, match="history times"):
        viz.plot_mood_evolution([(t0, 0.1, 0.5, 0.4), (naive, 0.2, 0.5, 0.4)])


def test_heatmap_names_base_weights_without_a_length() -> None:
    """A generator was "object of type 'generator' has no len()"."""
    with pytest.raises(TypeError, match="base_weights"):
        viz.plot_adaptive_weights_heatmap(base_weights=(w for w in [0.2] * 6))


@pytest.mark.parametrize("strength", [-3.0, 7.0])
def test_circumplex_marker_sizes_stay_drawable(strength: float) -> None:
    """A strength below -1/3 gave a negative marker area ("invalid value encountered
    in sqrt" at draw time, the point invisible); sizes follow the clipped colour scale."""
    import warnings

    fig = viz.plot_circumplex([(0.2, 0.5, strength), (0.1, 0.4, 0.5)])
    sizes = fig.axes[0].collections[0].get_sizes()
    assert np.all(sizes > 0) and sizes[0] in (40.0, 160.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig.savefig(__import__("io").BytesIO(), format="png", dpi=30)


@pytest.mark.parametrize("field", ["arousal_values", "retrieval_counts"])
def test_decay_curves_refuse_an_empty_family_by_name(field: str) -> None:
    """An empty family drew an empty figure with matplotlib's "No artists with labels"
    warning; it is refused by name, a given Axes untouched."""
    fig = Figure()
    axes = fig.add_subplot(1, 1, 1)
    with pytest.raises(ValueError, match=field):
        viz.plot_decay_curves(ax=axes, **{field: ()})
    assert axes.get_lines() == [] and axes.get_legend() is None


def test_appraisal_radar_names_a_non_finite_field_of_a_vector_like_object() -> None:
    """An object with the five fields (e.g. ``AppraisalVector.model_construct``) was
    drawn with its NaN; a NaN / inf is named ``appraisal['field']`` as for a dict."""
    bad = AppraisalVector.model_construct(
        novelty=float("nan"), goal_relevance=0.0, coping_potential=0.5,
        norm_congruence=0.0, self_relevance=0.0,
    )
    with pytest.raises(ValueError, match=r"appraisal\['novelty'\]"):
        viz.plot_appraisal_radar(bad)


def test_axes_in_a_subfigure_return_the_savable_figure(engine: EmotionalMemory) -> None:
    """An Axes inside a SubFigure gave back the SubFigure (no ``savefig``), where the
    documented return is the Figure, ready for ``fig.savefig``."""
    import io

    root = Figure(layout="constrained")
    left, right = root.subfigures(1, 2)
    fig = viz.plot_circumplex(engine.list_all(), ax=left.add_subplot(1, 1, 1))
    assert fig is root
    assert len(left.axes) == 2  # the colour bar stays beside its Axes, in the subfigure
    assert viz.plot_retrieval_radar([0.5] * 6, ax=right.add_subplot(1, 1, 1, polar=True)) is root
    fig.savefig(io.BytesIO(), format="png", dpi=30)


@pytest.mark.parametrize("labels", [(x for x in "abcdef"), "abcdef", 6])
def test_retrieval_radar_names_labels_that_are_no_sequence_of_names(labels: Any) -> None:
    """A generator was "object of type 'generator' has no len()"; a string was drawn
    one character per axis."""
    with pytest.raises(TypeError, match="labels must be a sequence"):
        viz.plot_retrieval_radar([0.5] * 6, labels)


@pytest.mark.parametrize(("call", "name"), [
    (lambda: viz.plot_circumplex(None), "memories"),  # type: ignore[arg-type]
    (lambda: viz.plot_circumplex(3), "memories"),  # type: ignore[arg-type]
    (lambda: viz.plot_mood_evolution(None), "history"),  # type: ignore[arg-type]
    (lambda: viz.plot_resonance_network(None), "links"),  # type: ignore[arg-type]
    (lambda: viz.plot_resonance_network([], node_labels="ab"), "node_labels"),  # type: ignore[arg-type]
    (lambda: viz.plot_circumplex([], ax="axes"), "ax"),  # type: ignore[arg-type]
    (lambda: viz.plot_yerkes_dodson(ax=object()), "ax"),  # type: ignore[arg-type]
])
def test_arguments_of_the_wrong_kind_are_named(call: Any, name: str) -> None:
    """A non-iterable ``memories`` / ``history`` / ``links`` was Python's own "'NoneType'
    object is not iterable", a string ``node_labels`` "dictionary update sequence
    element #0 has length 1", and a wrong ``ax`` an AttributeError."""
    with pytest.raises(TypeError, match=rf"^{name} must be"):
        call()


def test_resonance_network_names_a_link_whose_ids_are_not_text() -> None:
    """A link with integer ids was "'int' object is not subscriptable"."""
    link = ResonanceLink(source_id="a", target_id="b", strength=0.5, link_type="semantic")
    odd = link.model_copy(update={"target_id": 7})
    with pytest.raises(TypeError, match=r"links\[1\]\.target_id must be a str, got int"):
        viz.plot_resonance_network([link, odd])
