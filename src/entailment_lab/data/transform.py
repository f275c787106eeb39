"""The input transform: everything done to an example between its text and the network.

Tokenising (``text.tokenize``, lower-cased or not), the hypothesis-only switch (every premise
read as one ``<unk>``), the vocabulary and truncation at ``max_length`` are one object,
``InputTransform``. The DataModule builds it at training (from the ``data.*`` knobs, the
vocabulary from ``data.vocab_splits``); the run stores it in every checkpoint (the settings as
``input_transform`` beside the ``vocab`` of the checkpoint's ``entailment_lab`` entry), and
``eval.py``, ``predict.py`` and ``explain.py`` read it back from there
(``InputTransform.of_checkpoint``), so a trained model reads every pair the way its training
read them, whatever config surrounds it later.

The batch functions are module-level (not closures or bound methods) so that ``datasets.map``
pickles them cheaply for ``num_proc`` workers and fingerprints them for its cache by their
options alone (``tokenize_options`` holds no vocabulary: tokenising caches across runs).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import torch

from entailment_lab.data.batching import pad_ids
from entailment_lab.data.text import UNK, UNK_ID, Vocabulary, tokenize

log = logging.getLogger(__name__)

#: Lexical-overlap buckets of a pair: the share of the hypothesis's word types (tokens with a
#: letter or digit, compared lower-cased) that also occur in the premise, in [0, .25), [.25, .5),
#: [.5, .75), [.75, 1) and exactly 1 (every hypothesis word is in the premise: the overlap that
#: McCoy et al. 2019, "Right for the wrong reasons", show models take for entailment).
OVERLAP_BUCKETS = ("0-25%", "25-50%", "50-75%", "75-100%", "100%")

#: The checkpoint entry (under ``entailment_lab``) that holds the transform's settings.
CHECKPOINT_ENTRY = "input_transform"


_ALNUM = re.compile(r"[^\W_]")  # a letter or digit: str.isalnum's characters


def _words(tokens: Sequence[str]) -> set[str]:
    """The word types of a sentence: tokens with a letter or digit, lower-cased."""
    return {t.lower() for t in tokens if _ALNUM.search(t)}


def _bucket(premise_words: set[str], hypothesis_words: set[str]) -> int:
    if not hypothesis_words:
        return 0
    share = len(hypothesis_words & premise_words) / len(hypothesis_words)
    return len(OVERLAP_BUCKETS) - 1 if share == 1 else int(share * (len(OVERLAP_BUCKETS) - 1))


def overlap_bucket(premise: Sequence[str], hypothesis: Sequence[str]) -> int:
    """The index in ``OVERLAP_BUCKETS`` of a tokenised pair (a hypothesis without words: 0)."""
    return _bucket(_words(premise), _words(hypothesis))


def _once_each(texts: Sequence[str], function: Callable[[str], Any]) -> list[Any]:
    """``function`` of each text, computed once per distinct text of the batch (SNLI and
    MultiNLI write each premise once per hypothesis, on consecutive rows)."""
    done: dict[str, Any] = {}
    return [done[t] if t in done else done.setdefault(t, function(t)) for t in texts]


def tokenize_batch(batch: Mapping[str, list], keys: Sequence[str], lowercase: bool,
                   pairs: bool = False, hypothesis_only: bool = False) -> dict:
    """``datasets.map`` function: ``<key>_tokens`` for every text column; for ``pairs`` also
    ``group_overlap`` (``overlap_bucket``), and with ``hypothesis_only`` every premise emptied
    after that (indexed as one ``<unk>``: a constant premise)."""
    out = {f"{key}_tokens": _once_each(batch[key], lambda text: tokenize(text, lowercase))
           for key in keys}
    if pairs:
        tokens = dict(zip(batch["premise"], out["premise_tokens"], strict=True))
        premise_words = _once_each(batch["premise"], lambda text: _words(tokens[text]))
        out["group_overlap"] = [_bucket(p, _words(h)) for p, h in
                                zip(premise_words, out["hypothesis_tokens"], strict=True)]
    if hypothesis_only:
        out["premise_tokens"] = [[] for _ in out["premise_tokens"]]
    return out


def index_table(table: pa.Table, keys: Sequence[str], itos: Sequence[str],
                max_length: int) -> pa.Table:
    """``datasets.map`` function on Arrow batches: the rows with, in place of each key's text
    and ``<key>_tokens``, ``<key>_ids`` (the ids of the tokens in the vocabulary ``itos``,
    ``<unk>`` for a word not in it, truncated to ``max_length``, an empty sentence as one
    ``<unk>``) and ``<key>_length`` (the length before truncation); other columns kept.
    Computed in Arrow (no Python list per sentence): a third of the first start's time on
    SNLI went to indexing word by word."""
    vocab = pa.array(itos, pa.string())
    columns = {}
    for key in keys:
        # (a batch whose sentences are all empty has list<null> tokens)
        tokens = table.column(f"{key}_tokens").combine_chunks().cast(pa.list_(pa.string()))
        lengths = pc.list_value_length(tokens)
        kept = pc.if_else(pc.equal(lengths, 0), pa.scalar([UNK], tokens.type),
                          pc.list_slice(tokens, 0, max_length))
        ids = pc.fill_null(pc.index_in(pc.list_flatten(kept), value_set=vocab), UNK_ID)
        offsets = pc.subtract(kept.offsets, kept.offsets[0])
        columns[f"{key}_ids"] = pa.ListArray.from_arrays(offsets, ids.cast(pa.int64()))
        columns[f"{key}_length"] = lengths.cast(pa.int64())
    rest = [c for c in table.column_names if c not in {*keys, *(f"{k}_tokens" for k in keys)}]
    out = table.select(rest)
    for name, column in columns.items():
        out = out.append_column(name, column)
    return out


def index_batch(batch: Mapping[str, list], keys: Sequence[str], itos: Sequence[str],
                max_length: int) -> dict[str, list]:
    """``index_table`` of a batch of Python lists (``predict.py``, ``explain.py``)."""
    table = pa.table({f"{key}_tokens": pa.array(batch[f"{key}_tokens"], pa.list_(pa.string()))
                      for key in keys})
    return index_table(table, keys, itos, max_length).to_pydict()


@dataclass(frozen=True)
class InputTransform:
    """Text of each batch key (``premise``/``hypothesis``, or ``sentence``) -> the ids the
    network reads. ``vocab`` is ``None`` until the DataModule has built it from the tokens."""

    keys: tuple[str, ...]
    lowercase: bool = True
    max_length: int = 100
    hypothesis_only: bool = False
    vocab: Vocabulary | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "keys", tuple(self.keys))
        if self.hypothesis_only and not self.pairs:
            raise ValueError(f"hypothesis_only needs premise and hypothesis, not {self.keys}")

    @property
    def pairs(self) -> bool:
        return {"premise", "hypothesis"} <= set(self.keys)

    def with_vocab(self, vocab: Vocabulary) -> InputTransform:
        return replace(self, vocab=vocab)

    # --- the two stages, as datasets.map functions with their options ----------------------
    @property
    def tokenize_options(self) -> dict[str, Any]:
        """``tokenize_batch``'s options (no vocabulary: tokens are cached across runs)."""
        return {"keys": list(self.keys), "lowercase": self.lowercase, "pairs": self.pairs,
                "hypothesis_only": self.hypothesis_only}

    @property
    def index_options(self) -> dict[str, Any]:
        """``index_table``'s options; needs the vocabulary."""
        if self.vocab is None:
            raise RuntimeError("the input transform has no vocabulary yet")
        return {"keys": list(self.keys), "itos": self.vocab.itos, "max_length": self.max_length}

    def tokens(self, texts: Mapping[str, list[str]]) -> dict[str, list]:
        """``tokenize_batch`` of a batch ``{key: [text, ...]}``."""
        return tokenize_batch(texts, **self.tokenize_options)

    def ids(self, tokens: Mapping[str, list]) -> dict[str, list]:
        """``index_batch`` of ``tokens``' output."""
        return index_batch(tokens, **self.index_options)

    def tensors(self, indexed: Mapping[str, list]) -> dict[str, torch.Tensor]:
        """The network's inputs, ``{key: ids, key_mask: mask}``, right-padded."""
        batch: dict[str, torch.Tensor] = {}
        for key in self.keys:
            batch[key], batch[f"{key}_mask"] = pad_ids(indexed[f"{key}_ids"])
        return batch

    def seen(self, tokens: Sequence[str]) -> list[str]:
        """The words of one sentence as the network reads it (truncated; empty: ``<unk>``),
        spelled as written (unknown words not replaced), for labels of heat maps."""
        return list(tokens[: self.max_length]) or [UNK]

    def empty_is_expected(self, key: str) -> bool:
        """An empty sentence that is not worth a warning: a hypothesis-only run's premises."""
        return key == "premise" and self.hypothesis_only

    def announce(self) -> None:
        """The log line that says a run or a checkpoint reads the hypothesis alone."""
        if self.hypothesis_only:
            log.info("hypothesis-only (data.hypothesis_only=true): every premise is read as one "
                     "%s token, so the model sees the hypothesis alone", UNK)

    # --- in a checkpoint ----------------------------------------------------------------------
    def settings(self) -> dict[str, Any]:
        """Plain settings for the checkpoint (the vocabulary is stored beside them, ``vocab``)."""
        return {"keys": list(self.keys), "lowercase": self.lowercase,
                "max_length": self.max_length, "hypothesis_only": self.hypothesis_only}

    @classmethod
    def of_checkpoint(cls, meta: Mapping[str, Any]) -> InputTransform:
        """The transform stored in a checkpoint's ``entailment_lab`` entry (``meta``).

        Checkpoints written before the transform was stored have only the vocabulary and the
        run's config: their settings come from its ``data`` section (``hypothesis_only``
        missing there means false, ``lowercase`` missing means the default, true)."""
        vocab = Vocabulary(meta["vocab"])
        stored = meta.get(CHECKPOINT_ENTRY)
        if stored:
            return cls(vocab=vocab, **stored)
        data = (meta.get("config") or {}).get("data") or {}
        return cls(keys=tuple(data.get("fields") or ("premise", "hypothesis")),
                   lowercase=bool(data.get("lowercase", True)),
                   max_length=int(data.get("max_length", 100)),
                   hypothesis_only=bool(data.get("hypothesis_only", False)), vocab=vocab)
