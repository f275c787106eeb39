"""Make ``hyperlstm.pt``: our HyperLSTM cell against the authors' TensorFlow cell.

Run by hand only, never by the tests, in an environment with a CPU TensorFlow 2 (its
``tf.compat.v1`` graph mode), numpy and torch::

    python tests/models/hyperlstm/make_fixture.py /path/to/hardmaru/supercell [--out FILE]

The first argument is a checkout of hardmaru/supercell (the file ``supercell.py``; the fixture
was made at commit 063b01e). Its ``HyperLSTMCell`` is imported from there, unmodified; the code
was written for TensorFlow 1 and Python 2, so this script gives it what it needs from outside:

* ``tf`` is ``tf.compat.v1`` in graph mode, with ``tf.contrib.rnn.RNNCell`` (a plain base
  class: the cells define ``__call__`` themselves) and ``tf.contrib.rnn.LSTMStateTuple`` (a
  named tuple ``(c, h)``, as TensorFlow 1's; TensorFlow 2 with Keras 3 no longer has one).
* A variable-scope custom getter creates every variable in float64 with a zero initialiser (the
  cell's orthogonal initialiser divides with ``/`` and fails under Python 3; every variable is
  overwritten below anyway), and a bare ``tf.constant(float)`` is float64 (``layer_norm_all``
  adds ``tf.constant(epsilon)`` to a float64 variance).

Both cells get one set of random weights (ours drawn, then copied into supercell's variables by
the mapping in ``to_supercell``), one padded batch of five sequences of lengths 7, 3, 5, 1, 6
(padding filled with random vectors), in float64; supercell's cell is unrolled over all seven
steps and its output at each sequence's last real step is stored. Done with layer norm on (the
default of both) and off. Prints max |Δ| between the two and the parameter counts.
"""

from __future__ import annotations

import collections
import importlib.util
import sys
import types
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]  # entailment_lab, tests.*

from entailment_lab.models.hyperlstm import HyperLSTM  # noqa: E402
from tests.references.upstream import Upstream  # noqa: E402

UPSTREAM = Upstream("hardmaru/supercell", "063b01e75e6e8af5aeb0aac5cc583948f5887dd1",
                    paths=("supercell.py",))  # unmodified; its one file (no assets)

SIZES = {"input_size": 10, "hidden_size": 12, "hyper_size": 8, "embedding_size": 4}
LENGTHS = [7, 3, 5, 1, 6]
GATES = "ijfo"  # supercell's names of i, g, f, o (its "j" is our g)


def load_supercell(checkout: Path) -> types.ModuleType:
    """Import ``supercell.py`` from the checkout with ``tensorflow`` = ``tf.compat.v1``."""
    import tensorflow as real_tf

    v1 = real_tf.compat.v1
    v1.disable_eager_execution()
    shim = types.ModuleType("tensorflow")

    def constant(value, dtype=None, *args, **kwargs):  # a bare Python float -> float64
        if dtype is None and isinstance(value, float):
            dtype = v1.float64
        return v1.constant(value, dtype, *args, **kwargs)

    shim.__dict__.update(
        __getattr__=lambda name: getattr(v1, name),
        constant=constant,
        contrib=types.SimpleNamespace(rnn=types.SimpleNamespace(
            RNNCell=object, LSTMStateTuple=collections.namedtuple("LSTMStateTuple", "c h"))),
    )
    spec = importlib.util.spec_from_file_location("supercell", checkout / "supercell.py")
    module = importlib.util.module_from_spec(spec)
    saved = sys.modules.get("tensorflow")
    sys.modules["tensorflow"] = shim
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules["tensorflow"] = saved
    return module


def randomise_(model: HyperLSTM, seed: int) -> None:
    """Every parameter random (the default init zeroes some paths): N(0, 0.4²), LN gains 1 ± 0.3."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=generator, dtype=p.dtype)
            is_gain = name.endswith(("gain", "ln_c.weight"))
            p.copy_(1.0 + 0.3 * noise if is_gain else 0.4 * noise)


def to_supercell(model: HyperLSTM) -> dict[str, np.ndarray]:
    """Our parameters under supercell's variable names (scope ``rnn/HyperLSTMCell``)."""
    N, Nh, Nz = SIZES["hidden_size"], SIZES["hyper_size"], SIZES["embedding_size"]
    s = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    cell, hyper = "rnn/HyperLSTMCell/", "rnn/HyperLSTMCell/LSTMCell/"
    out = {
        cell + "W_xh": s["W_x"],  # (D, 4N), columns i, g, f, o = supercell's i, j, f, o
        cell + "W_hh": s["W_h"],  # (N, 4N)
        cell + "bias": s["b_0"].reshape(4 * N),  # b_0 of b(z_b) = W_bz z_b + b_0
        # The hyper LSTM reads concat([x, h]): the x rows first, then the h rows.
        hyper + "W_xh": np.concatenate([s["hyper_W_x"], s["hyper_W_hx"]], axis=0),
        hyper + "W_hh_i": s["hyper_W_h"],  # (Ñ, 4Ñ)
        hyper + "bias": s["hyper_b"],  # (4Ñ,)
    }
    z_hx_w, z_hx_b = s["z_hx.weight"], s["z_hx.bias"]  # (8 N_z, Ñ): [z_h of i,g,f,o; z_x of ...]
    for g, name in enumerate(GATES):
        for part, (kind, d_name) in enumerate((("h", "W_hz"), ("x", "W_xz"))):
            rows = slice((part * 4 + g) * Nz, (part * 4 + g + 1) * Nz)
            scope = f"{cell}hyper_{name}{kind}/"
            out[scope + "zw/super_linear_w"] = z_hx_w[rows].T  # (Ñ, N_z)
            out[scope + "zw/super_linear_b"] = z_hx_b[rows]
            out[scope + "alpha/super_linear_w"] = s[d_name][g]  # (N_z, N)
        scope = f"{cell}hyper_{name}b/"
        out[scope + "zb/super_linear_w"] = s["z_b.weight"][g * Nz:(g + 1) * Nz].T
        out[scope + "beta/super_linear_w"] = s["W_bz"][g]
    if model.ln is not None:
        out.update({
            cell + "ln_all/ln_gamma": s["ln.gain"].reshape(4 * N),
            cell + "ln_all/ln_beta": s["ln.bias"].reshape(4 * N),
            cell + "ln_c/ln_gamma": s["ln_c.weight"], cell + "ln_c/ln_beta": s["ln_c.bias"],
            hyper + "ln/ln_gamma": s["hyper_ln.gain"].reshape(4 * Nh),
            hyper + "ln/ln_beta": s["hyper_ln.bias"].reshape(4 * Nh),
            hyper + "ln_c/ln_gamma": s["hyper_ln_c.weight"],
            hyper + "ln_c/ln_beta": s["hyper_ln_c.bias"],
        })
    return out


def run_supercell(supercell: types.ModuleType, weights: dict[str, np.ndarray],
                  x: np.ndarray, layer_norm: bool) -> tuple[np.ndarray, int]:
    """supercell's HyperLSTMCell unrolled over x (batch, len, D): outputs (batch, len, N)."""
    tf = supercell.tf
    N, Nh, Nz = SIZES["hidden_size"], SIZES["hyper_size"], SIZES["embedding_size"]
    batch, length, D = x.shape

    def float64_zeros(getter, *args, **kwargs):
        kwargs.update(dtype=tf.float64, initializer=tf.zeros_initializer())
        return getter(*args, **kwargs)

    graph = tf.Graph()
    with graph.as_default():
        inputs = tf.placeholder(tf.float64, [batch, length, D])
        cell = supercell.HyperLSTMCell(N, use_layer_norm=layer_norm, hyper_num_units=Nh,
                                       hyper_embedding_size=Nz)
        zeros = tf.zeros([batch, N + Nh], tf.float64)
        state = tf.contrib.rnn.LSTMStateTuple(zeros, zeros)
        outputs = []
        with tf.variable_scope("rnn", reuse=tf.AUTO_REUSE, custom_getter=float64_zeros):
            for t in range(length):
                h, state = cell(inputs[:, t], state)
                outputs.append(h)
        outputs = tf.stack(outputs, axis=1)  # (batch, len, N)
        variables = {v.op.name: v for v in tf.global_variables()}
        assert set(variables) == set(weights), sorted(set(variables) ^ set(weights))
        with tf.Session(graph=graph) as session:
            for name, v in variables.items():
                assert tuple(v.shape) == weights[name].shape, name
                v.load(weights[name].astype(np.float64), session)
            result = session.run(outputs, {inputs: x})
        count = sum(int(np.prod(v.shape)) for v in variables.values())
    return result, count


def main() -> None:
    UPSTREAM.main(make, Path(__file__).with_name("hyperlstm.pt"), __doc__)


def make(code: Path, out: Path) -> None:
    """Build both cells, run them, write the fixture to ``out``; ``code``: the prepared
    third-party tree."""
    supercell = load_supercell(code)

    torch.manual_seed(0)
    batch, length = len(LENGTHS), max(LENGTHS)
    x = torch.randn(batch, length, SIZES["input_size"], dtype=torch.float64)  # padding random too
    mask = torch.arange(length)[None, :] < torch.tensor(LENGTHS)[:, None]  # (batch, len)
    last = torch.tensor(LENGTHS) - 1
    fixture = {"inputs": x, "mask": mask, "cases": {}}
    for seed, layer_norm in enumerate((True, False), start=1):
        config = {**SIZES, "layer_norm": layer_norm, "z_from": "current", "forget_bias": 1.0}
        model = HyperLSTM(**config).double().eval()
        randomise_(model, seed)
        theirs, count = run_supercell(supercell, to_supercell(model), x.numpy(), layer_norm)
        theirs = torch.from_numpy(theirs)[torch.arange(batch), last]  # (batch, N) at last words
        with torch.no_grad():
            ours = model(x, mask)
        ours_count = sum(p.numel() for p in model.parameters())
        print(f"layer_norm={layer_norm}: max |Δ| = {(ours - theirs).abs().max().item():.3e}, "
              f"max |h| = {theirs.abs().max().item():.3f}, parameters ours {ours_count}, "
              f"supercell {count}")
        fixture["cases"]["layer_norm" if layer_norm else "plain"] = {
            "config": config,
            "state_dict": {k: v.clone() for k, v in model.state_dict().items()},
            "supercell_final_h": theirs.clone(),
            "supercell_parameter_count": count,
        }
    torch.save(fixture, out)
    print(f"wrote {out} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
