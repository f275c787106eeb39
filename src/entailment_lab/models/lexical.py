"""Lexicalized classifier (Bowman, Angeli, Potts & Manning, EMNLP 2015, §3.2).

"A large annotated corpus for learning natural language inference" introduces SNLI and, in §3.2
("Lexicalized Classifier"), a multinomial logistic regression over hand-built lexical features
of the pair (78.2 % SNLI test accuracy): BLEU, length difference, overlap, hypothesis n-grams,
cross-unigrams and cross-bigrams. This is that classifier in torch, so that it trains in the same
LightningModule, data pipeline and results files as every neural model: the floor the neural
rows are read against. Features come from token ids and indicators are hashed into
``num_buckets`` weights. The loss is convex, and the recipe (``conf/recipe/lexical.yaml``)
fits it to its optimum: full-batch L-BFGS, one epoch, as scikit-learn's LogisticRegression
would (tested against it). The feature list, the choices (no POS tags offline, hashing,
indicators, BLEU smoothing, padding), the fitting and the parameter count:
``docs/models/lexical.md``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import nn

from entailment_lab.errors import ConfigError
from entailment_lab.models.base import Network
from entailment_lab.models.common import check_choice, check_num_classes

DENSE_FEATURE_NAMES = ("bleu", "length_difference", "overlap_count", "overlap_fraction")

# One salt per hashed feature family (fixed forever: changing one changes every trained model).
FAMILY_SALTS: Mapping[str, int] = {
    "length_difference_bucket": 1,
    "overlap_count_bucket": 2,
    "overlap_fraction_bucket": 3,
    "hypothesis_unigram": 4,
    "hypothesis_bigram": 5,
    "new_word": 6,
    "cross_unigram": 7,
    "cross_bigram": 8,
    "premise_unigram": 9,
}

CROSS_BIGRAM_PAIRS = ("all", "same_second")

# Hashing arithmetic stays below 2**62 in int64: states are < 2**31 - 1 (a Mersenne prime),
# multipliers are < 2**31 (two of Fishman & Moore's primitive roots for that prime).
_PRIME = 2_147_483_647
_MULTIPLIER = 950_706_376
_FINAL_MULTIPLIER = 742_938_285


def hash_ids(salt: int, *ids: torch.Tensor, num_buckets: int) -> torch.Tensor:
    """Hash tuples of non-negative integer tensors (broadcast together) into ``[0, num_buckets)``.

    A polynomial hash modulo 2**31 - 1 with an xor-shift after every step; exact and
    platform-independent (no int64 overflow), so CPU and GPU give the same ids.
    """
    parts = torch.broadcast_tensors(*ids)
    state = torch.full_like(parts[0], (salt * _FINAL_MULTIPLIER + 12_345) % _PRIME)
    for part in parts:
        state = (state * _MULTIPLIER + part + 1) % _PRIME
        state = state ^ (state >> 16)
    state = (state * _FINAL_MULTIPLIER) % _PRIME
    state = state ^ (state >> 15)
    return state % num_buckets


def left_align(ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Move each row's real tokens to the front, in order: ``(batch, len)`` ids and mask."""
    order = torch.sort((~mask).to(torch.int8), dim=1, stable=True).indices  # real first
    return ids.gather(1, order), mask.gather(1, order)


def ngrams(ids: torch.Tensor, mask: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """n-grams starting at each position of left-aligned ``ids`` (batch, len).

    Returns ``grams`` (batch, len, n) and ``valid`` (batch, len): True where all n tokens are
    real. Rows shorter than n have no valid n-gram.
    """
    ids = nn.functional.pad(ids, (0, n - 1), value=0)  # (batch, len + n - 1)
    mask = nn.functional.pad(mask, (0, n - 1), value=False)
    return ids.unfold(1, n, 1), mask.unfold(1, n, 1).all(dim=-1)


def _same(a: torch.Tensor, a_valid: torch.Tensor, b: torch.Tensor,
          b_valid: torch.Tensor) -> torch.Tensor:
    """``same[:, i, j]``: n-gram i of ``a`` equals n-gram j of ``b``, both valid: (B, La, Lb)."""
    equal = (a[:, :, None, :] == b[:, None, :, :]).all(dim=-1)  # (B, La, Lb)
    return equal & a_valid[:, :, None] & b_valid[:, None, :]


def bleu_score(
    candidate: torch.Tensor,
    candidate_mask: torch.Tensor,
    reference: torch.Tensor,
    reference_mask: torch.Tensor,
    max_n: int = 4,
) -> torch.Tensor:
    """Sentence BLEU of each candidate against its one reference: (batch,) float in [0, 1].

    Inputs are token ids (batch, len) and masks. ``p_n`` is the clipped n-gram
    precision, ``m_n / c_n`` for n = 1 and ``(m_n + 1) / (c_n + 1)`` for n > 1 (add-one, Lin &
    Och 2004; so an order longer than the candidate has precision 1); BLEU is
    ``BP * (p_1 ... p_max_n) ** (1 / max_n)`` with ``BP = min(1, exp(1 - len_ref / len_cand))``,
    and 0 when no unigram matches.
    """
    candidate, candidate_mask = left_align(candidate, candidate_mask)
    reference, reference_mask = left_align(reference, reference_mask)
    log_precision = torch.zeros(candidate.size(0), device=candidate.device)  # (B,)
    no_unigram_match = torch.zeros_like(log_precision, dtype=torch.bool)
    earlier = torch.ones(candidate.size(1), candidate.size(1), dtype=torch.bool,
                         device=candidate.device).tril(diagonal=-1)  # [j, k]: k < j
    for n in range(1, max_n + 1):
        c_grams, c_valid = ngrams(candidate, candidate_mask, n)  # (B, Lc, n), (B, Lc)
        r_grams, r_valid = ngrams(reference, reference_mask, n)  # (B, Lr, n), (B, Lr)
        same_cc = _same(c_grams, c_valid, c_grams, c_valid)  # (B, Lc, Lc)
        same_cr = _same(c_grams, c_valid, r_grams, r_valid)  # (B, Lc, Lr)
        # Clipped matches: each distinct candidate n-gram (at its first occurrence) counts
        # min(times in candidate, times in reference).
        first = c_valid & ~(same_cc & earlier).any(dim=2)  # (B, Lc)
        clipped = torch.minimum(same_cc.sum(dim=2), same_cr.sum(dim=2))  # (B, Lc)
        matches = (clipped * first).sum(dim=1).float()  # (B,)
        total = c_valid.sum(dim=1).float()  # (B,)
        if n == 1:
            no_unigram_match = matches == 0
            precision = matches / total.clamp_min(1.0)
        else:
            precision = (matches + 1.0) / (total + 1.0)
        log_precision = log_precision + precision.clamp_min(1e-30).log()
    c_len = candidate_mask.sum(dim=1).float().clamp_min(1.0)  # (B,)
    r_len = reference_mask.sum(dim=1).float()
    log_brevity = (1.0 - r_len / c_len).clamp_max(0.0)  # log BP
    bleu = torch.exp(log_brevity + log_precision / max_n)
    return bleu.masked_fill(no_unigram_match, 0.0)


def _overlap(premise: torch.Tensor, premise_mask: torch.Tensor, hypothesis: torch.Tensor,
             hypothesis_mask: torch.Tensor) -> torch.Tensor:
    """``in_premise`` (batch, len_h): real hypothesis tokens whose word is a real premise token."""
    same = (hypothesis[:, :, None] == premise[:, None, :]) & premise_mask[:, None, :]
    return same.any(dim=2) & hypothesis_mask  # (B, Lh)


def dense_features(
    premise: torch.Tensor,
    premise_mask: torch.Tensor,
    hypothesis: torch.Tensor,
    hypothesis_mask: torch.Tensor,
    bleu: bool = True,
    length_difference: bool = True,
    overlap: bool = True,
    bleu_max_n: int = 4,
) -> torch.Tensor:
    """The real-valued features of a batch of pairs: (batch, n_dense) float32.

    Columns, in ``DENSE_FEATURE_NAMES`` order, for the families switched on: BLEU of the
    hypothesis against the premise, ``len(h) - len(p)``, the number and the fraction of
    hypothesis tokens that occur in the premise.
    """
    premise, premise_mask = left_align(premise, premise_mask)
    hypothesis, hypothesis_mask = left_align(hypothesis, hypothesis_mask)
    columns: list[torch.Tensor] = []  # each (B,)
    if bleu:
        columns.append(bleu_score(hypothesis, hypothesis_mask, premise, premise_mask,
                                  bleu_max_n))
    len_p = premise_mask.sum(dim=1).float()  # (B,)
    len_h = hypothesis_mask.sum(dim=1).float()
    if length_difference:
        columns.append(len_h - len_p)
    if overlap:
        count = _overlap(premise, premise_mask, hypothesis, hypothesis_mask).sum(dim=1).float()
        columns += [count, count / len_h.clamp_min(1.0)]
    if not columns:
        return torch.zeros(premise.size(0), 0, device=premise.device)
    return torch.stack(columns, dim=1)  # (B, n_dense)


class LexicalClassifier(Network):
    """Bowman et al. (2015) §3.2 lexicalized classifier: logistic regression on lexical features.

    ``logits = bag(hashed indicators) + W_dense · dense features + bias``. The ``embedding``
    argument (the backbone's word vectors) is accepted for the model contract and not used.
    All weights start at zero (the loss is convex; zero is sklearn's starting point too).
    """

    @classmethod
    def validate_config(cls, **net_config: Any) -> None:
        """Bucket count, n-gram and bucket sizes, the cross-bigram choice, ``l2`` >= 0, the
        feature chunk, and at least one feature family on."""
        num_buckets = net_config.get("num_buckets", 2**20)
        if not isinstance(num_buckets, int) or not 1 <= num_buckets <= _PRIME:
            raise ConfigError(f"model.net.num_buckets must be an integer in [1, 2**31 - 1], got "
                              f"{num_buckets!r}; e.g. 1048576 (2**20)")
        pairs = net_config.get("cross_bigram_pairs", "all")
        check_choice("cross_bigram_pairs", pairs, CROSS_BIGRAM_PAIRS)
        for name, low in (("bleu_max_n", 1), ("max_length_difference", 0),
                          ("max_overlap_count", 0), ("overlap_fraction_bins", 1)):
            value = net_config.get(name, low)
            if not isinstance(value, int) or value < low:
                raise ConfigError(f"model.net.{name} must be an integer >= {low}, got {value!r}")
        families = ("bleu", "length_difference", "overlap", "new_words", "hypothesis_unigrams",
                    "hypothesis_bigrams", "cross_unigrams", "cross_bigrams", "premise_unigrams")
        if not any(net_config.get(name, name != "premise_unigrams") for name in families):
            raise ConfigError(f"model.net: every feature family is off; switch on at least one "
                              f"of {', '.join(families)}")
        if net_config.get("l2", 0.0) < 0:
            raise ConfigError(f"model.net.l2 must be >= 0, got {net_config['l2']}")
        chunk = net_config.get("feature_chunk", 1024)
        if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
            raise ConfigError(f"model.net.feature_chunk must be an integer >= 1, got {chunk!r}")

    def __init__(
        self,
        embedding: nn.Embedding,
        num_classes: int,
        num_buckets: int = 2**20,
        bleu: bool = True,
        bleu_max_n: int = 4,
        length_difference: bool = True,
        overlap: bool = True,
        bucket_indicators: bool = True,
        max_length_difference: int = 10,
        max_overlap_count: int = 10,
        overlap_fraction_bins: int = 10,
        new_words: bool = True,
        hypothesis_unigrams: bool = True,
        hypothesis_bigrams: bool = True,
        cross_unigrams: bool = True,
        cross_bigrams: bool = True,
        cross_bigram_pairs: str = "all",
        premise_unigrams: bool = False,
        binary: bool = True,
        l2: float = 0.0,
        feature_chunk: int = 1024,
        cache_features: bool = True,
    ) -> None:
        super().__init__()
        self.validate_config(
            num_buckets=num_buckets, bleu=bleu, bleu_max_n=bleu_max_n,
            length_difference=length_difference, overlap=overlap,
            max_length_difference=max_length_difference, max_overlap_count=max_overlap_count,
            overlap_fraction_bins=overlap_fraction_bins, new_words=new_words,
            hypothesis_unigrams=hypothesis_unigrams, hypothesis_bigrams=hypothesis_bigrams,
            cross_unigrams=cross_unigrams, cross_bigrams=cross_bigrams,
            cross_bigram_pairs=cross_bigram_pairs, premise_unigrams=premise_unigrams, l2=l2,
            feature_chunk=feature_chunk,
        )
        check_num_classes(num_classes)
        self.l2 = l2
        self.feature_chunk = feature_chunk
        # Training-mode memo of the last batch's features (``bag_inputs``): a full-batch
        # L-BFGS step evaluates the same batch tens of times. Not module state: no checkpoint.
        self.cache_features = cache_features
        self._memo: tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]] | None = None
        del embedding  # not used, and not stored: no word vectors in the checkpoint/optimiser
        self.num_buckets = num_buckets
        self.bleu, self.bleu_max_n = bleu, bleu_max_n
        self.length_difference, self.overlap = length_difference, overlap
        self.max_length_difference = max_length_difference
        self.max_overlap_count = max_overlap_count
        self.overlap_fraction_bins = overlap_fraction_bins
        self.families = {
            "length_difference_bucket": length_difference and bucket_indicators,
            "overlap_count_bucket": overlap and bucket_indicators,
            "overlap_fraction_bucket": overlap and bucket_indicators,
            "hypothesis_unigram": hypothesis_unigrams,
            "hypothesis_bigram": hypothesis_bigrams,
            "new_word": new_words,
            "cross_unigram": cross_unigrams,
            "cross_bigram": cross_bigrams,
            "premise_unigram": premise_unigrams,
        }
        self.cross_bigram_pairs = cross_bigram_pairs
        self.binary = binary
        self.dense_names = [name for name, on in zip(
            DENSE_FEATURE_NAMES, (bleu, length_difference, overlap, overlap), strict=True) if on]

        # The logistic regression: one weight per (hashed indicator, class), per (dense
        # feature, class), and one bias per class. All zero at the start.
        self.bag = (nn.EmbeddingBag(num_buckets, num_classes, mode="sum")
                    if any(self.families.values()) else None)
        self.dense = (nn.Linear(len(self.dense_names), num_classes, bias=False)
                      if self.dense_names else None)
        self.bias = nn.Parameter(torch.zeros(num_classes))
        with torch.no_grad():
            for p in self.parameters():
                p.zero_()

    def regularization_loss(self) -> torch.Tensor:
        """``l2 / 2 · ‖W‖²`` over the weights, not the bias: with the batch-mean cross-entropy
        this is sklearn's ``LogisticRegression`` objective for ``C = 1 / (l2 · N_train)``."""
        weights = [m.weight for m in (self.bag, self.dense) if m is not None]
        return 0.5 * self.l2 * sum(w.square().sum() for w in weights)

    def dense_features(self, premise: torch.Tensor, premise_mask: torch.Tensor,
                       hypothesis: torch.Tensor, hypothesis_mask: torch.Tensor) -> torch.Tensor:
        """This model's real-valued features, (batch, n_dense); see ``dense_features``."""
        return dense_features(premise, premise_mask, hypothesis, hypothesis_mask,
                              bleu=self.bleu, length_difference=self.length_difference,
                              overlap=self.overlap, bleu_max_n=self.bleu_max_n)

    def feature_ids(
        self,
        premise: torch.Tensor,
        premise_mask: torch.Tensor,
        hypothesis: torch.Tensor,
        hypothesis_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The hashed indicator features of each pair.

        Returns ``ids`` (batch, slots) long in ``[0, num_buckets)`` and ``valid`` (batch, slots)
        bool; a pair's features are ``ids[row][valid[row]]``. With ``binary`` each row's valid
        ids are distinct and sorted (set semantics), so they do not depend on padding.
        """
        premise, premise_mask = left_align(premise, premise_mask)  # (B, Lp)
        hypothesis, hypothesis_mask = left_align(hypothesis, hypothesis_mask)  # (B, Lh)
        batch = premise.size(0)
        on, buckets = self.families, self.num_buckets
        slots: list[tuple[torch.Tensor, torch.Tensor]] = []  # (ids, valid), each (B, k)

        def add(family: str, valid: torch.Tensor, *parts: torch.Tensor) -> None:
            ids = hash_ids(FAMILY_SALTS[family], *parts, num_buckets=buckets)
            ids, valid = torch.broadcast_tensors(ids, valid)
            slots.append((ids.reshape(batch, -1), valid.reshape(batch, -1)))

        in_premise = _overlap(premise, premise_mask, hypothesis, hypothesis_mask)  # (B, Lh)
        len_p, len_h = premise_mask.sum(dim=1), hypothesis_mask.sum(dim=1)  # (B,)
        count = in_premise.sum(dim=1)  # (B,)
        always = torch.ones(batch, 1, dtype=torch.bool, device=premise.device)
        if on["length_difference_bucket"]:
            m = self.max_length_difference
            add("length_difference_bucket", always, ((len_h - len_p).clamp(-m, m) + m)[:, None])
        if on["overlap_count_bucket"]:
            add("overlap_count_bucket", always, count.clamp_max(self.max_overlap_count)[:, None])
        if on["overlap_fraction_bucket"]:
            bins = self.overlap_fraction_bins  # exact integer floor(bins * count / len_h)
            add("overlap_fraction_bucket", always, (count * bins // len_h.clamp_min(1))[:, None])
        if on["hypothesis_unigram"]:
            add("hypothesis_unigram", hypothesis_mask, hypothesis)
        if on["new_word"]:
            add("new_word", hypothesis_mask & ~in_premise, hypothesis)
        if on["premise_unigram"]:
            add("premise_unigram", premise_mask, premise)
        if on["cross_unigram"]:  # (B, Lp, Lh)
            add("cross_unigram", premise_mask[:, :, None] & hypothesis_mask[:, None, :],
                premise[:, :, None], hypothesis[:, None, :])
        if on["hypothesis_bigram"] or on["cross_bigram"]:
            h_bi, h_valid = ngrams(hypothesis, hypothesis_mask, 2)  # (B, Lh, 2), (B, Lh)
            if on["hypothesis_bigram"]:
                add("hypothesis_bigram", h_valid, h_bi[..., 0], h_bi[..., 1])
            if on["cross_bigram"]:
                p_bi, p_valid = ngrams(premise, premise_mask, 2)  # (B, Lp, 2), (B, Lp)
                p1, p2 = p_bi[:, :, None, 0], p_bi[:, :, None, 1]  # (B, Lp, 1)
                h1, h2 = h_bi[:, None, :, 0], h_bi[:, None, :, 1]  # (B, 1, Lh)
                valid = p_valid[:, :, None] & h_valid[:, None, :]  # (B, Lp, Lh)
                if self.cross_bigram_pairs == "same_second":
                    valid = valid & (p2 == h2)
                add("cross_bigram", valid, p1, p2, h1, h2)

        ids = torch.cat([s[0] for s in slots], dim=1)  # (B, slots)
        valid = torch.cat([s[1] for s in slots], dim=1)  # (B, slots)
        if not self.binary:
            return ids.masked_fill(~valid, 0), valid
        # Set semantics: sort each row with invalid slots last (sentinel = num_buckets) and
        # keep the first of each run of equal ids.
        ids = torch.sort(ids.masked_fill(~valid, buckets), dim=1).values
        previous = nn.functional.pad(ids[:, :-1], (1, 0), value=-1)
        valid = (ids < buckets) & (ids != previous)
        return ids.masked_fill(~valid, 0), valid

    def bag_inputs(
        self,
        premise: torch.Tensor,
        premise_mask: torch.Tensor,
        hypothesis: torch.Tensor,
        hypothesis_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Every feature of a batch: ``flat_ids`` (total,) the valid hashed ids, pair by pair;
        ``num_hashed`` (batch,) how many belong to each pair; ``dense`` (batch, n_dense).

        Computed ``feature_chunk`` pairs at a time, each chunk cut to its own longest premise
        and hypothesis (the cross features are (chunk, len_p, len_h): a full-batch step over
        8.8k pairs padded to the batch's longest would need gigabytes). In training mode with
        ``cache_features``, the same batch tensors as the last call (the same objects: an
        L-BFGS step re-evaluates its batch through Lightning's closure) reuse the last result.
        """
        key = (premise, premise_mask, hypothesis, hypothesis_mask)
        memo = self.training and self.cache_features
        if memo and self._memo is not None and all(
                a is b for a, b in zip(self._memo[0], key, strict=True)):
            flat_ids, num_hashed, dense = self._memo[1]
            return flat_ids, num_hashed, dense
        self._memo = None  # never hold an earlier batch's features past this call
        flat, counts, dense_rows = [], [], []
        for start in range(0, premise.size(0), self.feature_chunk):
            rows = slice(start, start + self.feature_chunk)
            p, p_mask = left_align(premise[rows], premise_mask[rows])  # (b, Lp)
            h, h_mask = left_align(hypothesis[rows], hypothesis_mask[rows])  # (b, Lh)
            len_p = max(int(p_mask.sum(dim=1).max()), 1)
            len_h = max(int(h_mask.sum(dim=1).max()), 1)
            p, p_mask, h, h_mask = p[:, :len_p], p_mask[:, :len_p], h[:, :len_h], h_mask[:, :len_h]
            dense_rows.append(self.dense_features(p, p_mask, h, h_mask))  # (b, n_dense)
            if self.bag is not None:
                ids, valid = self.feature_ids(p, p_mask, h, h_mask)  # (b, slots)
                flat.append(ids[valid])
                counts.append(valid.sum(dim=1))  # (b,)
        dense = torch.cat(dense_rows, dim=0)  # (B, n_dense)
        if self.bag is None:
            flat_ids = torch.zeros(0, dtype=torch.long, device=premise.device)
            num_hashed = torch.zeros(premise.size(0), dtype=torch.long, device=premise.device)
        else:
            flat_ids, num_hashed = torch.cat(flat), torch.cat(counts)  # (total,), (B,)
        if memo:
            self._memo = (key, (flat_ids, num_hashed, dense))
        return flat_ids, num_hashed, dense

    def feature_matrix(self, batches: Iterable[Mapping[str, torch.Tensor]]) -> tuple[Any, Any]:
        """The design matrix of the logistic regression, for checks against scikit-learn:
        ``(X, y)``, X a SciPy CSR matrix (pairs, num_buckets + dense features), the hashed
        indicators then the dense features, in the column order of ``weights()``. Needs SciPy
        (scikit-learn's dependency; the dev extra)."""
        import numpy as np
        from scipy import sparse

        rows, labels = [], []
        with torch.no_grad():
            for batch in batches:
                ids, counts, dense = self.bag_inputs(batch["premise"], batch["premise_mask"],
                                                     batch["hypothesis"],
                                                     batch["hypothesis_mask"])
                parts = [sparse.csr_matrix(dense.double().numpy())]  # (batch, n_dense)
                if self.bag is not None:  # (batch, num_buckets), first
                    indptr = np.concatenate([[0], counts.cumsum(0).numpy()])
                    parts.insert(0, sparse.csr_matrix((np.ones(len(ids)), ids.numpy(), indptr),
                                                      shape=(len(counts), self.num_buckets)))
                rows.append(sparse.hstack(parts).tocsr())
                labels.append(batch["label"].numpy())
        return sparse.vstack(rows).tocsr(), np.concatenate(labels)

    def weights(self) -> tuple[Any, Any]:
        """``(W, b)`` as NumPy float64 arrays, W (num_classes, columns of ``feature_matrix``):
        the same parameters as scikit-learn's ``coef_`` and ``intercept_``."""
        import numpy as np

        parts = [m.weight.detach().double().numpy().T if m is self.bag
                 else m.weight.detach().double().numpy()
                 for m in (self.bag, self.dense) if m is not None]
        return np.concatenate(parts, axis=1), self.bias.detach().double().numpy()

    def forward(
        self,
        premise: torch.Tensor,
        premise_mask: torch.Tensor,
        hypothesis: torch.Tensor,
        hypothesis_mask: torch.Tensor,
        return_details: bool = False,
    ) -> dict[str, torch.Tensor]:
        """Logits ``(batch, num_classes)``; with details, ``dense_features`` (batch, n_dense)
        and ``num_hashed_features`` (batch,), the active indicators of each pair."""
        batch = premise.size(0)
        logits = self.bias.expand(batch, -1)  # (B, C)
        flat_ids, num_hashed, dense = self.bag_inputs(premise, premise_mask, hypothesis,
                                                      hypothesis_mask)
        if self.dense is not None:
            logits = logits + self.dense(dense.to(self.dense.weight.dtype))  # (B, C)
        if self.bag is not None:
            offsets = num_hashed.cumsum(dim=0) - num_hashed  # start of each pair's bag
            logits = logits + self.bag(flat_ids, offsets)  # (B, C): sum of its weights
        out = {"logits": logits}
        if return_details:
            out["dense_features"] = dense  # (B, n_dense), columns: self.dense_names
            out["num_hashed_features"] = num_hashed  # (B,)
        return out
