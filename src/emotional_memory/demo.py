"""End-to-end demo on built-in data: no network, no ``../shared`` needed.

Run with ``python -m emotional_memory.demo`` (or ``make demo``). It encodes a small
journal with affect through the real engine, then asks the same question under two
different moods and prints each result's six raw signals, weights and total.
"""

from __future__ import annotations

from datetime import timedelta

from emotional_memory import CoreAffect, EmotionalMemory
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.replay import TickClock
from emotional_memory.retrieval import SIGNAL_FIELDS, RetrievalExplanation
from emotional_memory.stores.in_memory import InMemoryStore

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


def main() -> None:
    """Encode the built-in journal and retrieve under a sad and a happy mood."""
    clock = TickClock(step=timedelta(minutes=30))
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=256), clock=clock)
    for text, valence, arousal in JOURNAL:
        # The event's own affect drives the state once, so momentum is real.
        engine.encode(text, affect=CoreAffect(valence=valence, arousal=arousal))
    print(f"Encoded {len(engine)} journal entries. Signals: {', '.join(SIGNAL_FIELDS)}.")
    baseline = engine.save_state()

    for label, affect in (
        ("low mood (valence -0.8, arousal 0.7)", CoreAffect(valence=-0.8, arousal=0.7)),
        ("good mood (valence 0.8, arousal 0.3)", CoreAffect(valence=0.8, arousal=0.3)),
    ):
        engine.load_state(baseline)
        for _ in range(8):  # let the mood settle towards the new feeling
            engine.set_affect(affect)
        mood = engine.get_current_mood()
        title = f"'{QUERY}' in a {label}; mood v={mood.valence:+.2f} a={mood.arousal:.2f}"
        _print_results(title, engine.retrieve_with_explanations(QUERY, top_k=4))


if __name__ == "__main__":
    main()
