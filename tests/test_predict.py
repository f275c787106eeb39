"""predict.py: labels and probabilities for your own pairs, streamed, as training reads them."""

from __future__ import annotations

import csv
import gzip
import json
import math
from pathlib import Path

import pytest

import entailment_lab.predict as predict_module
from entailment_lab.cli import run_task
from entailment_lab.errors import ConfigError, DataError
from entailment_lab.pipeline import evaluate, load_trained, train
from entailment_lab.predict import Predictor, predict, predict_file
from tests.conftest import FAST, compose_cfg, file_overrides
from tests.entry_points import run_entry_point

LSTM = ["model=lstm", "dim=16", "model.net.mlp_size=32"]
PAIR = {"premise": ["premise"], "hypothesis": ["hypothesis"]}


def trained(files: dict[str, str], out: Path, *overrides: str) -> str:
    """The best checkpoint of a small LSTM trained on ``files`` (no early stopping)."""
    train(compose_cfg([*LSTM, *FAST, *file_overrides(files), "optimizer.lr=0.01",
                       "scheduler=none", "callbacks.early_stopping=null", "eval_train=false",
                       *overrides], out))
    return json.loads((out / "results.json").read_text())["best_checkpoint"]


@pytest.fixture(scope="module")
def ckpt(pair_files, tmp_path_factory) -> str:
    return trained(pair_files, tmp_path_factory.mktemp("run"), "trainer.max_epochs=12",
                   "model.net.dropout=0.0", "seed=2")


@pytest.fixture(scope="module")
def predictor(ckpt) -> Predictor:
    module, _, _ = load_trained(ckpt)
    return Predictor(module)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def predict_cfg(ckpt: str, tmp_path: Path, *overrides: str):
    return compose_cfg([f"ckpt_path={ckpt}", *overrides], tmp_path / "job", config_name="predict")


def test_file_predictions_keep_fields_and_match_evaluation(ckpt, pair_files, tmp_path):
    """The test split through predict.py gives eval.py's accuracy: same tokens, same ids."""
    rows = read_jsonl(Path(pair_files["test"]))
    source = write_jsonl(tmp_path / "test.jsonl", [{"id": i, **row} for i, row in
                                                   enumerate(rows)])
    output = tmp_path / "preds.jsonl"
    result = predict(predict_cfg(ckpt, tmp_path, f"input={source}", f"output={output}",
                                 "batch_size=7"))
    preds = read_jsonl(output)
    assert result["rows"] == len(rows) == len(preds)
    assert [p["id"] for p in preds] == list(range(len(rows)))  # input order, fields kept
    assert all(p["premise"] == r["premise"] and p["label"] == r["label"]
               for p, r in zip(preds, rows, strict=True))
    names = ["entailment", "neutral", "contradiction"]
    for p in preds:
        assert list(p["probabilities"]) == names
        assert sum(p["probabilities"].values()) == pytest.approx(1.0, abs=1e-5)
        assert p["prediction"] == max(names, key=p["probabilities"].get)
    assert len({p["prediction"] for p in preds}) > 1  # a model that tells pairs apart
    accuracy = sum(p["prediction"] == names[p["label"]] for p in preds) / len(preds)
    evaluated = evaluate(compose_cfg([f"ckpt_path={ckpt}", "trainer.enable_model_summary=false"],
                                     tmp_path / "eval", config_name="eval"))
    assert accuracy == pytest.approx(evaluated["test/acc"])


def test_logged_losses_are_means_over_pairs_whatever_the_batch_size(ckpt, pair_files, tmp_path):
    """One checkpoint, three evaluation batch sizes (300 = 256 + 44 at the default once gave
    another test/loss than 100 or 300): the same test/loss, the mean cross-entropy per pair
    of predict.py's probabilities."""
    losses = {}
    for size in (7, 16, 256):
        evaluated = evaluate(compose_cfg([f"ckpt_path={ckpt}", f"data.eval_batch_size={size}",
                                          "trainer.enable_model_summary=false"],
                                         tmp_path / f"eval{size}", config_name="eval"))
        losses[size] = evaluated["test/loss"]
    output = tmp_path / "preds.jsonl"
    predict_file(Predictor(load_trained(ckpt)[0]), pair_files["test"], output, PAIR)
    names = ["entailment", "neutral", "contradiction"]
    per_pair = [-math.log(row["probabilities"][names[row["label"]]])
                for row in read_jsonl(output)]
    assert len(per_pair) == 30 and len({round(v, 3) for v in per_pair}) > 1
    for loss in losses.values():  # probabilities are rounded to 6 digits in the file
        assert loss == pytest.approx(sum(per_pair) / len(per_pair), rel=1e-4)
    assert losses[7] == pytest.approx(losses[256], rel=1e-6)
    assert losses[16] == pytest.approx(losses[256], rel=1e-6)


@pytest.fixture(scope="module")
def only_ckpt(pair_files, tmp_path_factory) -> str:
    """A hypothesis-only LSTM (data.hypothesis_only=true) that tells hypotheses apart."""
    return trained(pair_files, tmp_path_factory.mktemp("only"), "data.hypothesis_only=true",
                   "trainer.max_epochs=8", "seed=3")


def test_a_hypothesis_only_checkpoint_predicts_as_eval_evaluates(only_ckpt, pair_files,
                                                                   tmp_path):
    """predict.py reads the hypothesis alone, as the run trained and eval.py evaluates: the same
    accuracy on a labelled file whose no-gold rows (label -1, predicted but not scored) sit
    mid-file, and probabilities that no premise changes."""
    rows = read_jsonl(Path(pair_files["test"]))
    for i in (3, 11, 20):
        rows.insert(i, {**rows[i], "label": -1})
    source = write_jsonl(tmp_path / "test.jsonl", rows)
    output, swapped = tmp_path / "preds.jsonl", tmp_path / "swapped.jsonl"
    predict(predict_cfg(only_ckpt, tmp_path, f"input={source}", f"output={output}"))
    preds = read_jsonl(output)
    assert len(preds) == len(rows) == 33  # every row predicted, the no-gold ones too
    names = ["entailment", "neutral", "contradiction"]
    gold = [p for p in preds if p["label"] >= 0]
    accuracy = sum(p["prediction"] == names[p["label"]] for p in gold) / len(gold)
    evaluated = evaluate(compose_cfg([f"ckpt_path={only_ckpt}", f"data.files.test={source}",
                                      "trainer.enable_model_summary=false"], tmp_path / "eval",
                                     config_name="eval"))
    assert accuracy == pytest.approx(evaluated["test/acc"])
    write_jsonl(tmp_path / "other.jsonl", [{**row, "premise": "zebras juggle fire ."}
                                           for row in rows])
    predict(predict_cfg(only_ckpt, tmp_path, f"input={tmp_path / 'other.jsonl'}",
                        f"output={swapped}"))
    assert [p["probabilities"] for p in read_jsonl(swapped)] == [p["probabilities"]
                                                                  for p in preds]
    # the premise may be left out: of a file's rows, or of one pair on the command line
    bare, bare_out = tmp_path / "bare.jsonl", tmp_path / "bare_preds.jsonl"
    write_jsonl(bare, [{k: v for k, v in row.items() if k != "premise"} for row in rows])
    predict(predict_cfg(only_ckpt, tmp_path, f"input={bare}", f"output={bare_out}"))
    assert [p["probabilities"] for p in read_jsonl(bare_out)] == [p["probabilities"]
                                                                   for p in preds]
    one = predict(predict_cfg(only_ckpt, tmp_path, f"hypothesis={rows[0]['hypothesis']}"))
    assert one["probabilities"] == pytest.approx(preds[0]["probabilities"], abs=1e-6)
    with pytest.raises(ConfigError, match=r"^data\.hypothesis_only=False: a checkpoint reads "
                                          r"its data as its training did"):
        evaluate(compose_cfg([f"ckpt_path={only_ckpt}", "+data.hypothesis_only=false"],
                             tmp_path / "eval2", config_name="eval"))


def test_batch_size_does_not_change_predictions(predictor, pair_files, tmp_path):
    source = Path(pair_files["validation"])
    one, many = tmp_path / "one.jsonl", tmp_path / "many.jsonl"
    predict_file(predictor, source, one, PAIR, batch_size=1)
    predict_file(predictor, source, many, PAIR, batch_size=64)
    for a, b in zip(read_jsonl(one), read_jsonl(many), strict=True):
        assert a["prediction"] == b["prediction"]
        for name, p in a["probabilities"].items():
            assert b["probabilities"][name] == pytest.approx(p, abs=1e-5)


def test_unknown_words_case_and_empty_sentences_as_in_training(predictor):
    """Unknown words are <unk> (two unseen words read the same), the run lower-cases, and an
    empty sentence is one <unk>, as training reads them."""
    probs = predictor.probabilities([
        {"premise": "a woman is qwzx .", "hypothesis": "a person is kicking ."},
        {"premise": "a woman is blorf .", "hypothesis": "a person is kicking ."},
        {"premise": "A WOMAN is blorf .", "hypothesis": "A Person is kicking ."},
        {"premise": "a woman .", "hypothesis": ""},
        {"premise": "a woman .", "hypothesis": "zzzz"},
    ])
    assert probs[0] == pytest.approx(probs[1]) and probs[1] == pytest.approx(probs[2])
    assert probs[3] == pytest.approx(probs[4])
    assert predictor.counts["hypothesis_empty"] == 1


def test_csv_and_tsv_with_mapped_columns(ckpt, tmp_path):
    source = tmp_path / "snli.csv"
    source.write_text('\ufeffpairID,sentence1,sentence2\n'  # a spreadsheet's BOM
                      'p1,"A man, tall, is cooking .",A person cooks .\n'
                      '\n'
                      'p2,"A cat sleeps\non a wall .",A dog barks .\n')
    predict(predict_cfg(ckpt, tmp_path, f"input={source}", "fields.premise=sentence1",
                        "fields.hypothesis=sentence2"))
    with (tmp_path / "job" / "predictions.csv").open(newline="") as f:
        out = list(csv.DictReader(f))  # default output: the input's format, in the job folder
    assert [r["pairID"] for r in out] == ["p1", "p2"]
    assert out[0]["sentence1"] == "A man, tall, is cooking ." and "\n" in out[1]["sentence1"]
    assert set(out[0]) == {"pairID", "sentence1", "sentence2", "prediction", "prob_entailment",
                           "prob_neutral", "prob_contradiction"}
    tsv = tmp_path / "pairs.tsv.gz"
    with gzip.open(tsv, "wt") as f:
        f.write("premise\thypothesis\na man sleeps .\ta person rests .\n")
    output = tmp_path / "preds.tsv"
    predict(predict_cfg(ckpt, tmp_path, f"input={tsv}", f"output={output}"))
    header, row = output.read_text().splitlines()
    assert header.split("\t")[:3] == ["premise", "hypothesis", "prediction"]
    assert row.split("\t")[2] in ("entailment", "neutral", "contradiction")


def test_one_pair_is_printed(ckpt, tmp_path, capsys):
    result = predict(predict_cfg(ckpt, tmp_path, "premise=A man is cooking .",
                                 "hypothesis=A person cooks ."))
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed == result and printed["premise"] == "A man is cooking ."
    assert set(printed["probabilities"]) == {"entailment", "neutral", "contradiction"}
    with pytest.raises(ConfigError, match="reads premise and hypothesis: give premise=... "
                                          "hypothesis=..."):
        predict(predict_cfg(ckpt, tmp_path, "sentence=A man is cooking ."))


@pytest.mark.parametrize(("content", "message"), [
    ('{"premise": "a", "hypothesis": "b"}\n{"premise": "a", "hypo\n', r"line 2: not valid JSON"),
    # a missing "}" at the line's end: the column just past the end, not column 1 of "line 2"
    ('{"premise": "a", "hypothesis": "b"}\r\n{"premise": "a", "hypothesis": "b"\r\n',
     r"line 2: not valid JSON \(Expecting ',' delimiter at column 35\)"),
    ('{"premise": "a", "hypothesis": "b"}\n\n["a", "b"]\n', r"line 3: expected a JSON object"),
    ('{"premise": "a", "hypothesis": "b"}\n{"premise": "a", "hyp": "b"}\n',
     r"line 2: no field 'hypothesis' \(it has 'premise', 'hyp'\); name the hypothesis column "
     r"with fields.hypothesis=NAME"),
    ('{"premise": "a", "hypothesis": null}\n', r"line 1: field 'hypothesis' is null, not text"),
    ('{"premise": 42, "hypothesis": "b"}\n', r"line 1: field 'premise' is 42, not text"),
    ('{"premise": "a", "hypothesis": "b", "prediction": "x"}\n',
     r"line 1: the input already has a field 'prediction'"),
])
def test_a_bad_line_is_named_and_no_output_is_left(predictor, tmp_path, content, message):
    source = tmp_path / "pairs.jsonl"
    source.write_text(content)
    with pytest.raises(DataError, match=f"{source} {message}"):
        predict_file(predictor, source, tmp_path / "out" / "preds.jsonl", PAIR, batch_size=1)
    assert list((tmp_path / "out").iterdir()) == []  # neither the output nor a temporary


def test_a_short_csv_row_is_named(predictor, tmp_path):
    source = tmp_path / "pairs.csv"
    source.write_text("premise,hypothesis\na,b\nonly one value\n")
    with pytest.raises(DataError, match=r"pairs.csv line 3: 1 values for 2 columns"):
        predict_file(predictor, source, tmp_path / "preds.csv", PAIR)
    assert not (tmp_path / "preds.csv").exists()


def test_the_file_is_streamed_in_batches(predictor, tmp_path, monkeypatch):
    """Never more than one batch read ahead of the predictions."""
    source = write_jsonl(tmp_path / "pairs.jsonl",
                         [{"premise": f"a woman {i} .", "hypothesis": "a person ."}
                          for i in range(23)])
    read, batches = [0], []
    real_read_rows = predict_module.read_rows

    def counting(path):
        for row in real_read_rows(path):
            read[0] += 1
            yield row

    real_probabilities = Predictor.probabilities

    def recording(self, texts):
        batches.append((len(texts), read[0]))
        return real_probabilities(self, texts)

    monkeypatch.setattr(predict_module, "read_rows", counting)
    monkeypatch.setattr(Predictor, "probabilities", recording)
    predict_file(predictor, source, tmp_path / "preds.jsonl", PAIR, batch_size=5)
    assert [n for n, _ in batches] == [5, 5, 5, 5, 3]
    assert [seen for _, seen in batches] == [5, 10, 15, 20, 23]
    assert len(read_jsonl(tmp_path / "preds.jsonl")) == 23


def test_config_errors_are_one_line(ckpt, tmp_path, capsys):
    pairs, sheet = tmp_path / "x.jsonl", tmp_path / "pairs.xlsx"
    pairs.write_text('{"premise": "a", "hypothesis": "b"}\n')
    sheet.write_bytes(b"PK")
    cases = [
        ([], "give input=FILE"),
        ([f"input={pairs}", "premise=a"], "not both"),
        ([f"input={tmp_path / 'missing.jsonl'}"], "missing.jsonl: no such file"),
        ([f"input={sheet}"], "unsupported file type; use .jsonl, .txt / .tsv"),
    ]
    for overrides, message in cases:
        with pytest.raises(SystemExit) as exit_info:
            run_task(predict, predict_cfg(ckpt, tmp_path, *overrides))
        assert str(exit_info.value).startswith("error: ") and message in str(exit_info.value)
        assert "\n" not in str(exit_info.value)


@pytest.fixture(scope="module")
def sentence_ckpt(tmp_path_factory) -> str:
    words = ["awful", "bad", "fine", "good", "great"]
    rows = [{"sentence": f"the film is {words[i % 5]} .", "label": i % 5} for i in range(40)]
    folder = tmp_path_factory.mktemp("sst")
    files = {s: str(write_jsonl(folder / f"{s}.jsonl", rows)) for s in ("train", "validation",
                                                                        "test")}
    cfg = compose_cfg(["model=dcnn_sentence", "data=sst5", *FAST, *file_overrides(files),
                       "trainer.max_epochs=1", "test=false", "eval_train=false"], folder / "run")
    train(cfg)
    return json.loads((folder / "run" / "results.json").read_text())["best_checkpoint"]


def test_sentence_model_reads_sentences(sentence_ckpt, tmp_path, capsys):
    result = predict(predict_cfg(sentence_ckpt, tmp_path, "sentence=the film is great ."))
    assert len(result["probabilities"]) == 5
    source = write_jsonl(tmp_path / "s.jsonl", [{"text": "a good film ."}])
    output = tmp_path / "s.out.jsonl"
    predict(predict_cfg(sentence_ckpt, tmp_path, f"input={source}", f"output={output}",
                        "fields.sentence=text"))
    assert read_jsonl(output)[0]["prediction"] in ("very negative", "negative", "neutral",
                                                   "positive", "very positive")
    with pytest.raises(ConfigError, match="reads sentence: give sentence=..."):
        predict(predict_cfg(sentence_ckpt, tmp_path, "premise=a", "hypothesis=b"))


def test_cli_writes_predictions(ckpt, tmp_path):
    source = write_jsonl(tmp_path / "pairs.jsonl", [{"premise": "a man sleeps .",
                                                     "hypothesis": "a person rests ."}])
    output = tmp_path / "preds.jsonl"
    proc = run_entry_point("src/predict.py", [f"ckpt_path={ckpt}", f"input={source}",
                                              f"output={output}",
                                              f"hydra.run.dir={tmp_path / 'job'}"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert read_jsonl(output)[0]["prediction"] in ("entailment", "neutral", "contradiction")

