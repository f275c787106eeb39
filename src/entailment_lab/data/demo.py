"""A small synthetic entailment corpus written by the project (never copied from real data).

It exists so that a fresh clone can train and test a model end to end offline in a couple of
minutes, and so that tests have fixtures. Pairs are generated from templates in the
SNLI schema (``premise``, ``hypothesis``, ``label``: 0 entailment, 1 neutral, 2 contradiction):

- entailment: the hypothesis generalises the premise (hypernym subject, dropped object or
  place, "someone"), e.g. ``a young woman is riding a bike in the park .`` -> ``a person is
  riding a bike .``
- contradiction: another activity for the same subject, "nobody", or a swapped place.
- neutral: the hypothesis adds unverifiable detail (purpose, company, an adjective).

All words are common English words found in GloVe. Numbers are illustrative only: accuracy
on this corpus says nothing about SNLI.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

from entailment_lab.data.datamodule import TextDataModule

SUBJECTS = {  # subject -> hypernym
    "man": "person", "woman": "person", "boy": "child", "girl": "child", "dog": "animal",
    "cat": "animal", "chef": "person", "student": "person", "musician": "person",
    "soldier": "person", "farmer": "person", "doctor": "person",
}
ADJECTIVES = ["young", "old", "tall", "short", "happy", "tired", "small", "busy"]
ACTIVITIES = [  # (verb phrase with object, bare verb phrase)
    ("riding a bike", "riding"), ("playing a guitar", "playing"), ("reading a book", "reading"),
    ("eating an apple", "eating"), ("painting a wall", "painting"), ("carrying a box", "carrying"),
    ("kicking a ball", "kicking"), ("washing a car", "washing"), ("cooking a meal", "cooking"),
    ("climbing a tree", "climbing"),
]
STATIC = ["sleeping", "sitting quietly", "lying in bed"]
PLACES = {"park": "outside", "street": "outside", "beach": "outside", "garden": "outside",
          "kitchen": "inside", "office": "inside", "library": "inside", "hall": "inside"}
PURPOSES = ["for a competition", "for money", "to impress a friend", "for the first time",
            "before dinner", "after work"]
COMPANY = ["with a friend", "with his family", "with her brother", "with a group"]


def _pair(rng: random.Random, label: int) -> tuple[str, str]:
    subj = rng.choice(list(SUBJECTS))
    adj = rng.choice(ADJECTIVES)
    act, bare = rng.choice(ACTIVITIES)
    place = rng.choice(list(PLACES))
    premise = f"a {adj} {subj} is {act} in the {place} ."
    if label == 0:
        hyp = rng.choice([
            f"a {SUBJECTS[subj]} is {act} .",
            f"a {subj} is {bare} .",
            f"someone is {act} {PLACES[place]} .",
            f"a {adj} {subj} is {PLACES[place]} .",
            f"a {SUBJECTS[subj]} is {bare} in the {place} .",
        ])
    elif label == 1:
        other_adj = rng.choice([a for a in ADJECTIVES if a != adj])
        hyp = rng.choice([
            f"a {subj} is {act} {rng.choice(PURPOSES)} .",
            f"a {subj} is {act} {rng.choice(COMPANY)} .",
            f"a {other_adj} {subj} is {act} .",
            f"the {subj} is {bare} {rng.choice(PURPOSES)} .",
        ])
    else:
        other_act = rng.choice([a for a, _ in ACTIVITIES if a != act])
        other_place = rng.choice([p for p, side in PLACES.items() if side != PLACES[place]])
        hyp = rng.choice([
            f"a {subj} is {rng.choice(STATIC)} .",
            f"nobody is {act} .",
            f"a {adj} {subj} is {other_act} .",
            f"a {subj} is {bare} in the {other_place} .",
        ])
    return premise, hyp


def demo_pairs(n: int, seed: int) -> list[dict]:
    """``n`` labelled pairs (balanced classes), deterministic for a seed."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        label = i % 3
        premise, hypothesis = _pair(rng, label)
        rows.append({"premise": premise, "hypothesis": hypothesis, "label": label})
    rng.shuffle(rows)
    return rows


def write_jsonl(rows: list[dict], path: Path) -> Path:
    """Write rows as (gzip-compressed if ``.gz``) JSON Lines, atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(tmp, "wt", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    tmp.replace(path)
    return path


SIZES = {"train": 3000, "validation": 300, "test": 300}


def write_demo_corpus(directory: str | Path, sizes: dict[str, int] | None = None,
                      seed: int = 1234) -> dict[str, str]:
    """Write ``train/validation/test.jsonl`` under ``directory`` (if absent); return the paths."""
    directory = Path(directory)
    paths = {}
    for offset, (split, n) in enumerate((sizes or SIZES).items()):
        path = directory / f"{split}.jsonl"
        if not path.exists():
            write_jsonl(demo_pairs(n, seed + offset), path)
        paths[split] = str(path)
    return paths


class DemoDataModule(TextDataModule):
    """``TextDataModule`` over the generated demo corpus (written on first use)."""

    def __init__(self, directory: str, **kwargs: object) -> None:
        self.directory = directory
        kwargs.pop("hub_name", None)  # the demo data is always the generated local files
        kwargs["files"] = {s: f"{directory}/{s}.jsonl" for s in SIZES}
        super().__init__(**kwargs)

    def prepare_data(self) -> None:
        write_demo_corpus(self.directory)

    def setup(self, stage: str | None = None) -> None:
        write_demo_corpus(self.directory)  # also when prepare_data was not called (eval, tests)
        super().setup(stage)
