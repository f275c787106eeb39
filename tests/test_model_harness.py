"""One harness for every model: each ``conf/model/*.yaml`` goes through the same checks.

Models are discovered from the config files, not listed, so a new model is tested from its
first config on. Each check composes the real config (``compose_cfg``) and builds the network
the way the pipeline does (``pipeline.build_net`` with the embedding of ``embeddings=random``):

- ``shapes``: ``(batch, classes)`` logits, finite, with and without ``return_details``;
- ``padding``: noise ids under the mask do not change a row's logits;
- ``gradients``: one backward pass reaches every trainable parameter, none the frozen vectors;
- ``overfit``: Adam fits 24 random examples with random labels, dropout off;
- ``save_load_eval``: a debug training run writes ``results.json`` and a checkpoint,
  ``pipeline.evaluate`` on that checkpoint gives the same test accuracy, and ``predict.py`` on
  the test file gives eval's accuracy (pair models also hypothesis-only: the checkpoint's input
  transform is applied by both);
- ``bad_config``: an unknown ``model.net.<key>`` is refused with a one-line ``ConfigError``
  naming the key, before any data is read.

Sizes are shrunk generically: ``dim=16`` where the model's config reads ``${dim}`` (DIN needs a
perfect square: 16 is one), 16-d random word vectors, sentences of at most 13 words. Pair models
read pairs (the demo corpus), sentence models (``Network.inputs == "sentence"``) single
sentences (``data=sst5``'s schema). A model's own test file, ``tests/models/<file>/test_model.py``
with ``<file>`` the module of its ``model.net._target_`` under ``entailment_lab/models/`` (so
``din1``, ``din2`` and ``din1_static`` share ``tests/models/din/test_model.py``), may set:

- ``HARNESS_OVERRIDES: list[str]``: Hydra overrides applied after the generic ones (to every
  config of that module), where the model needs more to be fast;
- ``HARNESS_VARIANTS: list[list[str]]``: other settings of its knobs that also go through the
  network checks (shapes, padding, gradients); a variant applies to the configs that have all
  of its ``model.net`` keys;
- ``HARNESS_SKIP: dict[str, str]``: check name -> the reason it does not apply as it is (the
  model's file then tests that point its own way).

Dropout is switched off for ``gradients`` and ``overfit`` only through the model's own config
keys (``model.net.dropout`` and ``model.net.*_dropout``, where the config has them).
"""

from __future__ import annotations

import functools
import importlib
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from omegaconf import DictConfig, OmegaConf

from entailment_lab.config import instantiate
from entailment_lab.data.text import Vocabulary
from entailment_lab.errors import ConfigError
from entailment_lab.models.base import Network
from entailment_lab.pipeline import build_net, evaluate, load_trained, network_class, train
from entailment_lab.predict import Predictor, predict_file
from tests.conftest import (
    FAST,
    assert_padding_invariant,
    compose_cfg,
    file_overrides,
    fits_exactly,
    pad_with_noise,
    random_sentences,
)

TESTS = Path(__file__).resolve().parent
MODEL_CONFIGS = TESTS.parent / "conf" / "model"
MODELS = sorted(path.stem for path in MODEL_CONFIGS.glob("*.yaml"))
CHECKS = ("shapes", "padding", "gradients", "overfit", "save_load_eval", "bad_config")
VOCAB = Vocabulary(["<pad>", "<unk>", *(f"w{i}" for i in range(58))])
GENERIC = [*FAST, "data.max_length=16"]  # sentences below are at most 13 words

pytestmark = pytest.mark.usefixtures("one_thread")


def model_test_module(model: str) -> ModuleType | None:
    """The model's own test file (found from its network's module), if it has one."""
    target = OmegaConf.load(MODEL_CONFIGS / f"{model}.yaml").net._target_
    name = target.split(".")[-2]
    # tests/ is a package: pytest collects the file as this module, the same object
    exists = (TESTS / "models" / name / "test_model.py").exists()
    return importlib.import_module(f"tests.models.{name}.test_model") if exists else None


def declared(model: str, name: str, default: Any) -> Any:
    """``name`` (``HARNESS_*``) from the model's test file, else ``default``."""
    return getattr(model_test_module(model), name, default)


def is_sentence_model(model: str) -> bool:
    net = OmegaConf.load(MODEL_CONFIGS / f"{model}.yaml").net
    return network_class(net).inputs == "sentence"


def model_overrides(model: str) -> list[str]:
    """The model, shrunk, on its kind of data (sentence models: SST-5's schema)."""
    uses_dim = "${dim}" in (MODEL_CONFIGS / f"{model}.yaml").read_text()
    return [f"model={model}", *(["data=sst5"] if is_sentence_model(model) else []),
            *(["dim=16"] if uses_dim else []), *GENERIC, *declared(model, "HARNESS_OVERRIDES", [])]


@functools.cache
def composed(model: str, folder: Path, *extra: str) -> DictConfig:
    """The model's shrunk config (cached: the network checks only read it)."""
    return compose_cfg([*model_overrides(model), *extra], folder / "_".join((model, *extra)))


def no_dropout(cfg: DictConfig) -> list[str]:
    """Overrides that switch off the dropout knobs the model's config declares."""
    return [f"model.net.{key}=0.0" for key, value in cfg.model.net.items()
            if (key == "dropout" or key.endswith("_dropout")) and value]


def build(cfg: DictConfig, seed: int = 0) -> tuple[Network, torch.nn.Embedding]:
    """The network as ``pipeline._train`` builds it, over ``VOCAB``."""
    torch.manual_seed(seed)
    embedding = instantiate(cfg.embeddings, "embeddings")(vocab=VOCAB)
    return build_net(cfg.model.net, embedding, len(cfg.data.label_names), VOCAB), embedding


def clip(lengths: list[int], cfg: DictConfig) -> list[int]:
    """Sentence lengths cut at ``data.max_length``, as the DataModule truncates."""
    return [min(n, cfg.data.max_length) for n in lengths]


def batch(net: Network, cfg: DictConfig, premise_lengths: list[int],
          hypothesis_lengths: list[int]) -> tuple[torch.Tensor, ...]:
    """Random padded inputs (noise ids under the masks) in the network's ``inputs`` layout."""
    premises = random_sentences(clip(premise_lengths, cfg), len(VOCAB))
    inputs = pad_with_noise(premises, len(VOCAB))
    if net.inputs == "sentence":
        return inputs
    hypotheses = random_sentences(clip(hypothesis_lengths, cfg), len(VOCAB))
    return (*inputs, *pad_with_noise(hypotheses, len(VOCAB)))


def variants(model: str) -> list[tuple[str, ...]]:
    """The default setting and the declared variants whose knobs this config has."""
    keys = OmegaConf.load(MODEL_CONFIGS / f"{model}.yaml").net.keys()
    found = [tuple(v) for v in declared(model, "HARNESS_VARIANTS", [])
             if all(o.partition("=")[0].removeprefix("model.net.") in keys
                    for o in v if o.startswith("model.net."))]
    return [(), *found]


def cases(*checks: str, with_variants: bool = False) -> list[Any]:
    """``pytest.param``s (model[, variant]) for ``checks``, skipped where the model says why."""
    params = []
    for model in MODELS:
        skip = {c: declared(model, "HARNESS_SKIP", {}).get(c) for c in checks}
        reasons = [f"{c}: {r}" for c, r in skip.items() if r]
        marks = [pytest.mark.skip(reason="; ".join(reasons))] if reasons else []
        for variant in variants(model) if with_variants else [()]:
            ident = "-".join((model, *(o.rpartition(".")[2] for o in variant)))
            values = (model, variant) if with_variants else (model,)
            params.append(pytest.param(*values, marks=marks, id=ident))
    return params


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("harness")


def test_models_are_discovered():
    assert {"din1", "lstm", "decatt", "dcnn_sentence", "lexical"} <= set(MODELS)
    for model in MODELS:  # every HARNESS_SKIP key is a check and says why
        skip = declared(model, "HARNESS_SKIP", {})
        assert set(skip) <= set(CHECKS) and all(skip.values()), model


@pytest.mark.parametrize(("model", "variant"), cases("shapes", with_variants=True))
def test_output_shapes(model, variant, folder):
    cfg = composed(model, folder, *variant)
    net, _ = build(cfg)
    net.eval()
    inputs = batch(net, cfg, [5, 2, 7], [3, 6, 1])
    classes = len(cfg.data.label_names)
    for details in (False, True):
        out = net(*inputs, return_details=details)
        assert out["logits"].shape == (3, classes) and out["logits"].dtype == torch.float32
        assert torch.isfinite(out["logits"]).all()


@pytest.mark.parametrize(("model", "variant"), cases("padding", with_variants=True))
def test_padding_does_not_change_logits(model, variant, folder):
    cfg = composed(model, folder, *variant)
    net, _ = build(cfg, seed=1)
    with torch.no_grad():
        for parameter in net.parameters():  # zero-initialised weights (lexical) hide nothing
            if not parameter.any():
                parameter.normal_()
    # Row 1 of 3: a longer batch-mate on each side, so the row is padded with noise ids.
    assert_padding_invariant(net, len(VOCAB), premise_mates=clip([11, 2], cfg),
                             hypothesis_mates=clip([1, 9], cfg), position=1)


@pytest.mark.parametrize(("model", "variant"), cases("gradients", with_variants=True))
def test_gradients_reach_every_trainable_parameter(model, variant, folder):
    cfg = composed(model, folder, *variant)
    cfg = composed(model, folder, *variant, "embeddings.freeze=true", *no_dropout(cfg))
    net, embedding = build(cfg, seed=2)
    net.train()
    # Lengths past 11, so that DecAtt's every distance bucket 0..10 occurs.
    inputs = batch(net, cfg, [13, 6, 9], [4, 12, 7])
    labels = torch.arange(3) % len(cfg.data.label_names)
    net.zero_grad(set_to_none=True)
    torch.nn.functional.cross_entropy(net(*inputs)["logits"], labels).backward()
    trainable = [(n, p) for n, p in net.named_parameters() if p.requires_grad]
    assert trainable
    for name, parameter in trainable:
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name
    if not embedding.weight.requires_grad:
        assert embedding.weight.grad is None  # frozen word vectors


@pytest.mark.parametrize("model", cases("overfit"))
def test_overfits_24_random_examples(model, folder):
    cfg = composed(model, folder)
    cfg = composed(model, folder, *no_dropout(cfg))
    net, _ = build(cfg, seed=3)
    net.train()
    inputs = batch(net, cfg, torch.randint(3, 9, (24,)).tolist(),
                   torch.randint(2, 7, (24,)).tolist())
    labels = torch.arange(24) % len(cfg.data.label_names)
    assert fits_exactly(net, inputs, labels, lr=1e-2)


def with_hypothesis_only(params: list[Any]) -> list[Any]:
    """Each (model,) case as (model, False), and pair models also as (model, True): the
    hypothesis-only setting of ``data.hypothesis_only``."""
    out = []
    for param in params:
        model = param.values[0]
        out.append(pytest.param(model, False, marks=param.marks, id=param.id))
        if not is_sentence_model(model):
            out.append(pytest.param(model, True, marks=param.marks,
                                    id=f"{param.id}-hypothesis_only"))
    return out


@pytest.mark.parametrize(("model", "hypothesis_only"),
                         with_hypothesis_only(cases("save_load_eval")))
def test_trains_saves_and_evaluates_from_the_checkpoint(model, hypothesis_only, pair_files,
                                                         sentence_files, tmp_path):
    """... and predict.py, reading the test file through the checkpoint's input transform,
    gets eval.py's accuracy on it, pair by pair, also when the run read hypotheses alone."""
    files = sentence_files if is_sentence_model(model) else pair_files
    only = ["data.hypothesis_only=true"] if hypothesis_only else []
    cfg = compose_cfg([*model_overrides(model), *file_overrides(files), *only, "debug=tiny",
                       "trainer.max_epochs=1", "trainer.limit_test_batches=1.0",
                       "eval_train=false"], tmp_path)
    metrics = train(cfg)
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["status"] == "completed" and results["model"] == model
    assert results["params"]["trainable"] > 0
    assert len(results["test_confusion_matrix"]) == len(cfg.data.label_names)
    best = results["best_checkpoint"]
    assert Path(best).is_file()
    evaluated = evaluate(compose_cfg([f"ckpt_path={best}", "split=test",
                                      "trainer.enable_model_summary=false"], tmp_path / "eval",
                                     config_name="eval"))
    assert evaluated["test/acc"] == pytest.approx(metrics["test/acc"])
    module, _, _ = load_trained(best)
    out = tmp_path / "predictions.jsonl"
    predict_file(Predictor(module), files["test"], out, {k: [k] for k in cfg.data.fields})
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    names = list(cfg.data.label_names)
    accuracy = sum(row["prediction"] == names[row["label"]] for row in rows) / len(rows)
    assert accuracy == pytest.approx(evaluated["test/acc"])


@pytest.mark.parametrize("model", cases("bad_config"))
def test_unknown_net_key_is_a_one_line_config_error(model, tmp_path):
    cfg = compose_cfg([*model_overrides(model), "+model.net.no_such_knob=1"], tmp_path)
    with pytest.raises(ConfigError) as error:
        train(cfg)  # refused by the pipeline's first step, before any data is read
    message = str(error.value)
    assert "model.net.no_such_knob" in message and "\n" not in message
    assert json.loads((tmp_path / "results.json").read_text())["status"] == "failed"
