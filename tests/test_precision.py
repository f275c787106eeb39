"""Mixed precision works for every model (CPU tests; CI has no GPU).

* Every model config trains, validates and tests through the real pipeline under
  ``trainer.precision=bf16-mixed``: on CPU, Lightning runs each step under
  ``torch.autocast("cpu", torch.bfloat16)``. Losses are finite, the weights and their gradients
  stay float32 (the master weights of mixed precision).
* Every network's forward + backward under the casts of the runs that CPU tests cannot make:
  float16 autocast on CPU, and CUDA autocast's policy for ``bf16-mixed`` / ``16-mixed`` on a GPU,
  emulated on CPU tensors (``tests/autocast_emulation.py``): CUDA autocast casts other ops than
  CPU autocast does (softmax, sum, exp and layer norm in float32; cuDNN's LSTM / GRU in half).
* ``16-mixed`` on CPU is refused before any data is read (Lightning would only warn and train in
  ``bf16-mixed``).
"""

from __future__ import annotations

import json
import math
from typing import Any

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from omegaconf import open_dict

from entailment_lab.config import check_precision, instantiate
from entailment_lab.data.batching import network_inputs
from entailment_lab.errors import ConfigError
from entailment_lab.models.common import pack, run_rnn
from entailment_lab.pipeline import build_datamodule, build_net, train
from tests.autocast_emulation import CudaAutocast
from tests.conftest import FAST, compose_cfg, file_overrides
from tests.test_model_harness import MODELS, is_sentence_model
from tests.test_model_harness import model_overrides as harness_overrides

pytestmark = pytest.mark.usefixtures("one_thread")


def model_overrides(model: str, pair_files: dict[str, str],
                    sentence_files: dict[str, str]) -> list[str]:
    """A small instance of ``model`` (test_model_harness's sizes: every conf/model config, each
    model's HARNESS_OVERRIDES) on its kind of tiny corpus."""
    files = sentence_files if is_sentence_model(model) else pair_files
    return [*harness_overrides(model), *file_overrides(files)]


# --- bf16-mixed through Lightning -----------------------------------------------------------------
SEEN: list[dict[str, Any]] = []  # what PrecisionProbe saw in the last run


class PrecisionProbe(L.Callback):
    """Records, at every forward of the network, whether autocast was on and in which dtype,
    and at every optimiser step the dtypes of the weights and whether their gradients are
    float32 and finite."""

    hooked = False

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if not self.hooked:  # setup runs for fit and again for each test loop
            self.hooked = True

            def record(module: torch.nn.Module, args: Any, kwargs: Any, output: Any) -> None:
                SEEN.append({"stage": trainer.state.stage.value,
                             "autocast": torch.is_autocast_enabled("cpu"),
                             "dtype": torch.get_autocast_dtype("cpu")})

            pl_module.net.register_forward_hook(record, with_kwargs=True)

    def on_before_optimizer_step(self, trainer: L.Trainer, pl_module: L.LightningModule,
                                 optimizer: torch.optim.Optimizer) -> None:
        grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
        SEEN.append({"stage": "step",
                     "weights": {p.dtype for p in pl_module.parameters()},
                     "grads": {g.dtype for g in grads},
                     "finite": all(bool(torch.isfinite(g).all()) for g in grads)})


@pytest.mark.parametrize("model", MODELS)
def test_model_trains_validates_and_tests_under_bf16_mixed(model, pair_files, sentence_files,
                                                          tmp_path):
    SEEN.clear()
    cfg = compose_cfg([*model_overrides(model, pair_files, sentence_files), "debug=tiny",
                       "trainer.max_epochs=1", "trainer.precision=bf16-mixed",
                       f"+callbacks.precision_probe._target_={__name__}.PrecisionProbe"],
                      tmp_path)
    metrics = train(cfg)
    assert json.loads((tmp_path / "results.json").read_text())["status"] == "completed"
    for name in ("train/loss_epoch", "val/loss", "test/loss"):
        assert math.isfinite(metrics[name]), name

    forwards = [s for s in SEEN if s["stage"] != "step"]
    assert {s["stage"] for s in forwards} >= {"train", "validate", "test"}
    assert all(s["autocast"] and s["dtype"] == torch.bfloat16 for s in forwards)
    steps = [s for s in SEEN if s["stage"] == "step"]
    assert steps
    for step in steps:  # mixed precision keeps float32 master weights and gradients
        assert step["weights"] == {torch.float32} and step["grads"] == {torch.float32}
        assert step["finite"]


@pytest.mark.parametrize("lengths", [[5, 5, 5], [5, 3, 2]], ids=["equal", "ragged"])
@pytest.mark.parametrize("cell", [torch.nn.LSTM, torch.nn.GRU])
def test_recurrences_run_in_float32_under_cpu_autocast(cell, lengths):
    """CPU autocast sends an LSTM batch whose rows share one length to oneDNN in bfloat16, which
    fails on CPUs without AVX512-BF16; ``run_rnn`` runs CPU recurrences in float32 instead: the
    same outputs as without autocast, on any CPU."""
    torch.manual_seed(0)
    rnn = cell(8, 6, batch_first=True)
    x = torch.randn(3, 5, 8)
    mask = torch.arange(5)[None, :] < torch.tensor(lengths)[:, None]
    hx = torch.randn(1, 3, 6).bfloat16().float()  # bfloat16 values: the same state either way
    hx = (hx, torch.randn(1, 3, 6).bfloat16().float()) if cell is torch.nn.LSTM else hx
    expected, _ = run_rnn(rnn, pack(x, mask), hx)
    half_hx = tuple(h.bfloat16() for h in hx) if isinstance(hx, tuple) else hx.bfloat16()
    with torch.autocast("cpu", torch.bfloat16):
        out, _ = run_rnn(rnn, pack(x, mask), half_hx)
    assert out.data.dtype == torch.float32
    torch.testing.assert_close(out.data, expected.data)


# --- every network under float16 on CPU and CUDA's casts (emulated) -----------------------------
POLICIES = {  # name -> (the context, the dtype it computes matmuls in)
    "cpu-float16": (lambda: torch.autocast("cpu", dtype=torch.float16), torch.float16),
    "cuda-bf16-mixed": (lambda: CudaAutocast(torch.bfloat16), torch.bfloat16),
    "cuda-16-mixed": (lambda: CudaAutocast(torch.float16), torch.float16),
}
# The lexical model's logits add its float32 bias and hashed weights (an embedding bag, never
# cast) to one small linear map of the dense features, which autocast casts.
FLOAT32_LOGITS = {"lexical"}


@pytest.fixture(scope="module")
def networks(pair_files, sentence_files, tmp_path_factory):
    """model -> (network, inputs, labels): built once per model from its config, one batch."""
    built: dict[str, tuple] = {}

    def build(model: str) -> tuple:
        if model not in built:
            cfg = compose_cfg(model_overrides(model, pair_files, sentence_files),
                              tmp_path_factory.mktemp(model))
            with open_dict(cfg):
                cfg.data.batch_size = 8
            torch.manual_seed(0)
            datamodule = build_datamodule(cfg.data)
            embedding = instantiate(cfg.embeddings, "embeddings")(vocab=datamodule.vocab)
            net = build_net(cfg.model.net, embedding, datamodule.num_classes, datamodule.vocab)
            batch = next(iter(datamodule.dataloader("train")))
            built[model] = (net, network_inputs(batch),
                            batch["label"])
        return built[model]

    return build


@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("model", MODELS)
def test_network_forward_and_backward_under_autocast(model, policy, networks):
    net, inputs, labels = networks(model)
    context, dtype = POLICIES[policy]
    net.train()
    net.zero_grad(set_to_none=True)
    torch.manual_seed(0)
    try:
        with context():
            logits = net(**inputs)["logits"]
            loss = F.cross_entropy(logits, labels)
            regularization = net.regularization_loss()
            if regularization is not None:
                loss = loss + regularization
            loss.backward()
    except RuntimeError as err:
        # oneDNN has float16 LSTM kernels only on CPUs with float16 arithmetic (AVX512-FP16 /
        # AMX-FP16): torch's limit, not the model's. 16-mixed is for GPUs (see the cuda cases).
        if policy == "cpu-float16" and "primitive descriptor for the LSTM" in str(err):
            pytest.skip(f"this CPU's oneDNN has no float16 LSTM: {err}")
        raise
    assert logits.dtype == (torch.float32 if model in FLOAT32_LOGITS else dtype)  # cast took
    assert torch.isfinite(logits).all() and torch.isfinite(loss)
    for name, parameter in net.named_parameters():
        assert parameter.dtype == torch.float32, name
        if parameter.grad is not None:
            assert parameter.grad.dtype == torch.float32, name
            assert torch.isfinite(parameter.grad).all(), name

    net.eval()  # the evaluation forward with the maps of explain.py
    with torch.no_grad(), context():
        out = net(**inputs, return_details=True)
    assert torch.isfinite(out["logits"]).all()


def test_cuda_emulation_casts_as_cuda_autocast():
    """The emulation's policies on a few ops, as documented for torch.autocast("cuda")."""
    x, w = torch.randn(2, 3), torch.randn(4, 3)
    with CudaAutocast(torch.bfloat16) as emulation:
        scores = F.linear(x, w)  # lower precision
        assert scores.dtype == torch.bfloat16
        assert torch.softmax(scores, dim=-1).dtype == torch.float32  # float32 output
        assert scores.sum(dim=0).dtype == torch.float32
        assert scores.exp().dtype == torch.float32  # float32
        assert (scores * 2).dtype == torch.bfloat16  # not listed: as it is
        rows = torch.zeros(3, 4).index_put((torch.tensor([0, 2]),), scores)  # promote
        assert rows.dtype == torch.float32
    assert emulation.counts == {"lower": 1, "float32": 1, "float32_output": 2, "promote": 1}


# --- 16-mixed on CPU ------------------------------------------------------------------------------
def test_lightning_trains_16_mixed_on_cpu_in_bf16():
    """What the check below guards against (Lightning 2.x): a warning, then bf16-mixed."""
    with pytest.warns(UserWarning, match="AMP with fp16 is not supported on CPU"):
        trainer = L.Trainer(accelerator="cpu", precision="16-mixed", logger=False,
                            enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False)
    assert trainer.precision == "bf16-mixed"


@pytest.mark.parametrize("precision", ["16-mixed", "16"])
def test_16_mixed_on_cpu_is_refused_before_data_is_read(precision, tmp_path):
    missing = str(tmp_path / "missing.jsonl")  # never read: the check comes first
    cfg = compose_cfg(["model=lstm", *FAST, f"trainer.precision={precision}",
                       *file_overrides(dict.fromkeys(("train", "validation", "test"), missing))],
                      tmp_path)
    with pytest.raises(ConfigError, match=r"bf16-mixed on CPU, or trainer=gpu"):
        train(cfg)
    assert json.loads((tmp_path / "results.json").read_text())["status"] == "failed"


def test_16_mixed_is_refused_on_auto_without_a_gpu_and_kept_with_one(monkeypatch):
    from lightning.pytorch.accelerators import CUDAAccelerator, MPSAccelerator

    monkeypatch.setattr(MPSAccelerator, "is_available", staticmethod(lambda: False))
    monkeypatch.setattr(CUDAAccelerator, "is_available", staticmethod(lambda: False))
    with pytest.raises(ConfigError, match="needs a GPU"):
        check_precision({"accelerator": "auto", "precision": "16-mixed"})
    check_precision({"accelerator": "auto", "precision": "bf16-mixed"})
    check_precision({"accelerator": "cpu", "precision": "32-true"})
    monkeypatch.setattr(CUDAAccelerator, "is_available", staticmethod(lambda: True))
    check_precision({"accelerator": "auto", "precision": "16-mixed"})  # a GPU: Lightning's AMP
    check_precision({"accelerator": "gpu", "precision": "16-mixed"})

