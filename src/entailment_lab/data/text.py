"""Tokenizer and vocabulary.

Tokenizer: SNLI's released sentences are raw text (``...to go packages.``) while the papers'
pipelines (and the SentEval copies) use Penn-Treebank tokens (``packages .``, ``it 's``,
``do n't``). ``tokenize`` is a small regex version of the PTB rules that maps both forms to
the same tokens, so a model trained on one reads the other. Lower-casing is a config choice
(``data.lowercase``): GloVe 6B is lower-case only; GloVe 840B is cased, and the Table 2
experiment files keep case for it. Embedding look-up falls back to the lower-cased word either
way (see ``embeddings.py``).

Functions here are module-level (not closures) so that ``datasets.map`` can pickle them cheaply
for ``num_proc`` workers and fingerprint them for its cache.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

PAD, UNK = "<pad>", "<unk>"
PAD_ID, UNK_ID = 0, 1

# PTB-style rules (after Stanford's tokenizer.sed used for SNLI/SentEval):
#  - split clitics: "n't", "'s", "'re", "'ve", "'ll", "'d", "'m"
#  - split punctuation except inside numbers (3.5, 1,000) and word-internal hyphens/periods
#    of abbreviations (U.S.) are kept; a sentence-final period is split off.
_TOKEN_RE = re.compile(
    r"""
    (?:[A-Za-z]\.){2,}            # abbreviations: U.S. a.m.
  | \d+(?:[.,:]\d+)+             # numbers with separators: 3.5 1,000 10:30
  | (?i:n't)                     # clitic n't (do|n't)
  | '(?i:s|re|ve|ll|d|m)\b       # other clitics
  | ``|''|--|\.\.\.              # PTB quotes, dashes, ellipsis
  | \w+(?:[-']\w+)*?(?=n't\b)    # stem before n't: "do" of "don't"
  | \w+(?:-\w+)*                 # words, with inner hyphens: to-go, well-known
  | [^\w\s]                      # any other single symbol: . , ! ? " ( ) ...
    """,
    re.VERBOSE,
)


def tokenize(text: str, lowercase: bool = False) -> list[str]:
    """Split ``text`` into PTB-like tokens; optionally lower-case them."""
    if lowercase:
        text = text.lower()
    return _TOKEN_RE.findall(text)


class Vocabulary:
    """Token <-> id map with ``<pad>`` = 0 and ``<unk>`` = 1.

    Built from token counts of the configured splits (``data.vocab_splits``); stored inside
    every checkpoint (``itos``) so evaluation and prediction reproduce the training ids.
    """

    def __init__(self, itos: Sequence[str]) -> None:
        if list(itos[:2]) != [PAD, UNK]:
            raise ValueError(f"a vocabulary must start with {PAD!r}, {UNK!r}; got {itos[:2]!r}")
        self.itos: list[str] = list(itos)
        self.stoi: dict[str, int] = {w: i for i, w in enumerate(self.itos)}
        if len(self.stoi) != len(self.itos):
            raise ValueError("vocabulary has duplicate tokens")

    @classmethod
    def build(
        cls, token_lists: Iterable[Sequence[str]], min_freq: int = 1, max_size: int | None = None
    ) -> Vocabulary:
        """Vocabulary of tokens seen at least ``min_freq`` times, most frequent first."""
        counts: Counter[str] = Counter()
        for tokens in token_lists:
            counts.update(tokens)
        return cls.from_counts(counts, min_freq, max_size)

    @classmethod
    def from_counts(
        cls, counts: Mapping[str, int], min_freq: int = 1, max_size: int | None = None
    ) -> Vocabulary:
        """Vocabulary from token counts, most frequent first (ties alphabetical)."""
        # Sort by (-count, token) so the id order is deterministic across runs and processes.
        words = [w for w, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
                 if c >= min_freq and w not in (PAD, UNK)]
        if max_size is not None:
            words = words[: max(0, max_size - 2)]
        return cls([PAD, UNK, *words])

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, tokens: Sequence[str]) -> list[int]:
        """Token ids; unknown tokens map to ``<unk>``."""
        get = self.stoi.get
        return [get(t, UNK_ID) for t in tokens]

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Tokens of ``ids`` (padding included, if present)."""
        return [self.itos[i] for i in ids]
