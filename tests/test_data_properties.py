"""Properties of the data layer over random files (the ``hypothesis`` library): every layout a
user may download or write (the hub's schema as .jsonl, Stanford's / MultiNLI's .jsonl and
15-column .txt, .csv), gzip-compressed or not, with a byte-order mark or not, CRLF or LF line
ends, quotes inside sentences, and rows without a gold label (``-`` / ``-1``) anywhere.

Invariants: reading never crashes (a bad setting is one ``ConfigError`` line); exactly the
no-gold rows are dropped; every kept row keeps its own sentences, label and group values
(genre, overlap bucket); a validation split carved by premise shares no premise with train;
the same rows in two layouts give the same dataset.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import os
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import datasets
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from entailment_lab.data.datamodule import TextDataModule
from entailment_lab.data.text import UNK, tokenize
from entailment_lab.data.transform import overlap_bucket
from entailment_lab.errors import ConfigError

LABELS = ("entailment", "neutral", "contradiction")
GENRES = ("fiction", "government", "slate", "telephone", "travel")
# conf/data/mnli.yaml's columns: the hub's names first, then Stanford's / MultiNLI's.
SPEC = {"fields": {"premise": ["premise", "sentence1"], "hypothesis": ["hypothesis", "sentence2"]},
        "label_field": ["label", "gold_label"], "label_names": list(LABELS),
        "group_fields": ["genre"]}
MNLI_TXT = ("gold_label", "sentence1_binary_parse", "sentence2_binary_parse", "sentence1_parse",
            "sentence2_parse", "sentence1", "sentence2", "promptID", "pairID", "genre", "label1",
            "label2", "label3", "label4", "label5")
LAYOUTS = ("hub.jsonl", "mnli.jsonl", "mnli.txt", "hub.csv")
# About 20 s on two busy cores; the same examples on every run (derandomize), none stored.
# A longer search: PROPERTY_EXAMPLES=300 pytest tests/test_data_properties.py (random).
EXAMPLES = int(os.environ.get("PROPERTY_EXAMPLES", 0))
PROPERTY = settings(max_examples=EXAMPLES or 12, deadline=None, derandomize=not EXAMPLES,
                    database=None, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

pytestmark = pytest.mark.usefixtures("one_thread")


@dataclass(frozen=True)
class Pair:
    premise: str
    hypothesis: str
    label: int  # -1: no gold label
    genre: str


# Sentences any layout can hold (no tab, no line break), with the quotes, commas and
# apostrophes that trip CSV and TSV readers, mixed case and a few non-ASCII letters.
sentences = st.text(alphabet=list("abcABC xyz'\",.!?-0é"), max_size=24)
labels = st.sampled_from([-1, 0, 1, 2])
genres = st.sampled_from(GENRES)
pairs = st.builds(Pair, sentences, sentences, labels, genres)
options = st.fixed_dictionaries({"gzip": st.booleans(), "bom": st.booleans(),
                                 "crlf": st.booleans(), "names": st.booleans()})


def _gold(pair: Pair) -> str:
    return LABELS[pair.label] if pair.label >= 0 else "-"


def layout_text(rows: list[Pair], layout: str, names: bool, eol: str) -> str:
    """The rows as one file of ``layout``; ``names``: the hub-schema layouts write label names
    (``-`` for no gold label) instead of ids."""
    def hub_label(pair: Pair) -> int | str:
        return _gold(pair) if names else pair.label

    if layout == "hub.jsonl":
        lines = [json.dumps({"premise": p.premise, "hypothesis": p.hypothesis,
                             "label": hub_label(p), "genre": p.genre}) for p in rows]
        return "".join(line + eol for line in lines)
    if layout == "mnli.jsonl":  # MultiNLI's own fields, in its order
        lines = [json.dumps({
            "annotator_labels": [_gold(p) if p.label >= 0 else "neutral"] * 5, "genre": p.genre,
            "gold_label": _gold(p), "pairID": f"{i}e", "promptID": str(i),
            "sentence1": p.premise, "sentence1_binary_parse": "( ( A x ) . )",
            "sentence1_parse": "(ROOT (S x))", "sentence2": p.hypothesis,
            "sentence2_binary_parse": "( y . )", "sentence2_parse": "(ROOT (S y))"})
            for i, p in enumerate(rows)]
        return "".join(line + eol for line in lines)
    if layout == "mnli.txt":  # tab-separated, quotes as text (not CSV quoting)
        cells = [MNLI_TXT] + [
            [_gold(p), "( x )", "( y )", "(ROOT x)", "(ROOT y)", p.premise, p.hypothesis,
             str(i), f"{i}e", p.genre, *[_gold(p)] * 5] for i, p in enumerate(rows)]
        return "".join("\t".join(line) + eol for line in cells)
    buffer = io.StringIO()  # hub.csv: CSV quoting
    writer = csv.writer(buffer, lineterminator=eol)
    writer.writerow(["premise", "hypothesis", "label", "genre"])
    for p in rows:
        writer.writerow([p.premise, p.hypothesis, hub_label(p), p.genre])
    return buffer.getvalue()


def write(folder: Path, name: str, rows: list[Pair], layout: str, opts: dict) -> str:
    """Write ``rows`` as ``folder/name.<layout's suffix>[.gz]`` with the file options."""
    text = layout_text(rows, layout, opts["names"], "\r\n" if opts["crlf"] else "\n")
    data = (("\ufeff" if opts["bom"] else "") + text).encode("utf-8")
    path = folder / f"{name}.{layout.split('.')[1]}{'.gz' if opts['gzip'] else ''}"
    path.write_bytes(gzip.compress(data) if opts["gzip"] else data)
    return str(path)


def setup(folder: Path, files: dict[str, str], **kwargs) -> TextDataModule:
    datasets.disable_progress_bars()
    carved = ["validation"] * bool(kwargs.get("val_from_train"))
    dm = TextDataModule(files=files, cache_dir=str(folder / "hf"),
                        vocab_splits=[*files, *carved], **SPEC, **kwargs)
    dm.setup()
    return dm


def words(text: str) -> tuple[str, ...]:
    """A sentence as the network reads it: lower-cased tokens, an empty one as ``<unk>``."""
    return tuple(tokenize(text, lowercase=True)) or (UNK,)


def expected(pair: Pair) -> tuple:
    return (words(pair.premise), words(pair.hypothesis), pair.label, pair.genre,
            overlap_bucket(tokenize(pair.premise, True), tokenize(pair.hypothesis, True)))


def rows_of(dm: TextDataModule, split: str) -> list[tuple]:
    """Each row of a set-up split as (premise words, hypothesis words, label, genre, bucket)."""
    itos, ds = dm.vocab.itos, dm.splits[split]
    genre_names = dm.group_names_of(split)["genre"]
    return [(tuple(itos[i] for i in p), tuple(itos[i] for i in h), label, genre_names[g], o)
            for p, h, label, g, o in zip(ds["premise_ids"], ds["hypothesis_ids"], ds["label"],
                                         ds["group_genre"], ds["group_overlap"], strict=True)]


def with_gold(rows: list[Pair]) -> list[Pair]:
    return [p for p in rows if p.label >= 0]


files_of_rows = st.lists(pairs, min_size=1, max_size=25).filter(lambda r: with_gold(r))


@PROPERTY
@given(layout=st.sampled_from(LAYOUTS), opts=options, train=files_of_rows, test=files_of_rows)
def test_exactly_the_no_gold_rows_are_dropped_and_each_row_keeps_its_values(layout, opts, train,
                                                                            test):
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        dm = setup(folder, {"train": write(folder, "train", train, layout, opts),
                            "test": write(folder, "test", test, layout, opts)})
        for split, rows in (("train", train), ("test", test)):
            assert dm.stats[f"{split}/no_gold"] == len(rows) - len(with_gold(rows))
            assert rows_of(dm, split) == [expected(p) for p in with_gold(rows)]  # in order


@PROPERTY
@given(layout=st.sampled_from(LAYOUTS), opts=options,
       premises=st.lists(sentences, min_size=1, max_size=6, unique_by=words),
       picks=st.lists(st.tuples(st.integers(0, 5), sentences, labels, genres), min_size=4,
                      max_size=30).filter(lambda picks: any(p[2] >= 0 for p in picks)),
       size=st.one_of(st.integers(1, 10), st.floats(0.05, 0.95)), grouped=st.booleans(),
       seed=st.integers(0, 3))
def test_validation_carved_from_train_after_the_drop(layout, opts, premises, picks, size,
                                                     grouped, seed):
    """SNLI's protocol: train's no-gold rows scattered, validation carved from what is kept,
    by whole premise groups or pair by pair: rows neither lost, doubled, nor changed."""
    rows = [Pair(premises[i % len(premises)], h, label, genre) for i, h, label, genre in picks]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        try:
            dm = setup(folder, {"train": write(folder, "train", rows, layout, opts)},
                       val_from_train=size, val_group_by="premise" if grouped else None,
                       split_seed=seed)
        except ConfigError as err:  # too few rows kept for the carve: said in one line
            assert str(err).startswith("data.val_from_train=") and "\n" not in str(err)
            return
        kept = with_gold(rows)
        wanted = int(size) if size >= 1 else math.ceil(size * len(kept))
        got = {s: rows_of(dm, s) for s in ("train", "validation")}
        assert Counter(got["train"] + got["validation"]) == Counter(map(expected, kept))
        assert dm.stats["train/no_gold"] == len(rows) - len(kept)
        if grouped:
            shared = {r[0] for r in got["train"]} & {r[0] for r in got["validation"]}
            assert not shared and len(got["validation"]) >= wanted
        else:
            assert len(got["validation"]) == wanted


@PROPERTY
@given(layouts=st.lists(st.sampled_from(LAYOUTS), min_size=2, max_size=2, unique=True),
       opts=st.lists(options, min_size=2, max_size=2), train=files_of_rows, test=files_of_rows)
def test_the_same_rows_in_two_layouts_give_the_same_dataset(layouts, opts, train, test):
    built = []
    with tempfile.TemporaryDirectory() as tmp:
        for n, (layout, o) in enumerate(zip(layouts, opts, strict=True)):
            folder = Path(tmp) / str(n)
            folder.mkdir()
            dm = setup(folder, {"train": write(folder, "train", train, layout, o),
                                "test": write(folder, "test", test, layout, o)})
            built.append((dm.vocab.itos, {s: (dm.group_names_of(s), dm.splits[s].to_dict())
                                          for s in dm.splits}))
    assert built[0] == built[1]


def test_a_file_of_no_gold_rows_only_is_one_line(tmp_path):
    rows = [Pair("a b", "c", -1, "slate")] * 3
    path = write(tmp_path, "train", rows, "mnli.jsonl", {"gzip": False, "bom": False,
                                                         "crlf": False, "names": False})
    with pytest.raises(Exception) as err:
        setup(tmp_path, {"train": path})
    assert str(err.value) == (f"{path}: every one of its 3 rows has a label in "
                              "data.drop_labels=[-1] (no gold label), so nothing is left; give "
                              "a file with gold labels")


@settings(max_examples=EXAMPLES or 60, deadline=None, derandomize=not EXAMPLES, database=None)
@given(sentences=st.lists(st.lists(st.sampled_from(["a", "b", "<unk>", "é", "x y", ""]),
                                   max_size=7), max_size=12),
       known=st.lists(st.sampled_from(["a", "é", "x y", "z"]), unique=True),
       max_length=st.integers(1, 8), offset=st.integers(0, 3))
def test_arrow_indexing_is_the_word_by_word_reading(sentences, known, max_length, offset):
    """``index_table`` (Arrow, on a slice of a table as ``datasets`` hands it over) gives what
    looking each word up does: its id or ``<unk>``'s, at most ``max_length`` of them, one
    ``<unk>`` for an empty sentence; and the length before truncation."""
    import pyarrow as pa

    from entailment_lab.data.text import UNK_ID, Vocabulary
    from entailment_lab.data.transform import index_table

    vocab = Vocabulary(["<pad>", UNK, *known])
    padded = [["a"]] * offset + sentences
    table = pa.table({"sentence_tokens": pa.array(padded, pa.list_(pa.string()))})
    out = index_table(table.slice(offset), ["sentence"], vocab.itos, max_length).to_pydict()
    assert out["sentence_ids"] == [[vocab.stoi.get(t, UNK_ID) for t in s[:max_length]]
                                   or [UNK_ID] for s in sentences]
    assert out["sentence_length"] == [len(s) for s in sentences]
