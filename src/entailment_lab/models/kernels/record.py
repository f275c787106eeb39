"""Which fast path ran, counted per process: what ``results.json`` records as the numeric path
(``entailment_lab.numeric_path``). A count costs a dictionary update a call."""

from __future__ import annotations

from collections import Counter

_calls: Counter[tuple[str, str]] = Counter()


def note(path: str, implementation: str) -> None:
    """Count one call of ``path`` (e.g. ``"interaction"``) computed by ``implementation``."""
    _calls[path, implementation] += 1


def calls() -> Counter[tuple[str, str]]:
    """A copy of the counts so far; ``calls() - earlier`` is what ran in between."""
    return Counter(_calls)
