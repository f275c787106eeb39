"""One DataModule for sentence pairs (SNLI, SICK) and single sentences (SST, TREC).

``prepare_data`` downloads a hub dataset into the local cache. Pipeline (``setup``): read
splits (the cached hub dataset or local files: train, validation, and one or more test splits)
-> validate, label names -> ids -> drop unlabelled rows (label -1, SNLI's gold ``-``; wherever
they sit, as a new table, so that all that follows sees the kept rows only) -> number
each split's groups (``group_fields``) -> optionally carve a validation split from
train -> tokenise (batched ``datasets.map``, cached by ``datasets``) -> build the vocabulary
from ``vocab_splits`` (or take the one stored in a checkpoint) -> index and truncate ->
batches of similar length. Tokenising, the vocabulary and indexing are the run's input
transform (``data/transform.py``), which the checkpoint stores for eval, predict and explain.
"""

from __future__ import annotations

import logging
import math
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import datasets
import lightning as L
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
from torch.utils.data import DataLoader

from entailment_lab.data.batching import ROW_KEY, BucketBatchSampler, PadCollator
from entailment_lab.data.sources import (
    download_hub_dataset,
    load_hub_splits,
    load_local_split,
    prepare_split,
)
from entailment_lab.data.text import Vocabulary
from entailment_lab.data.transform import (
    OVERLAP_BUCKETS,
    InputTransform,
    index_table,
    tokenize_batch,
)
from entailment_lab.errors import ConfigError, DataError

log = logging.getLogger(__name__)

SPLITS = ("train", "validation", "test")
#: Names no further evaluated set may take: its metrics (``NAME/acc``) would mix with a stage's.
RESERVED_SETS = (*SPLITS, "val", "params")


def check_test_set_name(name: str, taken: Iterable[str]) -> None:
    """An extra test set's name becomes a metric prefix (``NAME/acc``): refuse one that holds
    a ``/`` or is a split or stage of the run (``RESERVED_SETS`` and ``taken``), whose metrics
    it would overwrite."""
    taken = {*RESERVED_SETS, *taken}
    if not name or "/" in name or name in taken:
        raise ConfigError(f"extra_tests.{name}: the name clashes with a split or a stage of the "
                          f"run ({', '.join(sorted(taken))}) or holds a '/'; name the set "
                          "otherwise, e.g. +extra_tests.hans=PATH")


def _keep_rows(table: pa.Table, drop_labels: list[int]) -> pa.Table:
    """``datasets.map`` function (Arrow batches): the rows whose label is not dropped."""
    labels = table.column("label")
    return table.filter(pc.invert(pc.is_in(labels, value_set=pa.array(drop_labels,
                                                                       labels.type))))


def drop_rows(ds: datasets.Dataset, drop_labels: Sequence[int], split: str) -> datasets.Dataset:
    """``ds`` without the rows whose ``label`` is in ``drop_labels``, as a new table (no
    indices mapping over the old one: code that reads columns of the table, ``ds.data``, sees
    the kept rows only). Written once into the ``datasets`` cache, in Arrow, with no Python
    rows; ``ds`` itself where no row is dropped."""
    labels = ds.with_format("arrow")["label"]
    if not drop_labels or not pc.any(pc.is_in(labels, value_set=pa.array(
            list(drop_labels), labels.type))).as_py():
        return ds
    kept = ds.with_format("arrow").map(
        _keep_rows, batched=True, batch_size=50_000, features=ds.features,
        fn_kwargs={"drop_labels": list(drop_labels)}, desc=f"drop no-gold rows ({split})")
    return kept.with_format(None)


def count_tokens(columns: Iterable[pa.ChunkedArray]) -> Counter[str]:
    """Token counts over Arrow ``list<string>`` columns, counted in Arrow (no Python lists)."""
    counts: Counter[str] = Counter()
    for column in columns:
        tallies = pc.value_counts(pc.list_flatten(column))
        counts.update(dict(zip(tallies.field("values").to_pylist(),
                               tallies.field("counts").to_pylist(), strict=True)))
    return counts


class TextDataModule(L.LightningDataModule):
    """Tokenised, indexed, length-bucketed splits of a classification corpus.

    Args (all kept as ``self.hparams.<name>``):
        fields: batch key -> dataset column, e.g. ``{premise: premise, hypothesis: hypothesis}``
            for pairs or ``{sentence: text}`` for single sentences; a list of columns means
            "the first of these that the data has" (hub and local files may differ).
        label_field: the label column (or a list of candidates, as ``fields``): integer ids
            or names from ``label_names`` (any case; ``-`` = -1, no gold label); rows whose
            label is in ``drop_labels`` (default ``[-1]``) are removed.
        label_names: class names in id order (their number is the number of classes).
        hub_name / hub_config: a Hugging Face hub dataset, used when no local file is given.
        files: split (``train``, ``validation``, ``test`` or a name of ``test_splits``) ->
            local file: ``.jsonl``, tab-separated ``.txt`` / ``.tsv`` or ``.csv``
            with a header row (each also ``.gz``), or ``.parquet`` (``sources.py``). If any is
            set, only local files are read.
        val_from_train: carve this many (int) or this fraction (float < 1) of train pairs
            into the validation split, seeded by ``split_seed`` (default: ``seed``).
        split_seed: the seed of that carve; protocols fix it so that every run seed trains
            and validates on the same pairs and the seeds measure the model's variance only.
        val_group_by: with ``val_from_train``, carve whole groups of rows sharing this column's
            value (e.g. ``premise``: SNLI writes three hypotheses per premise, one per label, so
            a pair-wise carve puts 99% of validation premises in train with their other labels,
            and validation then rewards memorising premises); the carve takes groups until it
            has at least ``val_from_train`` rows.
        train_size: train on this many pairs only (after the carve): the first N of a shuffle
            seeded by ``split_seed``, so smaller sizes are subsets of larger ones (learning
            curves).
        test_splits: the splits tested (best checkpoint) after training, each recorded under
            its own name (``<split>/acc``, ``breakdowns.<split>``); besides ``train``,
            ``validation`` and ``test``, these names may be given in ``files``. MultiNLI tests
            on both dev sets: ``[test_matched, test_mismatched]``.
        hub_splits: our split name -> the hub dataset's (e.g. ``test_matched:
            validation_matched``); a split not named here has the same name on the hub.
        validate_on: validate on one of the test splits (its file or hub split, read once):
            a name in ``test_splits`` or its suffix after ``test_`` (``matched`` for
            ``test_matched``); then ``files.validation`` is not given.
        group_fields: columns that split a test set into groups (e.g. MultiNLI's ``genre``):
            each a breakdown of the test accuracy whose groups are the values found in that
            split, sorted; a split without the column has no such breakdown.
        vocab_splits: splits whose tokens make the vocabulary (SNLI papers use all three).
        max_length: longer sentences are truncated (reported once at setup).
        hypothesis_only: replace every premise by one constant token (``<unk>``), so that a
            pair model sees the hypothesis alone: the hypothesis-only baseline that measures
            annotation artefacts (Gururangan et al. 2018; Poliak et al. 2018). Pair data only.

    Pair data also carries each pair's lexical-overlap bucket (``OVERLAP_BUCKETS``, computed
    from the original premise), batched as ``group/overlap``: the module reports test accuracy
    per bucket (``group_names``).
    """

    def __init__(
        self,
        fields: Mapping[str, str | Sequence[str]],
        label_names: Sequence[str],
        label_field: str | Sequence[str] = "label",
        hub_name: str | None = None,
        hub_config: str | None = None,
        files: Mapping[str, str | None] | None = None,
        drop_labels: Sequence[int] = (-1,),
        val_from_train: float | None = None,
        vocab_splits: Sequence[str] = ("train", "validation", "test"),
        vocab_min_freq: int = 1,
        lowercase: bool = True,
        max_length: int = 100,
        batch_size: int = 128,
        eval_batch_size: int | None = None,
        pool_batches: int = 50,
        num_workers: int = 0,
        num_proc: int | None = None,
        cache_dir: str | None = None,
        seed: int = 0,
        split_seed: int | None = None,
        val_group_by: str | None = None,
        train_size: int | None = None,
        hypothesis_only: bool = False,
        test_splits: Sequence[str] = ("test",),
        hub_splits: Mapping[str, str] | None = None,
        validate_on: str | None = None,
        group_fields: Sequence[str] = (),
        name: str | None = None,
    ) -> None:
        super().__init__()
        # Every argument as ``self.hparams.<name>``; the pipeline logs the whole config itself.
        self.save_hyperparameters(logger=False)
        if not fields:
            raise ConfigError("data.fields must map at least one batch key to a text column")
        if max_length < 1:
            raise ConfigError(f"data.max_length must be >= 1, got {max_length}")
        if batch_size < 1:
            raise ConfigError(f"data.batch_size must be >= 1, got {batch_size}")
        def candidates(value: str | Sequence[str]) -> list[str]:
            return [value] if isinstance(value, str) else list(value)

        self.keys = list(fields)
        self.pairs = {"premise", "hypothesis"} <= set(self.keys)
        if hypothesis_only and not self.pairs:
            raise ConfigError(f"data.hypothesis_only=true needs sentence pairs (premise and "
                              f"hypothesis), but this data has {self.keys}: use pair data "
                              "(e.g. data=snli) or data.hypothesis_only=false")
        #: breakdown name -> the names of its group ids (batched as ``group/<name>``), for
        #: every split; ``group_names_of`` adds a split's own (``group_fields``)
        self.group_names: dict[str, list[str]] = (
            {"overlap": list(OVERLAP_BUCKETS)} if self.pairs else {})
        self.split_group_names: dict[str, dict[str, list[str]]] = {}
        self.group_fields = list(group_fields)
        clash = sorted(set(self.group_fields) & {*self.group_names, *self.keys, "label",
                                                 ROW_KEY})
        if clash:
            raise ConfigError(f"data.group_fields: {clash} name a built-in breakdown or a batch "
                              "key; give the data's columns that group pairs, e.g. [genre]")
        self.columns = {key: candidates(v) for key, v in fields.items()}
        self.columns["label"] = candidates(label_field)
        self.test_splits = list(test_splits)
        for split in self.test_splits:
            if split in ("train", "validation") or "/" in split or not split:
                raise ConfigError(f"data.test_splits: {split!r} cannot be a test split (not "
                                  "train or validation, no '/'); e.g. [test]")
        #: every split name this corpus may have, in order
        self.split_names = list(dict.fromkeys([*SPLITS, *self.test_splits]))
        self.hub_splits = dict(hub_splits or {})
        self.validation_source = self._validation_source(validate_on)
        self.files = {k: v for k, v in (files or {}).items() if v}
        unknown = set(self.files) - set(self.split_names)
        if unknown:
            raise ConfigError(f"data.files: unknown split(s) {sorted(unknown)}; use "
                              f"{tuple(self.split_names)}")
        if not self.files and not hub_name:
            raise ConfigError("data: set data.hub_name or data.files.<split>=PATH")
        if self.validation_source and "validation" in self.files:
            raise ConfigError(f"data.files.validation and data.validate_on={validate_on} both "
                              "name a validation set; give one (data.validate_on=null to use "
                              "the file)")
        if self.validation_source and val_from_train:
            raise ConfigError(f"data.val_from_train and data.validate_on={validate_on} both "
                              "name a validation set; give one")
        if self.files and self.validation_source and self.validation_source not in self.files:
            raise ConfigError(
                f"data.files.{self.validation_source}: not set, but data.validate_on="
                f"{validate_on} validates on it; give data.files.{self.validation_source}=PATH")
        #: the vocabulary: set before ``setup`` to fix the ids (a resumed run), else built
        self.vocab: Vocabulary | None = None
        #: everything done to a pair before the network (``data/transform.py``): set before
        #: ``setup`` to read the data as a checkpoint's training did (eval), else built from
        #: the ``data.*`` knobs and the vocabulary; stored in every checkpoint
        self.transform: InputTransform | None = None
        self.splits: dict[str, datasets.Dataset] = {}
        self.test_split = "test"  # what test_dataloader() serves
        self.stats: dict[str, Any] = {}

    def _validation_source(self, validate_on: str | None) -> str | None:
        """The test split that ``validate_on`` names (``matched`` -> ``test_matched``)."""
        if validate_on is None:
            return None
        for split in (validate_on, f"test_{validate_on}"):
            if split in self.test_splits:
                return split
        options = ", ".join(s.removeprefix("test_") for s in self.test_splits)
        raise ConfigError(f"data.validate_on={validate_on}: not one of the test splits; use "
                          f"one of {options} (data.test_splits: {self.test_splits})")

    def missing_splits(self, splits: Iterable[str]) -> list[str]:
        """Those of ``splits`` that no local file gives (always none for hub data, whose
        missing splits fail when it is read)."""
        if not self.files:
            return []
        given = {*self.files, *(["validation"] if self.validation_source else [])}
        return [s for s in splits if s not in given]

    def group_names_of(self, split: str) -> dict[str, list[str]]:
        """Breakdown name -> group names of ``split``'s ``group/<name>`` ids (after setup)."""
        return {**self.group_names, **self.split_group_names.get(split, {})}

    @property
    def label_names(self) -> list[str]:
        return list(self.hparams.label_names)

    @property
    def num_classes(self) -> int:
        return len(self.label_names)

    @property
    def name(self) -> str:
        return self.hparams.name or self.hparams.hub_name or "local"

    @property
    def split_seed(self) -> int:
        """The seed of the validation carve and of ``train_size`` (default: ``seed``)."""
        hp = self.hparams
        return hp.seed if hp.split_seed is None else hp.split_seed

    # --- reading -------------------------------------------------------------------------
    def _local_splits(self) -> list[str]:
        """The splits that local files replace the hub with (named in the offline error)."""
        wanted = ["train", "validation", *self.test_splits]
        return [s for s in wanted if not (s == "validation" and self.validation_source)]

    def _read(self) -> dict[str, datasets.Dataset]:
        hp = self.hparams
        if self.files:
            raw = {split: load_local_split(path, split, hp.cache_dir)
                   for split, path in self.files.items()}
        else:
            wanted = [s for s in self._local_splits()
                      if s != "validation" or not hp.val_from_train]
            names = {s: self.hub_splits.get(s, s) for s in wanted}
            hub = load_hub_splits(hp.hub_name, hp.hub_config, list(dict.fromkeys(names.values())),
                                  hp.cache_dir, self._local_splits())
            raw = {s: hub[name] for s, name in names.items()}
        out = {split: self._prepare(split, ds, str(self.files[split]) if self.files else None)
               for split, ds in raw.items()}
        if self.validation_source:  # the same rows, read once
            out["validation"] = out[self.validation_source]
        return out

    def _prepare(self, split: str, ds: datasets.Dataset, source: str | None
                 ) -> datasets.Dataset:
        """Validate a raw split, drop rows without a gold label, number its groups.

        The drop comes first and makes a new table (``drop_rows``), so everything computed
        from rows afterwards (groups, the validation carve, ``train_size``, tokens) sees the
        kept rows only, each with its own label and group values."""
        drop_labels = list(self.hparams.drop_labels)
        ds = prepare_split(ds, split, self.columns, self.label_names, drop_labels, source,
                           keep=self.group_fields)
        before = len(ds)
        ds = drop_rows(ds, drop_labels, split)
        self.stats[f"{split}/no_gold"] = before - len(ds)
        if len(ds) < before:
            log.info("%s: dropped %d rows with label in %s (no gold label)",
                     split, before - len(ds), drop_labels)
        if len(ds) == 0:
            raise DataError(f"{source or f'split {split!r}'}: every one of its {before} rows has "
                            f"a label in data.drop_labels={drop_labels} (no gold label), so "
                            "nothing is left; give a file with gold labels")
        groups = {}
        for field in self.group_fields:
            if field not in ds.column_names:
                continue
            values = ["" if v is None else str(v) for v in ds.data.column(field).to_pylist()]
            names, ids = np.unique(np.asarray(values, dtype=object), return_inverse=True)
            ds = ds.add_column(f"group_{field}", ids.astype(np.int64).tolist())
            groups[field] = [str(n) for n in names]  # sorted
        self.split_group_names[split] = groups
        return ds

    def _carve_validation(self, raw: dict[str, datasets.Dataset]) -> None:
        """Carve ``val_from_train`` rows of train (after the no-gold drop) into validation:
        pairs at random, or whole ``val_group_by`` groups until there are enough."""
        n, group_by = self.hparams.val_from_train, self.hparams.val_group_by
        if not n:
            return
        if "train" not in raw:
            raise ConfigError("data.val_from_train needs a train split")
        train = raw["train"]
        wanted = int(n) if n >= 1 else math.ceil(n * len(train))
        if not ((0 < n < 1 or float(n).is_integer()) and 1 <= wanted < len(train)):
            raise ConfigError(
                f"data.val_from_train={n}: give a fraction in (0, 1) or a whole number of "
                f"examples that leaves train some rows (it has {len(train)} with a gold label)"
            )
        if "validation" in raw:
            log.warning("data.val_from_train is set: the given validation split is replaced")
        self.split_group_names["validation"] = self.split_group_names.get("train", {})
        if group_by is None:
            # datasets' own carve: the same split for an int and the fraction it rounds to
            parts = train.train_test_split(test_size=wanted, seed=self.split_seed, shuffle=True)
            raw["train"], raw["validation"] = parts["train"], parts["test"]
            return
        if group_by not in train.column_names:
            raise ConfigError(f"data.val_group_by={group_by!r}: no such field (the data "
                              f"has {sorted(train.column_names)})")
        values = train.with_format("arrow")[group_by].to_pylist()  # the kept rows', in order
        groups = np.unique(np.asarray(values, dtype=object), return_inverse=True)[1]
        order = np.random.default_rng(self.split_seed).permutation(groups.max() + 1)
        sizes = np.bincount(groups)[order]
        taken = order[: int(np.searchsorted(np.cumsum(sizes), wanted)) + 1]
        is_val = np.isin(groups, taken)
        if is_val.all():
            raise ConfigError(
                f"data.val_from_train={n} with data.val_group_by={group_by}: whole {group_by} "
                f"groups take every train row ({len(train)} rows in {len(sizes)} groups); give "
                "a smaller number")
        raw["validation"] = train.select(np.flatnonzero(is_val))
        raw["train"] = train.select(np.flatnonzero(~is_val))
        log.info("validation: %d rows of %d %s groups carved from train (no %s in both)",
                 int(is_val.sum()), len(taken), group_by, group_by)

    def _subsample_train(self, raw: dict[str, datasets.Dataset]) -> None:
        n, available = self.hparams.train_size, len(raw.get("train", ()))
        if n is None:
            return
        if not (isinstance(n, int) and 0 < n <= available):
            raise ConfigError(f"data.train_size={n!r}: give a whole number of pairs from 1 to "
                              f"the training split's size ({available})")
        raw["train"] = raw["train"].shuffle(seed=self.split_seed).select(range(n))
        log.info("train: using %d of %d pairs (data.train_size)", n, available)

    # --- Lightning hooks -----------------------------------------------------------------
    def prepare_data(self) -> None:
        """Download the hub dataset into the local cache (once, before ``setup`` on any rank).

        Offline, check that the cache has it: without local files that fails within seconds.
        """
        if not self.files:
            hp = self.hparams
            download_hub_dataset(hp.hub_name, hp.hub_config, hp.cache_dir, self._local_splits())

    def setup(self, stage: str | None = None) -> None:
        """Read, tokenise, build the vocabulary (unless one was set) and index every split."""
        if self.splits:
            return
        raw = self._read()
        self._carve_validation(raw)
        self._subsample_train(raw)
        transform = self.transform or InputTransform(
            tuple(self.keys), lowercase=self.hparams.lowercase,
            max_length=self.hparams.max_length, hypothesis_only=self.hparams.hypothesis_only,
            vocab=self.vocab)
        transform.announce()
        tokenized = {split: self._tokenize(split, ds, transform) for split, ds in raw.items()}
        vocab_splits = list(self.hparams.vocab_splits)
        if transform.vocab is None:
            missing = [s for s in vocab_splits if s not in tokenized]
            if missing and self.files and missing[0] in self.split_names:
                tested = " (a test split: data.test_splits)" * (missing[0] in self.test_splits)
                raise DataError(
                    f"data.files.{missing[0]}: not set, but data.vocab_splits names it"
                    f"{tested}; give data.files.{missing[0]}=PATH")
            if missing:
                raise ConfigError(
                    f"data.vocab_splits names {missing}, which this corpus does not have "
                    f"(has {sorted(tokenized)})"
                )
            transform = transform.with_vocab(Vocabulary.from_counts(
                count_tokens(tokenized[s].data.column(f"{key}_tokens")
                             for s in vocab_splits for key in self.keys),
                min_freq=self.hparams.vocab_min_freq,
            ))
            log.info("vocabulary: %d tokens from %s", len(transform.vocab), vocab_splits)
        self.transform, self.vocab = transform, transform.vocab
        for split, ds in tokenized.items():
            self.splits[split] = self._index(split, ds)
        if self.validation_source:
            self.split_group_names["validation"] = self.split_group_names[self.validation_source]

    def _tokenize(self, split: str, ds: datasets.Dataset,
                  transform: InputTransform | None = None) -> datasets.Dataset:
        return ds.map(
            tokenize_batch, batched=True, batch_size=2000, num_proc=self._num_proc(ds),
            fn_kwargs=(transform or self.transform).tokenize_options, desc=f"tokenise {split}",
        )

    def _index(self, split: str, ds: datasets.Dataset) -> datasets.Dataset:
        ds = ds.with_format("arrow").map(
            index_table, batched=True, batch_size=20_000, fn_kwargs=self.transform.index_options,
            desc=f"index {split}",
        ).with_format(None)
        if split != "train":  # each prediction back in its row (predictions.py)
            ds = ds.add_column(ROW_KEY, np.arange(len(ds), dtype=np.int64))
        self._report_lengths(split, ds)
        return ds

    def add_test_file(self, name: str, path: str) -> None:
        """Read a further labelled test set (``extra_tests.NAME=PATH``) with the reader, label
        names and vocabulary of this run (after ``setup``): evaluated as split ``name``.

        Errors name the key: ``extra_tests.<name>: ...`` (a clash with a split of this corpus,
        a missing file, a label outside ``label_names`` with its file, line and field).
        """
        key = f"extra_tests.{name}"
        if self.transform is None:
            raise RuntimeError("add_test_file needs the input transform: call setup() first")
        check_test_set_name(name, {*self.split_names, *self.splits})
        try:
            ds = self._prepare(name, load_local_split(path, name, self.hparams.cache_dir, key),
                               str(Path(path).expanduser()))
        except DataError as err:
            message = str(err)
            raise DataError(message if message.startswith(key) else f"{key}: {message}") from None
        self.splits[name] = self._index(name, self._tokenize(name, ds))

    def _num_proc(self, ds: datasets.Dataset) -> int | None:
        num_proc = self.hparams.num_proc
        if num_proc is not None:
            return num_proc if num_proc > 1 else None
        # worker start-up costs more than small splits; a second worker on one core, too
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2
        return 2 if len(ds) >= 50_000 and cores > 1 else None

    def _report_lengths(self, split: str, ds: datasets.Dataset) -> None:
        max_length = self.transform.max_length
        for key in self.keys:
            lengths = np.asarray(ds.data.column(f"{key}_length"))
            n_long, n_empty = int((lengths > max_length).sum()), int((lengths == 0).sum())
            if n_long:
                log.warning(
                    "%s: %d %s sentence(s) longer than data.max_length=%d tokens were truncated "
                    "(longest: %d)", split, n_long, key, max_length, int(lengths.max()))
            if n_empty and not self.transform.empty_is_expected(key):
                log.warning("%s: %d empty %s sentence(s) were replaced by one <unk> token",
                            split, n_empty, key)
            self.stats[f"{split}/{key}_truncated"] = n_long
            self.stats[f"{split}/{key}_empty"] = n_empty
        self.stats[f"{split}/size"] = len(ds)

    def lengths(self, split: str) -> np.ndarray:
        """(n, number of text keys) array of token counts after truncation."""
        ds = self.splits[split]
        cols = [np.minimum(np.maximum(np.asarray(ds.data.column(f"{k}_length")), 1),
                           self.transform.max_length) for k in self.keys]
        return np.stack(cols, axis=1)

    # --- loaders -------------------------------------------------------------------------
    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        if split not in self.splits:
            raise DataError(
                f"the data has no '{split}' split (has {sorted(self.splits)}); give "
                f"data.files.{split}=PATH or carve one with data.val_from_train=N"
            )
        hp, trainer = self.hparams, getattr(self, "trainer", None)
        sampler = BucketBatchSampler(
            self.lengths(split),
            batch_size=hp.batch_size if shuffle else hp.eval_batch_size or hp.batch_size,
            shuffle=shuffle,
            seed=hp.seed,
            pool_batches=hp.pool_batches,
            num_replicas=trainer.world_size if trainer else 1,
            rank=trainer.global_rank if trainer else 0,
        )
        return DataLoader(
            self.splits[split],
            batch_sampler=sampler,
            collate_fn=PadCollator(self.keys, groups=list(self.group_names_of(split))),
            num_workers=hp.num_workers,
            persistent_workers=hp.num_workers > 0,
        )

    def transfer_batch_to_device(self, batch: Any, device: torch.device,
                                 dataloader_idx: int) -> Any:
        """Batches are flat dicts of tensors (``PadCollator``): move them without Lightning's
        generic walk over nested collections, which costs a small model's step measurably."""
        if isinstance(batch, Mapping) and all(isinstance(v, torch.Tensor) for v in batch.values()):
            return {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("validation", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        """The loader of ``test_split``: ``test``, or the set the pipeline is testing now (one
        of ``test_splits`` or an extra test set)."""
        return self._loader(self.test_split, shuffle=False)

    def dataloader(self, split: str) -> DataLoader:
        """An evaluation loader for any split (used by eval.py)."""
        return self._loader(split, shuffle=False)
