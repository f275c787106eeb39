"""Bad config values fail before any data is read, in one line that names the key, the value
and what is allowed (``schema.SCHEMA``, ``config.check_config``)."""

from __future__ import annotations

import pytest

from entailment_lab.config import check_config
from entailment_lab.errors import ConfigError
from entailment_lab.schema import SCHEMA, validate
from tests.conftest import REPO, compose_cfg
from tests.entry_points import run_entry_point

# (overrides, the start of the one-line message)
BAD_VALUES = [
    (["trainer.max_epochs=abc"], "trainer.max_epochs='abc': must be an integer >= -1 or null"),
    (["seed=abc"], "seed='abc': must be an integer >= 0"),
    (["seed=-3"], "seed=-3: must be an integer >= 0"),
    (["optimizer.lr=-1"], "optimizer.lr=-1: must be a number >= 0.0"),
    (["optimizer.lr=fast"], "optimizer.lr='fast': must be a number >= 0.0"),
    (["scheduler.gamma=abc"], "scheduler.gamma='abc': must be a number > 0.0 and <= 1.0"),
    (["scheduler.step_size=0"], "scheduler.step_size=0: must be an integer >= 1"),
    (["scheduler.interval=batch"], "scheduler.interval='batch': must be one of step, epoch"),
    (["model=dcnn", "data=sst2"], "model=dcnn reads pairs but data=sst2 holds sentences"),
    (["model=dcnn_sentence", "data=snli"],
     "model=dcnn_sentence reads sentences but data=snli holds pairs"),
    (["data.batch_size=0"], "data.batch_size=0: must be an integer >= 1"),
    (["data.batch_size=1.5"], "data.batch_size=1.5: must be an integer >= 1"),
    (["data.max_length=-5"], "data.max_length=-5: must be an integer >= 1"),
    (["data.lowercase=maybe"], "data.lowercase='maybe': must be true or false"),
    (["data.val_from_train=1.5"], "data.val_from_train=1.5: must be an integer >= 1 or a number"),
    (["data.train_size=0"], "data.train_size=0: must be an integer >= 1 or null"),
    (["trainer.precision=8"], "trainer.precision=8: must be one of 64, 64-true"),
    (["trainer.gradient_clip_val=-1"], "trainer.gradient_clip_val=-1: must be a number >= 0.0"),
    (["trainer.accumulate_grad_batches=0"], "trainer.accumulate_grad_batches=0: must be an "
                                            "integer >= 1"),
    (["trainer.check_val_every_n_epoch=0"], "trainer.check_val_every_n_epoch=0: must be an "
                                            "integer >= 1 or null"),
    (["trainer.limit_train_batches=-2"], "trainer.limit_train_batches=-2: must be a number"),
    (["trainer.max_steps=x"], "trainer.max_steps='x': must be an integer >= -1"),
    (["epochs=0"], "epochs=0: must be an integer >= 1"),
    (["threads=0"], "threads=0: must be one of auto, null or an integer >= 1"),
    (["callbacks.early_stopping.patience=-1"], "callbacks.early_stopping.patience=-1: must be an "
                                               "integer >= 0"),
    (["callbacks.early_stopping.mode=up"], "callbacks.early_stopping.mode='up': must be one of"),
    (["embeddings=random", "embeddings.dim=0"], "embeddings.dim=0: must be an integer >= 1"),
    (["embeddings.normalize=1"], "embeddings.normalize=1: must be true or false"),
    (["optimizer.betas=[0.9,1.5]"], "optimizer.betas=[0.9, 1.5]: must be two numbers in [0, 1)"),
    (["optimizer.weight_decay=-0.1"], "optimizer.weight_decay=-0.1: must be a number >= 0.0"),
    (["model.net.dropout=1.0"], "model.net.dropout=1.0: must be a number >= 0.0 and < 1.0"),
    (["model=hyperlstm", "model.net.recurrent_dropout=2"],
     "model.net.recurrent_dropout=2: must be a number >= 0.0 and < 1.0"),
    (["dim=0"], "dim=0: must be an integer >= 1 or null"),
    (["test=yes"], "test='yes': must be true or false"),
    (["model=dcnn", "optimizer=adam"],
     "optimizer.initial_accumulator_value: not an argument of torch.optim.Adam"),
]


@pytest.mark.parametrize(("overrides", "message"), BAD_VALUES,
                         ids=[" ".join(o) for o, _ in BAD_VALUES])
def test_a_bad_value_is_refused_in_one_line_naming_the_key(overrides, message, tmp_path):
    cfg = compose_cfg(overrides, tmp_path)
    with pytest.raises(ConfigError) as caught:
        check_config(cfg)
    text = str(caught.value)
    assert text.startswith(message) and "\n" not in text
    assert "e.g." in text  # and how to fix it


def test_the_schema_has_at_least_twenty_bad_value_cases():
    assert len(BAD_VALUES) >= 20


@pytest.mark.parametrize("model", sorted(p.stem for p in (REPO / "conf" / "model").glob("*.yaml")))
def test_every_model_config_passes_the_schema(model, tmp_path):
    data = ["data=sst5"] if model == "dcnn_sentence" else []
    check_config(compose_cfg([f"model={model}", *data], tmp_path))


@pytest.mark.parametrize("config", ["eval", "predict", "explain"])
def test_the_other_entry_points_pass_the_schema(config, tmp_path):
    overrides = ["ckpt_path=x.ckpt", "premise=a", "hypothesis=b"] if config == "explain" \
        else ["ckpt_path=x.ckpt"]
    validate(compose_cfg(overrides, tmp_path, config_name=config))


def test_every_schema_key_exists_in_some_config(tmp_path):
    """A knob renamed in conf/ but not here would go unchecked: every key the schema types
    (wildcards aside) is a key of the train, eval or predict config of some model."""
    from omegaconf import OmegaConf

    configs = [compose_cfg(o, tmp_path, config_name=n) for n, o in [
        ("train", ["model=diin"]), ("train", ["experiment=dcnn/trec", "data_root=/d"]),
        ("train", ["model=decatt", "embeddings=glove840b"]), ("train", ["model=dcnn"]),
        ("train", []), ("train", ["optimizer=adadelta"]), ("eval", ["ckpt_path=x"]),
        ("predict", ["ckpt_path=x"])]]
    sentinel = object()
    # knobs of options that none of these configs has
    optional = {"optimizer.momentum", "optimizer.lr_decay", "trainer.max_time",
                "logger.wandb.log_model", "callbacks.early_stopping.min_delta"}
    for key in SCHEMA:
        if "*" in key or key in optional:
            continue
        assert any(OmegaConf.select(c, key, default=sentinel, throw_on_missing=False)
                   is not sentinel for c in configs), key


@pytest.mark.parametrize("overrides", [["trainer.max_epochs=abc"], ["model=dcnn", "data=sst2"]])
def test_the_command_line_prints_one_line_and_no_traceback(overrides, tmp_path):
    """As a user types it: exit status 1, one line on stderr, no data read (the SNLI hub is
    offline here, so reading it would fail with another message)."""
    done = run_entry_point("src/train.py", [*overrides, "logger=csv", f"hydra.run.dir={tmp_path}"],
                           cwd=REPO, env={"HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"})
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and overrides[0].split("=")[0] in errors[0], done.stderr
