"""Local files as their authors distribute them (Stanford's SNLI / MultiNLI .jsonl and
tab-separated .txt, SICK's .txt), read with no override, and one clear line per bad input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from entailment_lab.data.datamodule import TextDataModule
from entailment_lab.errors import DataError
from entailment_lab.pipeline import train
from tests.conftest import FAST, compose_cfg, file_overrides

LABELS = ["entailment", "neutral", "contradiction"]
# conf/data/snli.yaml's columns: the hub's names first, then Stanford's.
SNLI = {"fields": {"premise": ["premise", "sentence1"], "hypothesis": ["hypothesis", "sentence2"]},
        "label_field": ["label", "gold_label"], "label_names": LABELS}

# A few pairs in Stanford's spelling: raw text, quotes that are not CSV quoting, "n/a" as text,
# and "-" (no gold label: the five annotators did not agree).
PAIRS = [
    ("A man inspects the uniform of a figure in some East Asian country.",
     "The man is sleeping", "contradiction"),
    ("An older and younger man smiling.", "Two men are smiling and laughing at the cats playing "
     "on the floor.", "neutral"),
    ('"Hello" says a black racing car on the track.', "A car is on a track.", "entailment"),
    ("A soccer game with multiple males playing.", "Some men are playing a sport.", "entailment"),
    ("A smiling costumed woman is holding an umbrella.", "n/a", "-"),
    ('A boy in a "Bud Light" shirt jumps.', "A boy is jumping.", "entailment"),
    ("Two dogs run through a field.", "The dogs are asleep.", "contradiction"),
    ("A woman sings on a stage.", "The woman is a famous singer.", "neutral"),
]
TXT_COLUMNS = ["gold_label", "sentence1_binary_parse", "sentence2_binary_parse",
               "sentence1_parse", "sentence2_parse", "sentence1", "sentence2", "captionID",
               "pairID", "label1", "label2", "label3", "label4", "label5"]


def stanford_row(i: int, premise: str, hypothesis: str, gold: str) -> dict:
    """One pair with every field of ``snli_1.0_*.jsonl``."""
    votes = [gold if gold != "-" else "neutral", "entailment", "neutral", "contradiction",
             gold if gold != "-" else "entailment"]
    parse = "( ( A x ) ( y . ) )"
    return {"annotator_labels": votes, "captionID": f"{i}.jpg#0", "gold_label": gold,
            "pairID": f"{i}.jpg#0r1{gold[0]}", "sentence1": premise,
            "sentence1_binary_parse": parse, "sentence1_parse": f"(ROOT (S {parse}))",
            "sentence2": hypothesis, "sentence2_binary_parse": parse,
            "sentence2_parse": f"(ROOT (S {parse}))"}


def stanford_text(suffix: str, pairs=PAIRS) -> str:
    """The text of ``snli_1.0_*.jsonl`` (one JSON object per line) or of ``snli_1.0_*.txt``
    (tab-separated, header row, the annotator votes in label1..label5)."""
    rows = [stanford_row(i, *pair) for i, pair in enumerate(pairs)]
    if suffix == ".jsonl":
        return "".join(json.dumps(row) + "\n" for row in rows)
    lines = [TXT_COLUMNS] + [[row[c] for c in TXT_COLUMNS[:9]] + row["annotator_labels"]
                             for row in rows]
    return "".join("\t".join(cells) + "\n" for cells in lines)


def write_stanford(path: Path, pairs=PAIRS) -> str:
    """An official-layout file, its kind (and gzip) chosen by the name of ``path``."""
    text = stanford_text(".jsonl" if ".jsonl" in path.name else ".txt", pairs)
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return str(path)


def make_dm(files: dict, spec: dict = SNLI, **kwargs) -> TextDataModule:
    return TextDataModule(files=files, vocab_splits=["train"], **spec, **kwargs)


@pytest.mark.parametrize("name", ["snli_1.0_dev.jsonl", "snli_1.0_dev.txt",
                                  "snli_1.0_dev.txt.gz", "multinli_1.0_dev.tsv"])
def test_stanford_layout_reads_with_no_override(name, tmp_path):
    dm = make_dm({"train": write_stanford(tmp_path / name)})
    dm.setup()
    gold = [g for _, _, g in PAIRS if g != "-"]
    assert dm.splits["train"]["label"] == [LABELS.index(g) for g in gold]  # "-" dropped
    words = dm.vocab.itos
    premises = [" ".join(words[i] for i in ids) for ids in dm.splits["train"]["premise_ids"]]
    assert premises[2] == '" hello " says a black racing car on the track .'  # quotes: text


def test_jsonl_and_txt_give_the_same_split(tmp_path):
    a = make_dm({"train": write_stanford(tmp_path / "a.jsonl")})
    b = make_dm({"train": write_stanford(tmp_path / "b.txt")})
    a.setup(), b.setup()
    assert a.vocab.itos == b.vocab.itos
    for column in ("premise_ids", "hypothesis_ids", "label"):
        assert a.splits["train"][column] == b.splits["train"][column]


def test_sick_release_layout_and_upper_case_names(tmp_path):
    path = tmp_path / "SICK_train.txt"
    path.write_text("pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\r\n"
                    "1\tA boy is jumping\tA child jumps\t4.5\tENTAILMENT\r\n"
                    "2\tA dog runs\tNobody runs\t3.1\tCONTRADICTION\r\n")
    spec = {"fields": {"premise": ["premise", "sentence_A"],
                       "hypothesis": ["hypothesis", "sentence_B"]},
            "label_field": ["label", "entailment_judgment"], "label_names": LABELS}
    dm = make_dm({"train": str(path)}, spec)
    dm.setup()
    assert dm.splits["train"]["label"] == [0, 2]


def test_label_ids_as_text_in_a_hub_schema_tsv(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("premise\thypothesis\tlabel\na b\tc\t2\nd e\tf\t-1\n")
    dm = make_dm({"train": str(path)})
    dm.setup()
    assert dm.splits["train"]["label"] == [2]


# --- bad input: one line with file, line, field, what is wrong and how to fix it ------------
ONE_PER_LINE = "data.files.train must name a file with one example per line"
UNKNOWN = ("field 'gold_label' (data.label_field) has the unknown label 'entails'; use the ids 0 "
           "to 2 or the names entailment, neutral, contradiction (data.label_names), or -1 / "
           "'-' for no gold label (such rows are dropped)")
TYPO = [*PAIRS[:3], ("A man sleeps.", "A man rests.", "entails")]
GOOD = json.dumps({"premise": "a", "hypothesis": "b", "label": 0}) + "\n"
BAD_INPUT = {  # file name, content -> the message after "FILE: "
    "empty.jsonl": ("\n", f"the file is empty; {ONE_PER_LINE}"),
    "empty.txt": ("", f"the file is empty; {ONE_PER_LINE}"),
    "header_only.txt": (stanford_text(".txt", []), f"no rows below the header row; {ONE_PER_LINE}"),
    "typo.jsonl": (stanford_text(".jsonl", TYPO), f"line 4: {UNKNOWN}"),
    "typo.txt": (stanford_text(".txt", TYPO), f"line 5: {UNKNOWN}"),  # after the header row
    "mixed.jsonl": (GOOD + GOOD.replace("0", '"neutral"'),
                    "line 2: field 'label' (data.label_field) holds 'neutral' where an earlier "
                    "row holds 0; use the ids 0 to 2 or the names entailment, neutral, "
                    "contradiction (data.label_names), or -1 / '-' for no gold label (such rows "
                    "are dropped), one kind throughout the file"),
    # Arrow reads the column as floats throughout: the line is found in the file itself
    "float.jsonl": (GOOD * 3 + GOOD.replace('"label": 0', '"label": 1.0'),
                    "line 4: field 'label' (data.label_field) holds 1.0; use the ids 0 to 2 or "
                    "the names entailment, neutral, contradiction (data.label_names), or -1 / "
                    "'-' for no gold label (such rows are dropped), one kind throughout the file"),
    "number.jsonl": (GOOD + GOOD.replace('"a"', "12"),
                     "line 2: field 'premise' (data.fields.premise) holds 12, not text; write "
                     "every sentence as a string"),
    "comma.jsonl": (GOOD + "\n" + GOOD.replace('"b"', '"b'),
                    "line 3, column 37: not valid JSON (Expecting ',' delimiter); each line must "
                    "be one JSON object"),
    "cut.jsonl": (GOOD + '{"premise": "a',
                  "line 2, column 13: not valid JSON (Unterminated string starting); each line "
                  "must be one JSON object"),
    "renamed.txt": ("gold_label\tsentence1\tsentence_2\nneutral\ta\tb\n",
                    "no field 'hypothesis' or 'sentence2' (fields found: gold_label, sentence1, "
                    "sentence_2); set data.fields.hypothesis to the column that holds it (a "
                    "delimited file's first line must be its header row)"),
    "null.jsonl": (GOOD + GOOD.replace('"b"', "null"),
                   "line 2: field 'hypothesis' (data.fields.hypothesis) is missing or null; give "
                   "every row a value or remove the row"),
    "extra_tab.txt": ("gold_label\tsentence1\tsentence2\nneutral\ta\tb\n\nneutral\ta\tb\tc\n",
                      "line 4: 4 tab-separated fields where the header row has 3; every row "
                      "needs one field per header column"),
    "twice.tsv": ("gold_label\tsentence1\tsentence1\nneutral\ta\tb\n",
                  "line 1: the header row must name every column once (repeated or empty: "
                  "'sentence1'); fix the first line of the file"),
    "latin1.txt": ("gold_label\tsentence1\tsentence2\nneutral\tcaf\xe9\tb\n".encode("latin-1"),
                   "line 2, column 12: not UTF-8 text (byte 0xe9); save the file as UTF-8"),
}


@pytest.mark.parametrize("name", BAD_INPUT)
def test_bad_input_gets_one_line(name, tmp_path, capfd, caplog):
    content, expected = BAD_INPUT[name]
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(DataError) as err:
        make_dm({"train": str(path)}).setup()
    assert str(err.value) == f"{path}: {expected}"
    printed = capfd.readouterr()
    assert "Failed to" not in printed.out + printed.err + caplog.text  # no builder [ERROR] line


# --- end to end: the official files train through the real pipeline, no override -----------
@pytest.mark.parametrize("suffix", [".jsonl", ".txt"])
def test_official_snli_files_train_end_to_end(suffix, tmp_path):
    folder = tmp_path / "snli_1.0"
    folder.mkdir()
    files = {split: write_stanford(folder / f"snli_1.0_{name}{suffix}")
             for split, name in (("train", "train"), ("validation", "dev"), ("test", "test"))}
    run = tmp_path / "run"
    cfg = compose_cfg(["model=lstm", "dim=16", "model.net.mlp_size=16", *FAST,
                       *file_overrides(files), "debug=fast"], run)
    metrics = train(cfg)
    assert 0.0 <= metrics["test/acc"] <= 1.0
    results = json.loads((run / "results.json").read_text())
    assert results["status"] == "completed"
    assert results["data_stats"]["test/size"] == len(PAIRS) - 1  # the "-" pair dropped


def test_the_explicit_overrides_of_the_issue_still_work(tmp_path):
    import hydra

    path = write_stanford(tmp_path / "snli_1.0_dev.txt")
    cfg = compose_cfg(["data.fields.premise=sentence1", "data.fields.hypothesis=sentence2",
                       "data.label_field=gold_label", f"data.files.train={path}",
                       "data.vocab_splits=[train]"], tmp_path)
    dm = hydra.utils.instantiate(cfg.data)
    dm.setup()
    assert len(dm.splits["train"]) == len(PAIRS) - 1


def test_hub_data_errors_name_the_split_and_row():
    import datasets

    from entailment_lab.data.sources import prepare_split

    columns = {"premise": ["premise"], "hypothesis": ["hypothesis"], "label": ["label"]}
    ds = datasets.Dataset.from_dict({"premise": ["a", "b"], "hypothesis": ["c", None],
                                     "label": [0, -1]})
    with pytest.raises(DataError, match=r"^split 'test': row 1: field 'hypothesis' "
                                        r"\(data\.fields\.hypothesis\) is missing or null"):
        prepare_split(ds, "test", columns, LABELS, [-1], None)
    ok = prepare_split(ds.select([0]), "test", columns, LABELS, [-1], None)
    assert ok["label"] == [0] and ok.column_names == ["premise", "hypothesis", "label"]
