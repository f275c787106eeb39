"""Command lines as users type them, wrong ones included: each mistake ends in one line that
names the key (``error: ...``, exit status 1), before any run folder exists and before any
data is read (``precheck.checked_command``, run by every entry point before Hydra).

Most cases run in-process through the very function the entry points call; a handful run as
real commands, which also shows that the answer needs neither torch nor Lightning
(``benchmarks/bench_precheck.py`` times them).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import lightning as L
import pytest
from omegaconf import OmegaConf

from entailment_lab import pipeline
from entailment_lab.data.demo import write_jsonl
from entailment_lab.errors import ConfigError, DataError
from entailment_lab.precheck import checked_command, group_options, hydra_context
from entailment_lab.schema import ACCELERATORS, STRATEGIES
from tests.conftest import REPO, compose_cfg, file_overrides
from tests.entry_points import run_entry_point

CONF = REPO / "conf"

# (command line, what the one line must hold). {train}, {validation}, {test}: the fixture's
# pair files; {missing}: a path that does not exist; {tmp}: the test's folder.
MISTAKES = [
    # --- a config group's option ---
    ("model=din3", "model=din3: no such model (did you mean din2?); the options are dcnn,"),
    ("model=DIN1", "model=DIN1: no such model"),
    ("model=lstm2", "model=lstm2: no such model (did you mean lstm?)"),
    ("model=decat", "(did you mean decatt?)"),
    ("optimizer=adamw_typo", "optimizer=adamw_typo: no such optimizer"),
    ("optimizer=sgd", "optimizer=sgd: no such optimizer; the options are adadelta, adagrad, adam"),
    ("debug=tinyy", "debug=tinyy: no such debug (did you mean tiny?)"),
    ("debug=fastt", "(did you mean fast?)"),
    ("experiment=table2/row99", "experiment=table2/row99: no such experiment"),
    ("experiment=row17", "no such experiment"),
    ("experiment=table2/row7", "(did you mean table2/row07?)"),
    ("experiment=protocols/snli", "table2/row17"),  # the nested options are listed
    ("experiment=dcnn/sst3", "(did you mean dcnn/sst"),
    ("data=snli2", "data=snli2: no such data (did you mean snli?)"),
    ("data=multinli", "data=multinli: no such data"),
    ("data=common/datamodule", "data=common/datamodule: no such data"),
    ("embeddings=glove840", "(did you mean glove840b?)"),
    ("embeddings=glove6b300d", "embeddings=glove6b300d: no such embeddings"),
    ("trainer=gpus", "(did you mean gpu?)"),
    ("logger=tensorboard", "logger=tensorboard: no such logger"),
    ("callbacks=defaults", "(did you mean default?)"),
    ("scheduler=cosine", "scheduler=cosine: no such scheduler"),
    ("recipe=dinn", "(did you mean din?)"),
    ("metrics=f2", "metrics=f2: no such metrics; the options are default, f1, per_class"),
    ("budget=protocols/sick/decat", "budget=protocols/sick/decat: no such budget"),
    ("hydra/launcher=slurmm", "(did you mean slurm?)"),
    ("-m model=din1,din3", "model=din3: no such model"),
    ("-m experiment=glob(table3/*)", "matches no experiment option"),
    ("debug=null", "debug=null: Hydra drops a group's option with ~debug"),
    # --- a key ---
    # a key that only some experiments define: which ones, and the way without them
    ("model=lstm data_root=/data", "data_root: no such key in this config; it is a knob of "
                                   "experiment=dcnn/sst2, dcnn/sst5, dcnn/trec, dcnn/trec_glove, "
                                   "protocols/sick, protocols/snli_dev2test; without one, give "
                                   "data.files.<split>=PATH for each split"),
    ("optimiser.lr=0.1", "optimiser.lr: no such key (did you mean optimizer.lr?)"),
    ("+optimiser.lr=0.1", "+optimiser.lr: no such key (did you mean optimizer.lr?)"),
    ("++optimiser.lr=0.1", "++optimiser.lr: no such key (did you mean optimizer.lr?)"),
    ("trainer.max_epoch=1", "trainer.max_epoch: not an argument of the Trainer (did you mean "
                            "max_epochs?)"),
    ("+trainer.max_epoch=1", "+trainer.max_epoch: not an argument of the Trainer"),
    ("embeddings.dim=64", "embeddings.dim: not an argument of glove_6b_50d; its arguments: "
                          "oov_range, freeze, seed, normalize"),
    ("+embeddings.dim=64", "+embeddings.dim: not an argument of glove_6b_50d"),
    ("model=lstm model.net.hiden_size=64", "model.net.hiden_size: not an argument of "
                                           "LSTMEncoderClassifier (did you mean hidden_size?)"),
    ("model=lstm +model.net.hiden_size=64", "+model.net.hiden_size: not an argument of "
                                            "LSTMEncoderClassifier"),
    ("data.batchsize=32", "data.batchsize: not an argument of TextDataModule (did you mean "
                          "batch_size?)"),
    ("seeds=1", "seeds: no such key (did you mean seed?)"),
    ("epoch=3", "epoch: no such key (did you mean epochs?)"),
    ("+epoch=3", "+epoch: no such key (did you mean epochs?)"),
    ("callbacks.early_stop.patience=2", "no such key (did you mean "
                                        "callbacks.early_stopping.patience?)"),
    ("callbacks.early_stopping.patiance=2", "callbacks.early_stopping.patiance: not an argument "
                                            "of lightning.pytorch.callbacks.EarlyStopping (did "
                                            "you mean patience?)"),
    # a knob of that name elsewhere, the knob its value follows, a group's option, another
    # option's knob, a Lightning 1.x Trainer argument
    ("lr=0.1", "lr: no such key (did you mean optimizer.lr?)"),
    ("max_epochs=3", "max_epochs: no such key (did you mean epochs or trainer.max_epochs?)"),
    ("model=lstm model.hidden_size=64", "model.hidden_size: no such key (did you mean dim?)"),
    ("wandb=true", "wandb: no such key; wandb is an option: logger=wandb"),
    ("experiment=demo data.files.train={train}", "data.files.train: no such key: data=demo has "
                                                 "no data.files; data=mnli, sick, snli,"),
    ("model=lstm model.intra_attention=true", "model.intra_attention: no such key: model=lstm "
                                              "has no model.net.intra_attention; model=decatt"),
    ("model=lstm model.heads=4", "model.heads: no such key (a network's knobs are "
                                 "model.net.NAME); model.net.heads: not an argument of "
                                 "LSTMEncoderClassifier; its arguments: hidden_size"),
    ("trainer.gpus=1", "trainer.gpus: an argument of Lightning 1.x's Trainer that Lightning 2 "
                       "dropped; here: trainer=gpu"),
    ("trainer.resume_from_checkpoint=x", "here: ckpt_path=RUN/checkpoints/last.ckpt"),
    ("logger.wandb.projet=x", "logger.wandb.projet: no such key"),
    # the type an imported target's argument is annotated with (Lightning, torch take any)
    ("callbacks.early_stopping.check_on_train_epoch_end=flase",
     "callbacks.early_stopping.check_on_train_epoch_end='flase': must be true or false or null "
     "(EarlyStopping takes check_on_train_epoch_end: Optional[bool])"),
    ("trainer.sync_batchnorm=1", "trainer.sync_batchnorm=1: must be true or false (Trainer "
                                 "takes sync_batchnorm: bool)"),
    ("+logger.csv.flush_logs_every_n_steps=often", "logger.csv.flush_logs_every_n_steps="
                                                   "'often': must be an integer (CSVLogger "
                                                   "takes flush_logs_every_n_steps: int)"),
    ("embeddings.seed=abc", "embeddings.seed='abc': must be an integer (glove_6b_50d takes "
                            "seed: int)"),
    # a callback or logger entry that the run would skip; a target that cannot be imported
    ("callbacks.adagrad_reset=5", "callbacks.adagrad_reset=5: each callbacks entry is a config "
                                  "with a _target_"),
    ("callbacks.adagrad_reset={{every_n_epochs:5}}", "callbacks.adagrad_reset (no _target_)"),
    ("optimizer._target_=SGD", "optimizer._target_='SGD': cannot import it (ModuleNotFoundError("
                               "\"No module named 'SGD'\")); give the dotted path of a class or "
                               "function, e.g. torch.optim.SGD"),
    ("scheduler._target_=abc", "scheduler._target_='abc': a module, not a class or function"),
    ("embeddings._target_=null", "embeddings._target_=null: cannot import it"),
    ("model.net._target_=[1,2]", "model.net._target_=[1, 2]: cannot import it"),
    ("extra_tests=hard.jsonl", "extra_tests='hard.jsonl': a mapping of test-set names to "
                               "files; add one with +extra_tests.NAME=PATH"),
    ("optimized_metric=val/accuracy", "optimized_metric=val/accuracy: the run returns no such "
                                      "metric (did you mean val/acc?)"),  # a sweeper's NaN
    ("data.label_field=''", "data.label_field='': must be a column name or a list of them"),
    ("data.drop_labels=abc", "data.drop_labels='abc': must be a list of label ids or names"),
    ("data_root=/x", "data_root: no such key"),
    ("+foo=1", "+foo: no such key"),
    ("data.files.tran={train}", "data.files.tran: no such key (did you mean data.files.train?)"),
    ("+data.files.tran={train}", "data.files: unknown split(s) ['tran']"),  # the DataModule's
    ("+callbacks.stopper.patience=3", "+callbacks.stopper.patience: a new callbacks entry needs "
                                      "a _target_"),
    ("~callbacks.nonexistent", "~callbacks.nonexistent: no such key to delete"),
    ("+optimizer.momentum=0.9", "+optimizer.momentum: not an argument of torch.optim.Adam; its "
                                "arguments: lr, betas"),
    ("+scheduler.foo=1", "+scheduler.foo: not an argument of torch.optim.lr_scheduler.StepLR"),
    ("model=din1,din2", "Ambiguous value for argument 'model=din1,din2'"),
    ("seed=1,2", "Ambiguous value for argument 'seed=1,2'"),
    # --- a value ---
    # what Hydra's override grammar cannot read: the character, and how to write it instead
    ("data_root=~/data", "data_root=~/data: Hydra's override grammar cannot read '~' (this "
                         "shell did not expand it); write the folder out, e.g. "
                         "data_root=$HOME/data"),  # zsh (macOS) does not expand ~ after =
    ("hydra.run.dir=runs(1)", "Hydra reads runs(...) as a function call; quote the value: "
                              """hydra.run.dir='"runs(1)"'"""),
    ("hydra.run.dir=runs#3", "hydra.run.dir=runs#3: Hydra's override grammar cannot read '#' "
                             """(column 19); quote the value: hydra.run.dir='"runs#3"'"""),
    ("trainer.max_epochs=abc", "trainer.max_epochs='abc': must be an integer >= -1 or null"),
    ("seed=-1", "seed=-1: must be an integer >= 0"),
    ("optimizer.lr=fast", "optimizer.lr='fast': must be a number >= 0.0"),
    ("model=lstm dim=abc", "dim='abc': must be an integer >= 1 or null"),
    ("model.net.dropout=1.5", "model.net.dropout=1.5: must be a number >= 0.0 and < 1.0"),
    ("model=lstm model.net.mlp_layers=two", "model.net.mlp_layers='two': must be an integer "
                                            "(LSTMEncoderClassifier takes mlp_layers: int)"),
    ("model=dcnn model.net.k_top=abc", "model.net.k_top='abc': must be an integer"),
    ("model=dcnn model.net.folding=[yes,no]", "model.net.folding=['yes', 'no']: must be a list "
                                              "of booleans"),
    ("data.batch_size=0", "data.batch_size=0: must be an integer >= 1"),
    ("scheduler.gamma=2", "scheduler.gamma=2: must be a number > 0.0 and <= 1.0"),
    ("threads=0", "threads=0: must be one of auto, null or an integer >= 1"),
    ("model.net.variant=din3", "model.net.variant must be one of"),
    ("dim=300", "dim=300 must be a perfect square"),
    ("model=din1 model.net.encoder_gru=tf", "encoder_gru"),
    ("data.hypothesis_only=yes", "data.hypothesis_only='yes': must be true or false"),
    ("data.max_length=0", "data.max_length=0: must be an integer >= 1"),
    ("-m seed=1,2,abc", "seed='abc': must be an integer >= 0"),
    # --- the Trainer and the machine ---
    ("trainer.accelerator=gpu", "trainer.accelerator=gpu: this machine has no GPU"),
    ("trainer.accelerator=cuda", "trainer.accelerator=cuda: this machine has no GPU"),
    ("trainer.accelerator=tpux", "trainer.accelerator='tpux': must be one of auto, cpu, gpu"),
    ("trainer.accelerator=mps", "trainer.accelerator=mps: Apple's GPU exists on Apple silicon"),
    ("trainer.strategy=ddp_typo", "trainer.strategy='ddp_typo': must be a Lightning strategy"),
    ("trainer.max_time=abc", "trainer.max_time='abc': must be a duration \"DD:HH:MM:SS\""),
    ("trainer.max_time=12:00:00", "trainer.max_time='12:00:00': must be a duration"),
    ("trainer.devices=3", "trainer.devices=3: 3 training processes"),
    ("trainer=ddp trainer.accelerator=cpu trainer.devices=64", "trainer.devices=64: 64 training "
                                                               "processes"),
    ("trainer.precision=16-mixed", "trainer.precision=16-mixed (float16 mixed precision) needs "
                                   "a GPU"),
    ("trainer.precision=8", "trainer.precision=8: must be one of 64"),
    ("trainer.devices=[0,1]", "trainer.devices=[0,1]: "),  # Lightning's own check, named
    ("trainer.devices=abc", "trainer.devices=abc: "),
    ("trainer.gradient_clip_algorithm=clip", "trainer.gradient_clip_algorithm='clip': must be "
                                             "one of null, norm, value"),
    ("trainer.val_check_interval=1.5", "trainer.val_check_interval=1.5: must be"),
    ("trainer.fast_dev_run=-1", "trainer.fast_dev_run=-1: must be"),
    ("trainer.profiler=fancy", "trainer.profiler='fancy': must be one of"),
    # --- files ---
    ("data.files.train={missing}", "data.files.train={missing}: no such file"),
    ("data.files.train={train} data.files.validation={validation} data.files.test={missing}",
     "data.files.test={missing}: no such file"),
    ("data.files.train={train}", "data.files.test: not set, but the run tests on it"),
    ("+extra_tests.x={missing}", "extra_tests.x={missing}: no such file"),
    ("embeddings=glove840b embeddings.path={missing}", "embeddings.path={missing}: no such file; "
                                                       "download the GloVe file"),
    ("embeddings=glove6b100d embeddings.path={missing}", "embeddings.path={missing}: no such "
                                                         "file"),
    ("ckpt_path={missing}", "ckpt_path={missing}: no such checkpoint"),
    ("data=sick", "required config value(s) not set: data.files.test, data.files.train, "
                  "data.files.validation"),
    ("experiment=protocols/sick", "required config value(s) not set: data_root"),
    ("experiment=dcnn/trec data_root={missing}", "no such file"),
    ("+extra_tests.test={train}", "extra_tests.test: the name clashes with a split"),
    # --- what a callback monitors ---
    ("callbacks.early_stopping.monitor=val/accuracy", "callbacks.early_stopping.monitor=val/"
                                                      "accuracy: the run logs no such metric "
                                                      "(did you mean val/acc?)"),
    ("callbacks.model_checkpoint.monitor=val_acc", "(did you mean val/acc?)"),
    ("callbacks.early_stopping.monitor=val/f1_macro", "callbacks.early_stopping.monitor=val/"
                                                      "f1_macro: the run logs no such metric"),
    ("callbacks.model_checkpoint.monitor=test/acc", "the run logs no such metric"),
    ("callbacks.early_stopping.monitor=loss", "the run logs no such metric"),
    # --- data ---
    ("data.val_group_by=premis", "data.val_group_by=premis: used only with "
                                 "data.val_from_train"),
    ("data.val_group_by=premise", "data.val_group_by=premise: used only with"),
    ("data.test_splits=[tset]", "data.test_splits: data=snli has no split 'tset' (did you mean "
                                "test?)"),
    ("data=mnli data.test_splits=[test]", "data=mnli has no split 'test'"),
    ("model=lstm data=sst2", "model=lstm reads pairs but data=sst2 holds sentences"),
    ("model=dcnn_sentence data=snli", "model=dcnn_sentence reads sentences but data=snli holds "
                                      "pairs"),
    # --- the encoding size ---
    ("model=diin dim=300", "dim=300: model=diin has no encoding size to set"),
    ("model=dcnn dim=100", "dim=100: model=dcnn has no encoding size to set"),
    ("model=lexical dim=10", "dim=10: model=lexical has no encoding size to set"),
    ("-m model=decatt,diin dim=256,400", "model=diin has no encoding size to set"),
    ("model=lstm model.net.hidden_size=64", "model.net.hidden_size=64: follows dim, the encoding "
                                            "size of model=lstm; set dim=64 instead"),
    ("model=decatt model.net.hidden_size=100", "model.net.hidden_size=100: follows dim"),
    ("model=dflstm dim=301", "dim"),
    ("model=din1 dim=0", "dim=0: must be an integer >= 1 or null"),
    ("model=dcnn_sentence data=sst2 embeddings=glove6b50d", "word-vector size 50 must be "
                                                            "divisible by 4"),
]


def command(line: str, pair_files: dict[str, str], tmp_path: Path) -> list[str]:
    line = line.format(missing=tmp_path / "missing.jsonl", tmp=tmp_path, **pair_files)
    args = line.split()
    folder = "hydra.sweep.dir" if "-m" in args else "hydra.run.dir"
    return [*args, f"{folder}={tmp_path / 'run'}", "logger=csv"]


def test_at_least_eighty_mistakes():
    assert len(MISTAKES) >= 80


@pytest.mark.usefixtures("no_data_read")
@pytest.mark.parametrize(("line", "said"), MISTAKES, ids=[line for line, _ in MISTAKES])
def test_a_mistake_is_one_line_before_any_folder_or_data(line, said, pair_files, tmp_path):
    args = command(line, pair_files, tmp_path)
    with pytest.raises(ConfigError) as caught:
        checked_command("train", args, CONF)
    message = str(caught.value)
    expected = said.format(missing=tmp_path / "missing.jsonl", **pair_files)
    assert "\n" not in message and expected in message, message
    assert not (tmp_path / "run").exists()


@pytest.mark.usefixtures("no_data_read")
@pytest.mark.parametrize("line", [
    "model=lstm dim=64", "-m model=din1,din2 dim=256,324,400", "model=decatt dim=300",
    "experiment=table2/row17", "+extra_tests.hard={test}", "trainer.max_time=00:12:00:00",
    "trainer.accelerator=cpu trainer.devices=1", "callbacks.early_stopping.monitor=val/loss",
    "metrics=f1 callbacks.early_stopping.monitor=val/f1_macro", "+model.net.static_input=word",
    "model=diin", "model=lexical", "++trainer.limit_train_batches=3",
    "+callbacks.stopper._target_=lightning.pytorch.callbacks.EarlyStopping "
    "+callbacks.stopper.monitor=val/loss",
])
def test_a_right_command_passes(line, pair_files, tmp_path):
    files = " ".join(f"data.files.{k}={{{k}}}" for k in pair_files)
    embeddings = "embeddings=glove6b50d" if "row17" in line else ""
    args = command(f"{line} {files} {embeddings}", pair_files, tmp_path)
    assert checked_command("train", args, CONF) == args
    assert not (tmp_path / "run").exists()


def test_the_lists_of_names_are_lightnings():
    from lightning.pytorch.accelerators import AcceleratorRegistry
    from lightning.pytorch.strategies import StrategyRegistry

    assert set(ACCELERATORS) == {*AcceleratorRegistry.available_accelerators(), "auto", "gpu"}
    assert set(STRATEGIES) == {*StrategyRegistry.available_strategies(), "auto"}


def test_nested_experiment_files_are_options():
    with hydra_context(CONF, "train"):
        options = group_options("experiment")
    assert {"demo", "table2/row17", "dcnn/trec", "protocols/sick"} <= set(options)
    assert len(options) == len(list((CONF / "experiment").rglob("*.yaml")))


# --- as a user types it ------------------------------------------------------------------------
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)]),
       "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
# Runs an entry point and says on stdout whether torch was imported (SystemExit passes by).
PROBE = ("import runpy, sys\nsys.argv = sys.argv[1:]\ntry:\n"
         "    runpy.run_path(sys.argv[0], run_name='__main__')\n"
         "finally:\n    print('torch loaded' if 'torch' in sys.modules else 'no torch')\n")


def run(args: list[str], cwd: Path, script: str = "src/train.py") -> subprocess.CompletedProcess:
    """An entry point run in ``cwd``, its job folder (if any) in ``cwd/run``."""
    folder = [] if "--help" in args else [f"hydra.run.dir={cwd / 'run'}"]
    return subprocess.run([sys.executable, "-c", PROBE, str(REPO / script), *args, *folder],
                          cwd=cwd, env=ENV, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(("script", "args", "said"), [
    ("src/train.py", ["model=din3"], "error: model=din3: no such model"),
    ("src/train.py", ["+optimiser.lr=0.1"], "error: +optimiser.lr: no such key (did you mean "
                                             "optimizer.lr?)"),
    ("src/train.py", ["trainer.accelerator=gpu"], "error: trainer.accelerator=gpu: this "
                                                  "machine has no GPU"),
    ("src/train.py", ["callbacks.early_stopping.monitor=val/accuracy"],
     "error: callbacks.early_stopping.monitor=val/accuracy"),
    ("src/train.py", ["experiment=table2/row99"], "error: experiment=table2/row99"),
    ("src/eval.py", ["ckpt_path=missing.ckpt"], "error: ckpt_path=missing.ckpt: no such file"),
    ("src/predict.py", ["ckpt_path=x.ckpt", "bach_size=4"], "error: bach_size: no such key (did "
                                                            "you mean batch_size?)"),
    # explain.py's folder is resolved from the command line (${explain_dir:...}) first
    ("src/explain.py", ["ckpt_path=x.ckpt"], "error: required config value(s) not set: "
                                             "hypothesis, premise"),
    ("src/explain.py", ["ckpt_path=x.ckpt", "premise=a", "hypothesis=b"],
     "error: ckpt_path=x.ckpt: no such file"),
])
def test_the_command_line_answers_in_one_line_without_torch(script, args, said, tmp_path):
    done = run(args, tmp_path, script)
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == [done.stderr.strip()] and done.stderr.startswith(said), \
        done.stderr
    assert done.stdout.strip() == "no torch"  # answered before torch and Lightning load
    assert not list(tmp_path.iterdir())  # no run folder, no outputs/


def test_help_needs_no_torch(tmp_path):
    done = run(["--help"], tmp_path)
    assert done.returncode == 0 and "== Configuration groups ==" in done.stdout
    assert done.stdout.strip().endswith("no torch")


# --- defaults that run -------------------------------------------------------------------------
PAIR_DATA = ["snli", "sick", "mnli", "demo"]
SENTENCE_DATA = ["sst2", "sst5", "trec"]
MODELS = sorted(p.stem for p in (CONF / "model").glob("*.yaml"))


def data_files(data: str, pair_files: dict[str, str], sentence_files: dict[str, str]
               ) -> list[str]:
    """Local files for a data config's splits (the fixtures)."""
    if data == "demo":
        return []
    if data == "mnli":
        return [f"data.files.train={pair_files['train']}",
                f"data.files.test_matched={pair_files['validation']}",
                f"data.files.test_mismatched={pair_files['test']}"]
    if data == "trec":
        return [f"data.files.train={sentence_files['train']}",
                f"data.files.test={sentence_files['test']}"]
    return file_overrides(sentence_files if data in SENTENCE_DATA else pair_files)


def test_every_model_config_is_in_the_matrix():
    sentence_models = {"dcnn_sentence"}
    assert set(MODELS) >= sentence_models and len(MODELS) >= 17


@pytest.mark.usefixtures("no_data_read")
@pytest.mark.parametrize("model", MODELS)
def test_every_model_passes_every_check_on_every_data_of_its_kind(model, pair_files,
                                                                  sentence_files, tmp_path):
    """``model=M data=D`` with the group defaults (the model's own word vectors where the
    default cannot serve it) passes every check before data, the model built at its sizes."""
    kinds = SENTENCE_DATA if model == "dcnn_sentence" else PAIR_DATA
    for data in kinds:
        args = [f"model={model}", f"data={data}", *data_files(data, pair_files, sentence_files),
                f"paths.data_dir={tmp_path / 'data'}", f"hydra.run.dir={tmp_path / 'run'}"]
        checked_command("train", args, CONF)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("overrides", [["model=dcnn_sentence", "data=sst2"],
                                       ["model=decatt", "dim=8"]])
def test_a_tiny_run_with_the_defaults(overrides, pair_files, tmp_path):
    """``model=dcnn_sentence data=sst2`` trains on its paper's 48-d random vectors (folded
    twice); ``dim`` sizes DecAtt."""
    if "data=sst2" in overrides:
        rows = [{"sentence": f"the film is {('bad', 'good')[i % 2]} .", "label": i % 2}
                for i in range(24)]
        files = file_overrides({s: str(write_jsonl(rows, tmp_path / f"{s}.jsonl"))
                                for s in ("train", "validation", "test")})
    else:
        files = file_overrides(pair_files)
    cfg = compose_cfg([*overrides, *files, "logger=csv", "trainer.max_epochs=1",
                       "trainer.limit_train_batches=2", "trainer.limit_val_batches=1",
                       "trainer.limit_test_batches=1", "eval_train=false",
                       "callbacks.rich_progress_bar=null", "data.batch_size=8"], tmp_path)
    metrics = pipeline.train(cfg)
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["status"] == "completed" and "test/acc" in metrics
    if "model=decatt" in overrides:
        assert results["dim"] == 8 and cfg.model.net.hidden_size == 8
        assert results["tags"] == ["decatt", "d8", "snli"]
    else:
        assert cfg.embeddings.dim == 48 and results["tags"] == ["dcnn_sentence", "sst2"]


# --- tags ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("overrides", "tags"), [
    (["model=din1", "dim=256"], ["din1", "d256", "snli"]),
    (["experiment=table2/row17"], ["table2", "row17", "din1", "d400", "snli"]),
    (["experiment=protocols/sick", "data_root=/d", "model=lstm"],
     ["protocol_sick", "lstm", "d128", "sick"]),
    (["experiment=protocols/snli_dev2test", "data_root=/d", "model=decatt"],
     ["protocol_snli_dev2test", "decatt", "d200", "snli_dev2test"]),
    (["model=diin"], ["diin", "snli"]),
])
def test_every_run_is_tagged_with_its_model_size_and_data(overrides, tags, tmp_path):
    from entailment_lab.config import run_tags

    assert run_tags(compose_cfg(overrides, tmp_path)) == tags


def test_a_single_run_folder_carries_the_model():
    from hydra import compose
    from hydra.core.hydra_config import HydraConfig

    with hydra_context(CONF, "train"):
        for config, overrides, end in (("train", ["model=decatt"], "-decatt"),
                                       ("eval", ["ckpt_path=x"], "")):
            cfg = compose(config, overrides=overrides, return_hydra_config=True)
            HydraConfig.instance().set_config(cfg)
            assert re.search(f"/{config}/[-0-9]+/[-0-9]+-\\w{{6}}{end}$",
                             OmegaConf.select(cfg, "hydra.run.dir"))


# --- resuming -----------------------------------------------------------------------------------
class KillAt(L.Callback):
    """``kill -9`` this process when training epoch ``epoch`` starts, once (a marker file)."""

    def __init__(self, epoch: int, marker: str) -> None:
        self.epoch, self.marker = epoch, Path(marker)

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.current_epoch == self.epoch and not self.marker.exists():
            self.marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)


TINY_RUN = ["model=lstm", "dim=16", "model.net.mlp_size=32", "embeddings=random",
            "embeddings.dim=16", "logger=csv", "callbacks.rich_progress_bar=null",
            "callbacks.early_stopping=null", "trainer.accelerator=cpu", "data.batch_size=16",
            "trainer.deterministic=true", "seed=5", "eval_train=false"]


def cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "src" / "train.py"), *args], cwd=cwd,
                          env=ENV, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def killed_run(pair_files, tmp_path_factory) -> Path:
    """A tiny CLI run killed with SIGKILL as its third epoch starts."""
    folder = tmp_path_factory.mktemp("killed")
    run_dir = folder / "run"
    done = cli([*TINY_RUN, *file_overrides(pair_files), "trainer.max_epochs=3",
                "+callbacks.killer._target_=tests.test_precheck.KillAt",
                "+callbacks.killer.epoch=2", f"+callbacks.killer.marker={folder / 'killed'}",
                f"hydra.run.dir={run_dir}"], folder)
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    return run_dir


@pytest.mark.slow
def test_a_killed_run_says_how_to_resume_and_resumes_from_ckpt_path_alone(killed_run,
                                                                          pair_files, tmp_path):
    results = json.loads((killed_run / "results.json").read_text())
    last = killed_run / "checkpoints" / "last.ckpt"
    assert results["status"] == "running"  # killed without a word
    assert results["resume"] == f"python src/train.py ckpt_path={last}"
    assert [row["epoch"] for row in results["history"]] == [0, 1]

    # A contradicting override is refused in one line, and the record stays as it was.
    before = (killed_run / "results.json").read_bytes()
    for override, said in (("dim=32", "dim was 16 in the run"),
                           ("optimizer.lr=0.5", "optimizer.lr was 0.001 in the run"),
                           ("model=din1", "the run trained model=lstm")):
        done = cli([f"ckpt_path={last}", override], tmp_path)
        assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.startswith(f"error: {override}: contradicts the checkpoint: {said}")
    assert (killed_run / "results.json").read_bytes() == before

    # The printed command alone continues the run in its folder, with its own config (in this
    # process: the kill needed one of its own, the resume does not).
    done = run_entry_point("src/train.py", results["resume"].split()[2:], cwd=tmp_path, env=ENV)
    assert done.returncode == 0, done.stderr[-3000:]
    resumed = json.loads((killed_run / "results.json").read_text())
    assert resumed["status"] == "completed" and "resume" not in resumed
    assert [row["epoch"] for row in resumed["history"]] == [0, 1, 2]
    assert not list(tmp_path.iterdir())  # nothing written where the command ran

    # It equals the uninterrupted run.
    whole = tmp_path / "whole"
    pipeline.train(compose_cfg([*TINY_RUN, *file_overrides(pair_files), "trainer.max_epochs=3"],
                               whole))
    expected = json.loads((whole / "results.json").read_text())
    for key in ("test/acc", "test/loss", "val/acc_best"):
        assert resumed["metrics"][key] == pytest.approx(expected["metrics"][key], abs=1e-6), key


@pytest.mark.usefixtures("no_data_read")
def test_hub_data_offline_and_uncached_is_refused_before_the_run(monkeypatch, tmp_path):
    """``data=snli`` with no local file, offline, in no cache: one line from the command-line
    check (before a run folder exists), naming the files to give instead; a cached copy, a
    local file or a reachable hub lets the run go on."""
    conf = CONF
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))  # an empty cache
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "datasets"))
    run = f"hydra.run.dir={tmp_path / 'run'}"
    for data, files in (("snli", "data.files.train=PATH data.files.validation=PATH "
                                 "data.files.test=PATH"),
                        ("mnli", "data.files.train=PATH data.files.test_matched=PATH "
                                 "data.files.test_mismatched=PATH")):
        with pytest.raises(ConfigError) as caught:
            checked_command("train", [f"data={data}", "model=lstm", run], conf)
        message = str(caught.value)
        assert "\n" not in message and "(HF_HUB_OFFLINE set) and no local cache holds it" \
            in message and message.endswith(files), message
    assert not (tmp_path / "run").exists()

    # No offline flag, the hub's address refuses the connection: said so, within seconds.
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    start = time.monotonic()
    with pytest.raises(ConfigError, match=r"\(the hub is unreachable: .*\) and no local cache"):
        checked_command("train", ["model=lstm", run], conf)
    assert time.monotonic() - start < 10

    # In a cache, as the hub client or datasets put it: datasets is left to load it.
    (tmp_path / "datasets" / "stanfordnlp___snli").mkdir(parents=True)
    checked_command("train", ["model=lstm", run], conf)


@pytest.mark.usefixtures("no_data_read")
def test_a_run_folder_or_another_file_as_ckpt_path_says_which_checkpoint_to_give(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    for name in ("epoch_003.ckpt", "last.ckpt"):
        (run / "checkpoints" / name).write_bytes(b"PK\x03\x04 a zip archive")
    (run / "results.json").write_text("{}")
    cases = [
        ("train", str(run), f"ckpt_path={run}: a folder, not a checkpoint; give one of its "
                            f"checkpoints, e.g. ckpt_path={run}/checkpoints/last.ckpt (to "
                            f"resume the run)"),
        ("eval", f"{run}/checkpoints", f"e.g. ckpt_path={run}/checkpoints/epoch_003.ckpt (the "
                                       f"best by validation accuracy)"),
        ("predict", str(run / "results.json"), "not a PyTorch checkpoint (a .ckpt file that "
                                               "train.py wrote under RUN/checkpoints/)"),
        ("train", str(tmp_path), f"ckpt_path={tmp_path}: a folder with no checkpoint"),
    ]
    for task, value, said in cases:
        with pytest.raises(ConfigError) as caught:
            checked_command(task, [f"ckpt_path={value}"], CONF)
        assert "\n" not in str(caught.value) and said in str(caught.value), (task, caught.value)


def test_a_failed_start_never_overwrites_the_run_it_resumes(pair_files, tmp_path):
    run_dir = tmp_path / "run"
    base = [*TINY_RUN, *file_overrides(pair_files)]
    pipeline.train(compose_cfg([*base, "trainer.max_epochs=1"], run_dir))
    before = (run_dir / "results.json").read_bytes()
    broken = tmp_path / "broken.jsonl"
    broken.write_text("{not json\n")
    last = run_dir / "checkpoints" / "last.ckpt"
    with pytest.raises(DataError):  # fails while reading the data, before training
        pipeline.train(compose_cfg([*base, f"data.files.train={broken}", f"ckpt_path={last}",
                                    "trainer.max_epochs=2"], run_dir))
    assert (run_dir / "results.json").read_bytes() == before


@pytest.fixture(scope="module")
def finished_run(pair_files, tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("finished") / "run"
    done = run_entry_point("src/train.py", [*TINY_RUN, *file_overrides(pair_files),
                                            "trainer.max_epochs=1", f"hydra.run.dir={run_dir}"],
                           cwd=run_dir.parent, env=ENV)
    assert done.returncode == 0, done.stderr[-2000:]
    return run_dir


def test_resuming_takes_the_runs_own_overrides(finished_run, tmp_path):
    last = finished_run / "checkpoints" / "last.ckpt"
    args = checked_command("train", [f"ckpt_path={last}", "trainer.max_epochs=2"], CONF)
    stored = [str(o) for o in OmegaConf.load(finished_run / ".hydra" / "overrides.yaml")]
    assert args[:-3] == [o for o in stored if not o.startswith("trainer.max_epochs")]
    assert args[-3:] == [f"ckpt_path={last}", "trainer.max_epochs=2",
                         f"hydra.run.dir={finished_run}"]


def test_without_the_runs_folder_the_checkpoints_config_decides(finished_run, tmp_path):
    """A checkpoint copied alone: no ``.hydra/`` and no ``results.json`` beside it. The
    command line must then give the run's overrides itself; the checkpoint's stored config
    refuses a difference."""
    import shutil

    alone = tmp_path / "alone"
    (alone / "checkpoints").mkdir(parents=True)
    shutil.copy(finished_run / "checkpoints" / "last.ckpt", alone / "checkpoints")
    last = alone / "checkpoints" / "last.ckpt"
    with pytest.raises(ConfigError, match=r"^contradicts the checkpoint: model\.name was 'lstm'"
                                          r".*the run's overrides were not found"):
        checked_command("train", [f"ckpt_path={last}"], CONF)
    stored = [str(o) for o in OmegaConf.load(finished_run / ".hydra" / "overrides.yaml")]
    checked_command("train", [*stored, f"ckpt_path={last}", "trainer.max_epochs=2"], CONF)


def test_a_new_run_never_writes_into_another_runs_folder(finished_run, tmp_path):
    with pytest.raises(ConfigError, match=r"holds a run already \(results\.json\); resume it "
                                          r"with ckpt_path="):
        checked_command("train", ["model=lstm", f"hydra.run.dir={finished_run}"], CONF)


def test_the_knob_tables_of_the_docs_are_generated():
    from entailment_lab.schema import KNOB_TABLES, knob_tables

    text = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    start, end = text.index(KNOB_TABLES[0]), text.index(KNOB_TABLES[1]) + len(KNOB_TABLES[1])
    assert text[start:end] == knob_tables(CONF), "run python -m entailment_lab.schema --write"


def test_eval_refuses_a_split_the_runs_data_lacks(finished_run, tmp_path):
    last = finished_run / "checkpoints" / "last.ckpt"
    with pytest.raises(ConfigError, match=r"^split=tset: the run's data has no such split \(did "
                                          r"you mean test\?\)"):
        checked_command("eval", [f"ckpt_path={last}", "split=tset",
                                 f"hydra.run.dir={tmp_path / 'run'}"], CONF)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("task", "args", "said"), [
    ("eval", ["ckpt_path=null"], "ckpt_path=null: eval needs a checkpoint"),
    ("predict", ["ckpt_path=null"], "ckpt_path=null: predict needs a checkpoint"),
    ("eval", ["data.files.test_matched={missing}"], "data.files.test_matched={missing}: no such "
                                                    "file"),  # a split this run's data lacks
    ("predict", ["input={missing}"], "input={missing}: no such file"),
    ("predict", ["input=-1"], "input=-1: must be a file or null"),
    ("predict", ["premise=[1,2]", "hypothesis=x"], "premise=[1, 2]: must be a sentence or null"),
    ("predict", ["input={test}", "output=''"], "output='': must be a file or null"),
])
def test_eval_and_predict_mistakes_are_one_line(task, args, said, finished_run, pair_files,
                                                tmp_path):
    """Found by a sweep of hostile values over eval's and predict's knobs: each of these ran
    for 8 s and ended in a traceback, or ran and ignored the value."""
    last = finished_run / "checkpoints" / "last.ckpt"
    given = [a.format(missing=tmp_path / "missing.jsonl", **pair_files) for a in args]
    ckpt = [] if any(a.startswith("ckpt_path=") for a in given) else [f"ckpt_path={last}"]
    with pytest.raises(ConfigError) as caught:
        checked_command(task, [*ckpt, *given, f"hydra.run.dir={tmp_path / 'run'}"], CONF)
    assert said.format(missing=tmp_path / "missing.jsonl") in str(caught.value)
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_machine_the_gpu_is_accepted_and_too_many_devices_named(pair_files, tmp_path):
    import torch

    files = [f"data.files.{k}={v}" for k, v in pair_files.items()]
    folder = f"hydra.run.dir={tmp_path / 'run'}"
    checked_command("train", ["trainer=gpu", "trainer.precision=16-mixed", *files, folder], CONF)
    too_many = torch.cuda.device_count() + 1
    with pytest.raises(ConfigError, match=rf"^trainer\.devices={too_many}: "):
        checked_command("train", ["trainer=gpu", f"trainer.devices={too_many}", *files, folder],
                        CONF)
