"""The numeric path in every record (``numeric_path.py``): a training run and an evaluation
write which threads, CPU, device, fast paths and determinism switches computed them, and the
thread choice carries its fields."""

from __future__ import annotations

import json

import pytest
import torch

from entailment_lab import threads
from entailment_lab.models import kernels
from entailment_lab.numeric_path import numeric_path
from entailment_lab.pipeline import evaluate, train
from tests.conftest import FAST, compose_cfg, file_overrides

KEYS = {"torch", "device", "cpu", "threads", "flush_denormal", "kernels", "native_kernels",
        "determinism"}


@pytest.fixture
def one_thread_chosen(monkeypatch):
    """The entry points' thread policy, as ``src/train.py`` runs it with ``threads=1``."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    count = torch.get_num_threads()
    yield threads.set_threads(1)
    torch.set_num_threads(count)


def test_a_din_run_and_its_evaluation_record_their_numeric_path(pair_files, tmp_path,
                                                                one_thread_chosen):
    """DIN-1 16×16 on one thread: the record names the thread choice, the CPU, and every fast
    path that ran (the interaction in the C kernel where it is built here, else torch); the
    evaluation of its checkpoint records its own path (inference: no hand-written backward)."""
    cfg = compose_cfg(["model=din1", "dim=256", *FAST, *file_overrides(pair_files),
                       "debug=tiny", "trainer.max_epochs=1", "threads=1"], tmp_path / "run")
    train(cfg)
    record = json.loads((tmp_path / "run" / "results.json").read_text())
    path = record["numeric_path"]
    assert set(path) == KEYS
    assert path["torch"] == torch.__version__ and path["device"] == "cpu"
    assert path["threads"] == {"count": 1, "chosen_by": "threads=1", "detail": ""}
    assert path["cpu"]["torch_capability"] == torch.backends.cpu.get_cpu_capability()
    built = kernels.native_status().get("small_products", "")
    interaction = "torch" if built.startswith("torch") else "C small_products"
    assert path["kernels"] == {"control": ["hand-written backward"],
                               "encoder_gru": ["hand-written backward"],
                               "interaction": [interaction],
                               "interaction_backward": [interaction],
                               "tanh": ["2σ(2x) − 1"]}
    assert path["native_kernels"] == {"small_products": built}
    assert path["determinism"]["deterministic_algorithms"] is False

    eval_cfg = compose_cfg([f"ckpt_path={record['best_checkpoint']}", "split=test",
                            "trainer.enable_model_summary=false"], tmp_path / "eval",
                           config_name="eval")
    evaluate(eval_cfg)
    evaluated = json.loads((tmp_path / "eval" / "results.json").read_text())["numeric_path"]
    assert evaluated["kernels"] == {"interaction": [interaction], "tanh": ["2σ(2x) − 1"]}


def test_the_thread_choice_is_a_line_with_fields(monkeypatch):
    """``set_threads`` still returns the line it logs; its fields are what the record keeps,
    and a count changed after the choice is said so."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    count = torch.get_num_threads()
    try:
        choice = threads.set_threads(2)
        assert choice.startswith("torch threads: 2 (threads=2;")
        assert (choice.count, choice.chosen_by, choice.detail) == (2, "threads=2", "")
        assert threads.cpu_policy()["threads"] == {"count": 2, "chosen_by": "threads=2",
                                                   "detail": ""}
        monkeypatch.setattr(threads, "auto_threads", lambda jobs: (1, "auto: 2 core(s), 1 busy"))
        choice = threads.set_threads("auto")
        assert (choice.count, choice.chosen_by, choice.detail) == (1, "auto",
                                                                   "auto: 2 core(s), 1 busy")
        torch.set_num_threads(2)
        assert threads.cpu_policy()["threads"] == {"count": 2, "chosen_by": "changed after start",
                                                   "detail": "auto chose 1"}
    finally:
        torch.set_num_threads(count)


def test_the_record_counts_only_what_ran_since_its_start():
    """A second job in one process (a multirun) does not inherit the first one's fast paths."""
    since = kernels.calls()
    kernels.tanh(torch.zeros(3))
    assert numeric_path("cpu", since)["kernels"] == {"tanh": ["2σ(2x) − 1"]}
    assert numeric_path("cpu", kernels.calls())["kernels"] == {}
    json.dumps(numeric_path("cpu"))  # JSON as it is
