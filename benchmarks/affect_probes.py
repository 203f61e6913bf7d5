"""How does a text affect head rate everyday first-person events?

Fifty sentences written for this benchmark (never used to train or select a head):
twenty clearly good events, twenty clearly bad ones, ten neutral errands. Most say what
happened, not how it felt ("We finally bought our first house"), which is how agents
store memories. For each head it prints the share of good / bad events rated with the
right sign and beyond +-0.3 (a clear rating on this library's valence axis), the mean
valence of each group, the neutral events' mean |valence|, and two sentences named
in the service issue.

Usage: python benchmarks/affect_probes.py [--head PATH ...] [--json]
       (no --head: the shipped head; give several to compare them side by side)
Needs the MiniLM weights (`make minilm`); about 10 s.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from emotional_memory.affect_rater import TextAffectRater
from emotional_memory.appraisal_embedding import load_affect_head
from emotional_memory.embedders import MiniLMEmbedder

GOOD = (
    "I adopted a cat named Miso.",
    "We finally bought our first house after years of saving.",
    "My sister gave birth to a healthy baby girl this morning.",
    "I got the job offer from the company I applied to last month.",
    "The biopsy came back benign.",
    "My daughter took her first steps today.",
    "I passed my driving test on the first try.",
    "We got engaged on the beach at sunset.",
    "My best friend flew in to surprise me for my birthday.",
    "I finished my first marathon.",
    "The bank approved our loan for the bakery.",
    "My paper was accepted at the conference.",
    "Grandma came home from the hospital today.",
    "We spent the weekend hiking with the kids and roasting marshmallows.",
    "I got a raise and a promotion to team lead.",
    "My son was accepted into his dream university.",
    "I reconnected with an old friend I hadn't seen in ten years.",
    "We rescued a puppy from the shelter.",
    "The surgery went well and Dad is recovering.",
    "I learned to play my first song on the guitar.",
)
BAD = (
    "My grandfather died last night.",
    "I was laid off this morning along with half my team.",
    "Our house was broken into while we were on holiday.",
    "The vet said our dog has cancer.",
    "My flight was cancelled and I missed my brother's wedding.",
    "I failed the bar exam for the second time.",
    "My wife and I are getting divorced.",
    "I crashed my car on the way to work.",
    "My landlord is evicting us at the end of the month.",
    "The doctor found a lump in my mother's breast.",
    "I lost my wallet with my passport on the train.",
    "Our startup ran out of money and shut down.",
    "My best friend stopped talking to me after the argument.",
    "The basement flooded and ruined all our photo albums.",
    "I was diagnosed with diabetes.",
    "My cat was hit by a car.",
    "I missed the deadline and the client cancelled the contract.",
    "My father has been moved to hospice care.",
    "Someone stole my bike from outside the library.",
    "The kids were sick all week and I barely slept.",
)
NEUTRAL = (
    "I went to the supermarket and bought milk.",
    "The meeting was moved to Thursday at three.",
    "I took the bus to work today.",
    "We changed the printer cartridge in the office.",
    "I read the news over breakfast.",
    "The train leaves at 8:15 from platform two.",
    "I updated my phone's operating system.",
    "My neighbour repainted his fence grey.",
    "I filed the quarterly report.",
    "We had pasta for dinner.",
)


def probe(rater: TextAffectRater) -> dict[str, Any]:
    """Rate the fifty sentences and summarise.

    Args:
        rater: the rater under test.

    Returns:
        A flat dict of the summary figures (see the module docstring).
    """
    rated = rater.rate_affect([*GOOD, *BAD, *NEUTRAL])
    v = np.array([a.valence for a in rated])
    good, bad, neutral = v[: len(GOOD)], v[len(GOOD) : len(GOOD) + len(BAD)], v[-len(NEUTRAL):]
    return {
        "good_right_sign": float(np.mean(good > 0)),
        "good_beyond_0.3": float(np.mean(good > 0.3)),
        "good_mean": round(float(good.mean()), 3),
        "bad_right_sign": float(np.mean(bad < 0)),
        "bad_beyond_0.3": float(np.mean(bad < -0.3)),
        "bad_mean": round(float(bad.mean()), 3),
        "neutral_mean_abs": round(float(np.abs(neutral).mean()), 3),
        "miso": round(float(good[0]), 3),
        "grandfather": round(float(bad[0]), 3),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (see the module docstring).

    Args:
        argv: command-line arguments (``None``: ``sys.argv``).

    Returns:
        Exit status 0.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--head", action="append", default=None,
                        help="an affect head .npz (repeatable; default: the shipped head)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    for head in args.head or []:
        if not Path(head).is_file():
            parser.error(f"--head {head}: no such file")
    embedder = MiniLMEmbedder()
    heads = args.head or [None]
    rows = {str(h or "shipped"): probe(TextAffectRater(embedder, load_affect_head(h)))
            for h in heads}
    if args.json:
        print(json.dumps(rows))
        return 0
    keys = list(next(iter(rows.values())))
    width = max(len(k) for k in keys)
    print(f"{'':{width}}  " + "  ".join(f"{name[-24:]:>24}" for name in rows))
    for key in keys:
        print(f"{key:{width}}  " + "  ".join(f"{row[key]:>24}" for row in rows.values()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
