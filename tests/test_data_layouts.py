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


def open_out(path: Path):
    return gzip.open(path, "wt", encoding="utf-8") if path.suffix == ".gz" else path.open("w")


def write_stanford(path: Path, pairs=PAIRS) -> str:
    """``snli_1.0_*.jsonl`` (one JSON object per line) or ``snli_1.0_*.txt`` (tab-separated,
    header row, annotator votes in label1..label5) by the suffix of ``path``."""
    rows = [stanford_row(i, *pair) for i, pair in enumerate(pairs)]
    with open_out(path) as f:
        if ".jsonl" in path.name:
            f.writelines(json.dumps(row) + "\n" for row in rows)
        else:
            f.write("\t".join(TXT_COLUMNS) + "\n")
            for row in rows:
                cells = [row[c] for c in TXT_COLUMNS[:9]] + row["annotator_labels"]
                f.write("\t".join(cells) + "\n")
    return str(path)


def make_dm(files: dict, spec: dict = SNLI, **kwargs) -> TextDataModule:
    return TextDataModule(files=files, vocab_splits=["train"], **spec, **kwargs)


def setup_error(path: str, spec: dict = SNLI) -> str:
    with pytest.raises(DataError) as err:
        make_dm({"train": path}, spec).setup()
    message = str(err.value)
    assert "\n" not in message
    return message


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
def test_empty_file(tmp_path):
    for name in ("empty.jsonl", "empty.txt"):
        (tmp_path / name).write_text("\n")
        message = setup_error(str(tmp_path / name))
        assert message.startswith(f"{tmp_path / name}: the file is empty; data.files.train")
    (tmp_path / "head.txt").write_text("\t".join(TXT_COLUMNS) + "\n")
    assert "no rows below the header row" in setup_error(str(tmp_path / "head.txt"))


def test_unknown_label_name_names_line_field_and_the_accepted_names(tmp_path):
    pairs = [*PAIRS[:3], ("A man sleeps.", "A man rests.", "entails")]
    for suffix, line in ((".jsonl", 4), (".txt", 5)):  # the .txt has a header row
        path = write_stanford(tmp_path / f"snli{suffix}", pairs)
        message = setup_error(path)
        assert message == (
            f"{path}: line {line}: field 'gold_label' (data.label_field) has the unknown label "
            "'entails'; use the ids 0 to 2 or the names entailment, neutral, contradiction "
            "(data.label_names), or -1 / '-' for no gold label (such rows are dropped)")


def test_ids_and_names_mixed_names_the_line_without_arrow_types(tmp_path):
    path = tmp_path / "mixed.jsonl"
    rows = [{"premise": "a", "hypothesis": "b", "label": 0},
            {"premise": "a", "hypothesis": "b", "label": "neutral"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    message = setup_error(str(path))
    assert message.startswith(f"{path}: line 2: field 'label' (data.label_field) holds "
                              "'neutral' where an earlier row holds 0; use the ids 0 to 2")
    assert "arrow" not in message.lower()


def test_text_field_that_is_not_text(tmp_path):
    path = tmp_path / "num.jsonl"
    rows = [{"premise": "a", "hypothesis": "b", "label": 0},
            {"premise": 12, "hypothesis": "b", "label": 1}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert setup_error(str(path)) == (
        f"{path}: line 2: field 'premise' (data.fields.premise) holds 12, not text; write every "
        "sentence as a string")


def test_malformed_json_has_one_column_and_no_loader_error_line(tmp_path, capfd, caplog):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"premise": "a", "hypothesis": "b", "label": 0}\n\n'
                    '{"premise": "a", "hypothesis": "b, "label": 0}\n')
    message = setup_error(str(path))
    assert message.startswith(f"{path}: line 3, column ")
    assert "not valid JSON" in message and "at at" not in message
    assert "each line must be one JSON object" in message
    captured = capfd.readouterr()
    assert "Failed to load JSON" not in captured.out + captured.err + caplog.text


def test_unterminated_string_reads_cleanly(tmp_path):
    path = tmp_path / "cut.jsonl"
    path.write_text('{"premise": "a", "hypothesis": "b", "label": 0}\n{"premise": "a')
    message = setup_error(str(path))
    assert f"{path}: line 2, column 13: not valid JSON (Unterminated string starting)" in message


def test_missing_field_names_the_knob_and_header_row(tmp_path):
    path = tmp_path / "snli.txt"
    path.write_text("gold_label\tsentence1\tsentence_2\nneutral\ta\tb\n")
    message = setup_error(str(path))
    assert message == (
        f"{path}: no field 'hypothesis' or 'sentence2' (fields found: gold_label, sentence1, "
        "sentence_2); set data.fields.hypothesis to the column that holds it (a delimited "
        "file's first line must be its header row)")


def test_null_field_names_line_field_knob_and_fix(tmp_path):
    path = tmp_path / "gap.jsonl"
    rows = [stanford_row(0, *PAIRS[0]), {**stanford_row(1, *PAIRS[1]), "sentence2": None}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert setup_error(str(path)) == (
        f"{path}: line 2: field 'sentence2' (data.fields.hypothesis) is missing or null; give "
        "every row a value or remove the row")


def test_extra_tab_names_the_line(tmp_path):
    path = tmp_path / "snli.txt"
    path.write_text("gold_label\tsentence1\tsentence2\nneutral\ta\tb\n\nneutral\ta\tb\tc\n")
    assert setup_error(str(path)) == (
        f"{path}: line 4: 4 tab-separated fields where the header row has 3; every row needs "
        "one field per header column")


def test_repeated_header_column(tmp_path):
    path = tmp_path / "snli.tsv"
    path.write_text("gold_label\tsentence1\tsentence1\nneutral\ta\tb\n")
    assert "line 1: the header row must name every column once" in setup_error(str(path))


def test_not_utf8(tmp_path):
    path = tmp_path / "latin.txt"
    path.write_bytes("gold_label\tsentence1\tsentence2\nneutral\tcaf\xe9\tb\n".encode("latin-1"))
    message = setup_error(str(path))
    assert message.startswith(f"{path}: cannot be read") and "UTF-8" in message


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
