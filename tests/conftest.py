"""Shared fixtures: a small pair corpus written by the project, and Hydra composition."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, open_dict

from entailment_lab.cli import CONFIG_DIR, register_resolvers
from entailment_lab.data.demo import write_demo_corpus

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_SILENT", "true")
register_resolvers()

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def pair_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """train / validation / test JSONL files of templated pairs (60 / 30 / 30)."""
    folder = tmp_path_factory.mktemp("pairs")
    return write_demo_corpus(folder, sizes={"train": 60, "validation": 30, "test": 30}, seed=7)


def file_overrides(files: dict[str, str]) -> list[str]:
    return [f"data.files.{split}={path}" for split, path in files.items()]


def compose_cfg(overrides: list[str], tmp_path: Path, config_name: str = "train") -> DictConfig:
    """Compose a real config as ``src/train.py`` would, with the job folder in ``tmp_path``."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=CONFIG_DIR):
        cfg = compose(config_name=config_name, overrides=overrides, return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = str(tmp_path)
        cfg.hydra.job.num = 0
        cfg.paths.output_dir = str(tmp_path)
        cfg.paths.data_dir = str(tmp_path / "data")
        cfg.paths.cache_dir = str(tmp_path / "cache")
    HydraConfig().set_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]  # a task function never sees it
    return cfg


# Fast settings for training tests: random trainable embeddings, tiny model, no W&B.
FAST = [
    "embeddings=random", "embeddings.dim=16", "logger=csv", "callbacks.rich_progress_bar=null",
    "trainer.accelerator=cpu", "trainer.enable_model_summary=false", "data.batch_size=16",
]


@pytest.fixture(scope="module")
def one_thread():
    """Tiny tensors: one intra-op thread is faster and does not fight parallel jobs for CPU.

    Use with ``pytestmark = pytest.mark.usefixtures("one_thread")``.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def random_sentences(lengths: Iterable[int | torch.Tensor], vocab_size: int) -> list[torch.Tensor]:
    """One sentence of random real ids (1 .. vocab_size - 1) per length."""
    return [torch.randint(1, vocab_size, (int(n),)) for n in lengths]


def pad_with_noise(sentences: list[torch.Tensor], vocab_size: int
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad id sequences; padded slots get random real ids so only the mask can hide them
    (the padding-invariance tests of every model)."""
    length = max(len(s) for s in sentences)
    ids = torch.randint(1, vocab_size, (len(sentences), length))
    mask = torch.zeros(len(sentences), length, dtype=torch.bool)
    for row, sentence in enumerate(sentences):
        ids[row, : len(sentence)] = sentence
        mask[row, : len(sentence)] = True
    return ids, mask


def fits_exactly(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], labels: torch.Tensor,
                 lr: float, steps: int = 300, regularized: bool = False) -> bool:
    """Adam on the batch until every training logit is right (models built without dropout, so
    the training forward measures accuracy): the over-fit check of every model test.
    ``regularized`` adds the model's ``regularization_loss()`` to the cross-entropy."""
    optimiser = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
    for _ in range(steps):
        logits = model(*inputs)["logits"]
        if (logits.argmax(1) == labels).all():
            return True
        optimiser.zero_grad()
        loss = torch.nn.functional.cross_entropy(logits, labels)
        (loss + model.regularization_loss() if regularized else loss).backward()
        optimiser.step()
    return bool((model(*inputs)["logits"].argmax(1) == labels).all())
