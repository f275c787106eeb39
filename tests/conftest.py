"""Shared fixtures: a small pair corpus written by the project, Hydra composition, and the
checks every model test repeats (frozen word vectors, padded batches, padding invariance,
gradient flow, over-fitting)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, open_dict
from torch import nn

from entailment_lab.config import register_resolvers

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_SILENT", "true")
register_resolvers()

REPO = Path(__file__).resolve().parents[1]


def _hub_cache_with_every_dataset() -> str:
    """A hub download cache in which every hub dataset of ``conf/data`` has its folder, empty:
    the configs' defaults pass ``config.check_hub`` (offline, a dataset no cache holds is
    refused before the run starts) as on a machine that downloaded them once. Nothing is read
    from it: tests give local files. ``tests/test_precheck.py`` checks the refusal itself."""
    import atexit
    import shutil
    import tempfile

    from omegaconf import OmegaConf

    cache = Path(tempfile.mkdtemp(prefix="hub-cache-"))
    atexit.register(shutil.rmtree, cache, ignore_errors=True)
    for config in (REPO / "conf" / "data").glob("*.yaml"):
        name = OmegaConf.load(config).get("hub_name")
        if name:
            (cache / f"datasets--{name.replace('/', '--')}").mkdir()
    return str(cache)


if not Path(os.environ.get("HF_HUB_CACHE", "/")).name.startswith("hub-cache-"):
    os.environ["HF_HUB_CACHE"] = _hub_cache_with_every_dataset()  # xdist workers inherit it


@pytest.fixture(scope="session")
def pair_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """train / validation / test JSONL files of templated pairs (60 / 30 / 30)."""
    from entailment_lab.data.demo import write_demo_corpus  # imports datasets: only here

    folder = tmp_path_factory.mktemp("pairs")
    return write_demo_corpus(folder, sizes={"train": 60, "validation": 30, "test": 30}, seed=7)


@pytest.fixture(scope="session")
def sentence_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A tiny 5-class sentence corpus in the SST schema (``sentence``, ``label``)."""
    words = ["awful", "bad", "fine", "good", "great"]
    rows = [{"sentence": f"the film is {words[i % 5]} and {words[(i * 7) % 5]} .", "label": i % 5}
            for i in range(40)]
    from entailment_lab.data.demo import write_jsonl

    folder = tmp_path_factory.mktemp("sst")
    return {s: str(write_jsonl(rows, folder / f"{s}.jsonl")) for s in ("train", "validation",
                                                                       "test")}


def file_overrides(files: dict[str, str]) -> list[str]:
    return [f"data.files.{split}={path}" for split, path in files.items()]


def compose_cfg(overrides: list[str], tmp_path: Path, config_name: str = "train") -> DictConfig:
    """Compose a real config as ``src/train.py`` would, with the job folder in ``tmp_path``;
    ``conf/`` is found as Hydra's config path relative to this folder."""
    GlobalHydra.instance().clear()
    # Left initialised (no ``with``), as inside ``@hydra.main``: the task may ask Hydra for
    # the config groups' options (config.budget_options).
    initialize(version_base="1.3", config_path="../conf")
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


@pytest.fixture
def no_data_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading any data fails the test: every case must end before it."""
    from entailment_lab.data.datamodule import TextDataModule

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("data was read")

    for name in ("prepare_data", "setup"):
        monkeypatch.setattr(TextDataModule, name, refuse)


@pytest.fixture(scope="module")
def one_thread():
    """Tiny tensors: one intra-op thread is faster and does not fight parallel jobs for CPU.

    Use with ``pytestmark = pytest.mark.usefixtures("one_thread")``.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# Module fixtures that train a run: under pytest-xdist (``make test``: ``-n auto --dist
# loadgroup``) the tests that use one stay on one worker, so each run is trained once.
SHARED_RUNS = {"trained_run", "run", "ckpt", "predictor", "sentence_ckpt", "logged", "finished_run",
               "mnli_run"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SHARED_RUNS & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))
    # The slow tests first (a stable sort): pytest-xdist hands tests out in this order, so the
    # longest start early and none is left running alone at the end while the other workers
    # idle (about 10 s of make test's wall clock on 2 cores).
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


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


def frozen_embedding(vocab_size: int, dim: int, seed: int = 0) -> nn.Embedding:
    """Word vectors drawn after ``torch.manual_seed(seed)``, padding id 0, frozen (as the
    pipeline's fixed GloVe vectors): the embedding of the model tests."""
    torch.manual_seed(seed)
    embedding = nn.Embedding(vocab_size, dim, padding_idx=0)
    embedding.weight.requires_grad_(False)
    return embedding


def assert_padding_invariant(model: nn.Module, vocab_size: int, *,
                             premise_mates: Sequence[int] = (14, 9),
                             hypothesis_mates: Sequence[int] = (7, 12), position: int = 0,
                             **forward_kwargs: object) -> tuple[dict, dict]:
    """A random pair (5-word premise, 4-word hypothesis) gets the same logits alone as at row
    ``position`` of a batch whose other rows have the ``*_mates`` lengths (a longer one on each
    side, so the pair is padded, with noise ids under its mask). A sentence model
    (``inputs == "sentence"``) reads the premises only. ``model`` is put in eval mode;
    ``forward_kwargs`` (e.g. ``return_details=True``) go to both calls, whose outputs are
    returned, (alone, batch), for checks beyond the logits."""
    model.eval()
    sentence = getattr(model, "inputs", "pair") == "sentence"

    def run(premises: list[torch.Tensor], hypotheses: list[torch.Tensor]) -> dict:
        inputs = pad_with_noise(premises, vocab_size)
        if not sentence:
            inputs += pad_with_noise(hypotheses, vocab_size)
        return model(*inputs, **forward_kwargs)

    premise, hypothesis = torch.randint(1, vocab_size, (5,)), torch.randint(1, vocab_size, (4,))
    alone = run([premise], [hypothesis])
    premises = random_sentences(premise_mates, vocab_size)
    hypotheses = random_sentences(hypothesis_mates, vocab_size)
    premises.insert(position, premise)
    hypotheses.insert(position, hypothesis)
    assert max(premise_mates) > len(premise) and max(hypothesis_mates) > len(hypothesis)
    batch = run(premises, hypotheses)
    torch.testing.assert_close(batch["logits"][position : position + 1], alone["logits"],
                               rtol=1e-5, atol=1e-6)
    return alone, batch


def padded_pair_details(model: nn.Module, vocab_size: int,
                        premise_lengths: Sequence[int] = (6, 3),
                        hypothesis_lengths: Sequence[int] = (2, 5)
                        ) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """``model`` in eval mode on random pairs of these lengths (noise ids under the masks) with
    ``return_details=True``: (details, premise mask, hypothesis mask), the batch of the
    attention-map tests."""
    p_ids, p_mask = pad_with_noise(random_sentences(premise_lengths, vocab_size), vocab_size)
    h_ids, h_mask = pad_with_noise(random_sentences(hypothesis_lengths, vocab_size), vocab_size)
    return model.eval()(p_ids, p_mask, h_ids, h_mask, return_details=True), p_mask, h_mask


def assert_attention_over_real_premise(attention: torch.Tensor, premise_mask: torch.Tensor,
                                       hypothesis_mask: torch.Tensor) -> None:
    """``attention`` (batch, len_h, len_p): each real hypothesis word's row sums to 1 over the
    real premise positions; padded premise positions get no weight, padded hypothesis words
    all-zero rows."""
    assert attention.shape == (*hypothesis_mask.shape, premise_mask.shape[1])
    torch.testing.assert_close(attention.sum(2)[hypothesis_mask],
                               torch.ones(int(hypothesis_mask.sum())))
    pair_mask = hypothesis_mask[:, :, None] & premise_mask[:, None, :]
    assert attention[~pair_mask].abs().max() == 0


def check_premise_attention_map(model: nn.Module, vocab_size: int
                                ) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """The attention-map check of a model whose hypothesis words attend over the premise: on
    the pairs of ``padded_pair_details``, ``details["attention"]`` (batch, len_h, len_p) is
    normalised over the real premise words, and pair 1's heat map covers its real words
    (5 hypothesis rows, 3 premise columns). Returns what ``padded_pair_details`` returns."""
    out, p_mask, h_mask = padded_pair_details(model, vocab_size)
    assert out["attention"].shape == (2, 5, 6)  # (batch, len_h, len_p)
    assert_attention_over_real_premise(out["attention"], p_mask, h_mask)
    maps = model.heatmaps(out, ["p"] * 3, ["h"] * 5, index=1)
    assert maps["attention"].values.shape == (5, 3)
    return out, p_mask, h_mask


def assert_rows_match_reference(model: nn.Module, reference: Callable[..., torch.Tensor],
                                premise_lengths: Sequence[int],
                                hypothesis_lengths: Sequence[int], vocab_size: int) -> None:
    """Every pair of a padded batch (noise ids under the masks) gets the logits that
    ``reference(model, premise, hypothesis)`` computes on that pair alone, unpadded: the
    equation-by-equation tests of the grid models."""
    premises = random_sentences(premise_lengths, vocab_size)
    hypotheses = random_sentences(hypothesis_lengths, vocab_size)
    logits = model.eval()(*pad_with_noise(premises, vocab_size),
                          *pad_with_noise(hypotheses, vocab_size))["logits"]
    with torch.no_grad():
        for row, (p, h) in enumerate(zip(premises, hypotheses, strict=True)):
            torch.testing.assert_close(logits[row], reference(model, p, h), rtol=1e-5,
                                       atol=1e-6)


def assert_gradients_reach_every_parameter(model: nn.Module, inputs: tuple[torch.Tensor, ...],
                                           labels: torch.Tensor) -> None:
    """One cross-entropy backward pass on ``inputs``: every trainable parameter gets a non-zero
    gradient and the frozen word vectors (``model.embedding``) get none."""
    model.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(model(*inputs)["logits"], labels).backward()
    for name, parameter in model.named_parameters():
        if parameter.requires_grad:
            assert parameter.grad is not None, name
            assert parameter.grad.abs().sum() > 0, name
    assert model.embedding.weight.grad is None  # frozen word vectors


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

