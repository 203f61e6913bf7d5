"""End-to-end demo on built-in data: no network, no ``../shared`` needed.

Run with ``python -m emotional_memory.demo`` (or ``make demo``). Part 1 encodes a
small journal with affect through the real engine, then asks the same question
under two different moods and prints each result's six raw signals, weights and
total. Part 2 fits the scoring model with optax on the project's own labelled
scenarios and compares default and fitted rankings through the engine.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import timedelta

from emotional_memory import CoreAffect, EmotionalMemory
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.replay import TickClock
from emotional_memory.retrieval import SIGNAL_FIELDS, RetrievalExplanation
from emotional_memory.stores.memory import InMemoryStore

JOURNAL: list[tuple[str, float, float]] = [
    ("Started the new job; the team lunch was warm and funny.", 0.7, 0.5),
    ("My first code review was harsh and I felt stupid all afternoon.", -0.6, 0.7),
    ("Missed the train and was late to the planning meeting.", -0.4, 0.6),
    ("Shipped my first feature; the manager thanked me in front of everyone.", 0.8, 0.7),
    ("A quiet Sunday walk by the river, nothing much on my mind.", 0.3, 0.1),
    ("The production outage at 2am: pager screaming, hands shaking.", -0.9, 0.95),
    ("We fixed the outage together and laughed about it over breakfast.", 0.6, 0.5),
    ("Got critical feedback on my design doc, but it was fair and useful.", 0.1, 0.4),
    ("Dinner with an old friend, talking about how work has been going.", 0.6, 0.3),
    ("Lay awake worrying that the team thinks I am not good enough.", -0.7, 0.6),
]

QUERY = "How has work been going for me?"
SHORT = ("sem", "mood", "affect", "moment", "recency", "reson")


def _print_results(title: str, results: list[RetrievalExplanation]) -> None:
    print(f"\n=== {title} ===")
    header = " ".join(f"{s:>7}" for s in SHORT)
    print(f"{'#':>2} {'total':>7} | raw: {header}")
    for e in results:
        raw = e.breakdown.raw_signals.as_tuple()
        print(f"{e.pass2_rank:>2} {e.score:7.4f} | raw: " + " ".join(f"{v:7.3f}" for v in raw))
        print(f"   {'':>7} |  w : " + " ".join(
            f"{v:7.3f}" for v in e.breakdown.weights.as_tuple()))
        print(f"   -> {e.memory.content}")


def journal_demo() -> None:
    """Encode the built-in journal and retrieve under a low and a good mood."""
    clock = TickClock(step=timedelta(minutes=30))
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=256), clock=clock)
    for text, valence, arousal in JOURNAL:
        # The event's own affect drives the state once, so momentum is real.
        engine.encode(text, affect=CoreAffect(valence=valence, arousal=arousal))
    print(f"Encoded {len(engine)} journal entries. Signals: {', '.join(SIGNAL_FIELDS)}.")
    baseline = engine.save_state()
    start = engine.get_state().core_affect

    for label, target in (
        ("low mood (valence -0.8, arousal 0.7)", CoreAffect(valence=-0.8, arousal=0.7)),
        ("good mood (valence 0.8, arousal 0.3)", CoreAffect(valence=0.8, arousal=0.3)),
    ):
        engine.load_state(baseline)
        for step in range(1, 9):  # drift towards the new feeling: mood and momentum follow
            engine.set_affect(start.lerp(target, step / 8))
        mood = engine.get_current_mood()
        title = f"'{QUERY}' in a {label}; mood v={mood.valence:+.2f} a={mood.arousal:.2f}"
        _print_results(title, engine.retrieve_with_explanations(QUERY, top_k=4))


def fitting_demo() -> None:
    """Fit base weights and gates on the built-in scenarios; compare through the engine."""
    from emotional_memory.data import load_builtin_dataset
    from emotional_memory.learn import build_recall_batch, fit_auto
    from emotional_memory.replay import replay_dataset, summarize

    data = load_builtin_dataset()
    embedder = HashingEmbedder(dim=384)
    print(f"\n=== Fitting on the built-in labelled set ({len(data['scenarios'])} scenarios) ===")
    batch, info = build_recall_batch(data, embedder, progress=True)
    result = fit_auto(batch, info)
    default = summarize(replay_dataset(data, embedder))
    fitted = summarize(replay_dataset(data, embedder, result.config))
    print(f"chosen l2={result.selection['chosen']['l2']} "
          f"temperature={result.selection['chosen']['temperature']}, kept step "
          f"{result.best_step}")
    print(f"{'':24}{'default':>9}{'fitted':>9}")
    for key in ("top1", "hit_at_k", "mrr"):
        print(f"{key:24}{default[key]:9.3f}{fitted[key]:9.3f}")
    for name, value in default["by_challenge"].items():
        print(f"  {name:22}{value:9.3f}{fitted['by_challenge'][name]:9.3f}")
    weights = ", ".join(f"{w:.3f}" for w in result.config.retrieval.base_weights)
    print(f"fitted base weights: [{weights}] (in-sample; `python -m training cv` for "
          "out-of-fold numbers)")


def main(argv: Sequence[str] | None = None) -> None:
    """Run both parts of the demo (it takes no arguments but ``--help``).

    Args:
        argv: the command line's arguments (default ``sys.argv[1:]``).
    """
    argparse.ArgumentParser(
        prog="python -m emotional_memory.demo",
        description="Encode a built-in journal, retrieve under two moods, then fit the "
        "scoring model on the built-in labelled scenarios (no network, no files).",
    ).parse_args(argv)
    journal_demo()
    fitting_demo()


if __name__ == "__main__":
    main()
