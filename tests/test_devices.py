"""No CPU-only assumption, shown on a CPU (issue 61; CI has no GPU).

Every check runs the models on an emulated GPU (``tests/device_emulation.py``): tensors that
exist before the block (weights, inputs, the gradients autograd makes) count as on ``cuda:0``,
so every path that branches on the device takes a GPU run's branch, and an operation mixing
them with tensors made on the host fails as CUDA would.

- **training step**: every model config (and its ``HARNESS_VARIANTS``) runs the module's
  ``training_step`` (network, loss, metric updates) and the backward pass there, with no
  operand on the wrong device and no more host synchronisations than its budget
  (``SYNC_BUDGET``: each read of a GPU value on the host, or data-dependent shape, is named);
- **the paths a GPU takes**: the emulated device turns off every CPU-only fast path (the C
  kernels, the sigmoid tanh, the CPU dropout, the hand-written GRU pass; the switches are the
  tensors' device, as on a real GPU), and the network gives the same logits and gradients as on
  the CPU: float64, and float32 with one thread (the C kernels' condition; DIN at m = 16, the
  kernels' sizes);
- **the checks catch what they claim**: a module that makes a tensor on the host in its forward,
  one that reads a value every step, and one that branches on the device;
- **a grep-able rule**: every tensor made in ``src/entailment_lab/models`` names its device
  (``device=``, or ``*_like`` / ``x.new_*``), except where a module is built (``__init__``,
  parameter initialisation), in ``heatmaps`` (maps for the host) and in the vocabulary tables
  of ``CONSTRUCTION_HELPERS``. ``grep -rnE "torch\\.(zeros|ones|empty|full|arange|tensor)\\("
  src/entailment_lab/models | grep -v device=`` lists the candidates; the test reads the code
  with ``ast``.
"""

from __future__ import annotations

import ast
import contextlib
from pathlib import Path

import pytest
import torch
from torch import nn

from entailment_lab.models.base import Network
from entailment_lab.pipeline import build_module
from tests.device_emulation import EMULATED, DeviceMismatchError, EmulatedCuda, on_host
from tests.test_model_harness import MODELS, batch, build, composed, no_dropout, variants

pytestmark = [pytest.mark.usefixtures("one_thread"),
              # nn.LSTM/GRU ask cuDNN about the emulated device's weights; there is none
              pytest.mark.filterwarnings("ignore:PyTorch was compiled without cuDNN"),
              # a step called without a Trainer: self.log is a no-op there
              pytest.mark.filterwarnings("ignore:You are trying to `self.log()`")]

MODELS_DIR = Path(__file__).resolve().parents[1] / "src" / "entailment_lab" / "models"

#: Host synchronisations a training step may make at the test's batch, per model config (the
#: most over its variants), and why each is there. ``longest_first`` reads the rows still
#: running at each step (the Python loop of a recurrence needs them); ``pack`` copies the
#: lengths to the host (``pack_padded_sequence`` takes them there) and ``pad_packed_sequence``
#: indexes them there (torch's own ``.cpu()``).
SYNC_BUDGET = {
    "dcnn": 2,  # k-max pooling's slot count max(k), a Python int: one per layer
    "dcnn_sentence": 1,
    "decatt": 0,
    "decatt_intra": 0,
    "dflstm": 0,
    "diin": 4,  # real_extent: the batch's last real word on each side (nonzero, then int)
    "din1": 3,  # longest_first: the hypothesis words, the premise (+ the "paper" encoder GRU)
    "din1_static": 4,  # + the static GRU's packed sequence (pack, pad_packed_sequence)
    "din2": 3,
    "hyperlstm": 2,  # longest_first: premise and hypothesis
    "lexical": 3,  # the chunk's longest sentences, and the active hashed features (a mask)
    "lstm": 2,  # pack: premise and hypothesis
    "lstmn": 0,
    "mlstm": 5,  # pack and pad_packed_sequence on both sides, longest_first
    "rlstm": 2,  # pack and pad_packed_sequence of the premise
    "tclstm": 0,
    "wbw_attention": 4,  # pack and pad_packed_sequence, premise and hypothesis
}
#: The module's own host reads per step: torchmetrics' ``MeanMetric`` (the loss's running mean)
#: checks each update for NaN (``nan_strategy="warn"``: two ``bool`` reads). ``"disable"`` would
#: skip them, but it also drops the weights an update passes (torchmetrics issue 3434).
MODULE_SYNCS = 2
#: Module-level functions that build a network's constant tables on the host once, in its
#: constructor, kept as buffers (which move with the module).
CONSTRUCTION_HELPERS = {"diin.py": {"build_char_ids", "build_match_keys"}}
#: Methods that build a module or its analysis maps (on the host by the ``HeatMap`` contract).
EXEMPT_METHODS = {"__init__", "reset_parameters", "_reset_parameters", "heatmaps"}
#: torch functions that make a new tensor and take ``device=``.
FACTORIES = frozenset({"zeros", "ones", "empty", "full", "arange", "range", "linspace",
                       "logspace", "eye", "tensor", "as_tensor", "rand", "randn", "randint",
                       "randperm", "empty_strided", "scalar_tensor", "tril_indices",
                       "triu_indices", "from_numpy"})


def all_cases() -> list:
    return [pytest.param(model, variant, id="-".join((model, *(o.rpartition(".")[2]
                                                                for o in variant))))
            for model in MODELS for variant in variants(model)]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("devices")


def network_batch(net: Network, cfg, seed: int = 5) -> dict[str, torch.Tensor]:
    """The harness's padded batch (noise ids under the masks) as the module reads it."""
    torch.manual_seed(seed)
    inputs = batch(net, cfg, [13, 6, 9], [4, 12, 7])
    names = (("sentence", "sentence_mask") if net.inputs == "sentence" else
             ("premise", "premise_mask", "hypothesis", "hypothesis_mask"))
    return dict(zip(names, inputs, strict=True))


def test_sync_budget_names_every_model():
    assert set(SYNC_BUDGET) == set(MODELS)


@pytest.mark.parametrize(("model", "variant"), all_cases())
def test_training_step_on_an_emulated_gpu(model, variant, folder):
    cfg = composed(model, folder, *variant)
    net, embedding = build(cfg)
    module = build_module(cfg, net, embedding, list(cfg.data.label_names), metadata={})
    module.train()
    inputs = network_batch(net, cfg)
    inputs["label"] = torch.arange(3) % len(cfg.data.label_names)
    with EmulatedCuda() as gpu:  # raises DeviceMismatchError at the first operand on the host
        loss = module.training_step(inputs, batch_idx=1)
        loss.backward()
        assert loss.device == EMULATED and not on_host(loss)
    trainable = [p for p in net.parameters() if p.requires_grad]
    assert any(p.grad is not None for p in trainable)
    module_syncs = sum(n for site, n in gpu.syncs.items() if " module.py:" in site)
    network_syncs = sum(gpu.syncs.values()) - module_syncs
    assert module_syncs <= MODULE_SYNCS, dict(gpu.syncs)
    assert network_syncs <= SYNC_BUDGET[model], dict(gpu.syncs)


def forward_backward(net: Network, inputs: dict[str, torch.Tensor], labels: torch.Tensor,
                     gpu: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Logits and every parameter's gradient of one cross-entropy step, on the CPU or on the
    emulated GPU."""
    net.zero_grad(set_to_none=True)
    with EmulatedCuda() if gpu else contextlib.nullcontext():
        logits = net(**inputs)["logits"]
        nn.functional.cross_entropy(logits, labels).backward()
    return logits.detach(), {n: p.grad.clone() for n, p in net.named_parameters()
                             if p.grad is not None}


def assert_same_step(net: Network, inputs: dict[str, torch.Tensor], labels: torch.Tensor,
                     rtol: float, atol: float) -> None:
    cpu_logits, cpu_grads = forward_backward(net, inputs, labels, gpu=False)
    gpu_logits, gpu_grads = forward_backward(net, inputs, labels, gpu=True)
    torch.testing.assert_close(gpu_logits, cpu_logits, rtol=rtol, atol=atol)
    assert gpu_grads.keys() == cpu_grads.keys()
    for name, grad in cpu_grads.items():
        torch.testing.assert_close(gpu_grads[name], grad, rtol=rtol, atol=atol, msg=name)


@pytest.mark.parametrize(("model", "variant"), all_cases())
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_gpu_paths_give_the_cpu_paths_logits_and_gradients(model, variant, dtype, folder):
    cfg = composed(model, folder, *variant)
    cfg = composed(model, folder, *variant, *no_dropout(cfg))
    net, _ = build(cfg, seed=2)
    net.to(dtype).train()
    inputs = network_batch(net, cfg)
    labels = torch.arange(3) % len(cfg.data.label_names)
    tolerance = (1e-10, 1e-12) if dtype == torch.float64 else (1e-4, 1e-5)
    assert_same_step(net, inputs, labels, *tolerance)


@pytest.mark.parametrize("model", ["din1", "din2"])
def test_din_at_the_c_kernels_size_gives_the_same_step_on_both_paths(model, folder):
    """m = 16 (dim 256): the size the C kernels are built for, so on a CPU with them the CPU
    side runs them (float32, one thread) and the emulated GPU side ``torch.bmm``."""
    cfg = composed(model, folder, "dim=256")
    cfg = composed(model, folder, "dim=256", *no_dropout(cfg))
    net, _ = build(cfg, seed=2)
    net.train()
    inputs = network_batch(net, cfg)
    assert_same_step(net, inputs, torch.tensor([0, 1, 2]), rtol=1e-4, atol=1e-5)


# --- the checks catch what they claim ------------------------------------------------------------
class HostZeros(nn.Module):
    """A seeded bug: the forward makes a tensor without ``device=``."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) + torch.zeros(len(x), 3)  # on the host, whatever x's device


class ReadsEveryStep(nn.Module):
    """A seeded waste: a value read on the host at each step of a loop."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(3):
            x = self.linear(x)
            if x.abs().max() > 1e6:  # bool(tensor): the host waits for the GPU
                break
        return x


class DeviceBranch(nn.Module):
    """A fast path switched by the device, as the models' CPU paths are."""

    def forward(self, x: torch.Tensor) -> tuple[str, torch.Tensor]:
        if x.device.type == "cpu":
            return "cpu path", x * 2
        return "gpu path", x + x


def test_a_tensor_made_on_the_host_in_a_forward_is_a_device_mismatch():
    x = torch.randn(2, 4)
    HostZeros()(x)  # passes on a CPU
    with EmulatedCuda(), pytest.raises(DeviceMismatchError, match=r"add .* host tensors of shapes "
                                                             r"\[\(2, 3\)\] at test_devices\.py"):
        HostZeros()(x)
    with EmulatedCuda(strict=False) as gpu:
        HostZeros()(x)
    assert len(gpu.mismatches) == 1


def test_operands_cuda_takes_on_the_host_pass():
    x, mask = torch.randn(3, 5, 2), torch.tensor([[True] * 5, [True] * 3 + [False] * 2,
                                                  [True] + [False] * 4])
    with EmulatedCuda() as gpu:
        y = x * torch.tensor(2.0)  # a zero-dimensional host tensor: a scalar
        rows = y[torch.arange(3), torch.tensor([4, 2, 0])]  # host index tensors
        packed = nn.utils.rnn.pack_padded_sequence(y, mask.sum(1).cpu(), batch_first=True,
                                                   enforce_sorted=False)
        out, _ = nn.GRU(2, 3, batch_first=True)(packed)
        padded, lengths = nn.utils.rnn.pad_packed_sequence(out, batch_first=True)
        assert rows.device == padded.device == EMULATED and lengths.device.type == "cpu"
    assert sum(gpu.syncs.values()) == 2  # the lengths to the host, and torch's own .cpu()


def test_host_reads_are_counted_where_they_happen():
    module, x = ReadsEveryStep(), torch.randn(2, 4)  # made before the block: on the GPU
    with EmulatedCuda() as gpu:
        module(x)
    (site, count), = gpu.syncs.items()
    assert count == 3 and site.startswith("__bool__: test_devices.py:") and "forward" in site
    x = torch.randn(4)
    with EmulatedCuda() as gpu:
        x.tolist()
        x[x > 0]
        x.cpu()
        x.sum().item()
        torch.arange(3).tolist()  # made on the host: no synchronisation
    assert sorted(k.split(":")[0] for k in gpu.syncs) == [
        "__getitem__ with a boolean mask", "cpu", "item", "tolist"]


def test_a_device_branch_takes_the_gpu_path():
    x = torch.ones(2)
    assert DeviceBranch()(x)[0] == "cpu path"
    with EmulatedCuda():
        path, y = DeviceBranch()(x)
        assert path == "gpu path" and y.device == EMULATED and y.is_cuda
        assert torch.ones(1).device.type == "cpu" and torch.ones(1, device=y.device).is_cuda


# --- the grep-able rule ---------------------------------------------------------------------------
def host_factories(path: Path) -> list[int]:
    """The lines of ``path`` with a torch factory call without ``device=``, outside module
    construction, ``heatmaps`` and the file's construction helpers."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    exempt_functions = EXEMPT_METHODS | CONSTRUCTION_HELPERS.get(path.name, set())
    found = []

    def visit(node: ast.AST, exempt: bool) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            exempt = exempt or node.name in exempt_functions
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"
                and node.func.attr in FACTORIES and not exempt
                and not any(k.arg == "device" for k in node.keywords)):
            found.append(node.lineno)
        for child in ast.iter_child_nodes(node):
            visit(child, exempt)

    for statement in tree.body:  # module level: constants, made once on the host
        if isinstance(statement, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef):
            visit(statement, exempt=False)
    return found


def test_every_tensor_made_in_the_models_names_its_device():
    found = [f"{path.relative_to(MODELS_DIR)}:{line}" for path in sorted(MODELS_DIR.rglob("*.py"))
             for line in host_factories(path)]
    assert not found, ("tensors made without device= (use device=x.device, torch.*_like or "
                       "x.new_*): " + ", ".join(found))


def test_the_rule_finds_a_host_tensor(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\nSCALE = torch.tensor(2.0)\n\nclass M:\n"
                   "    def __init__(self):\n        self.w = torch.zeros(3)\n\n"
                   "    def forward(self, x):\n        return x + torch.zeros(3)\n\n"
                   "    def fine(self, x):\n        return torch.arange(3, device=x.device)\n")
    assert host_factories(bad) == [9]
