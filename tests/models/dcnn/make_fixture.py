"""Make ``tests/models/dcnn/dcnn.pt``: F. Godin's Theano/Lasagne DCNN and ours, one set of weights.

Run by hand, never by the tests (from the repository root, with our venv)::

    python tests/models/dcnn/make_fixture.py CHECKOUT --port-python PORT_PYTHON

(or ``make references``: tests/references/README.md). CHECKOUT is a git clone of
FredericGodin/DynamicCNN; the pinned commit (``UPSTREAM``) is exported from it and
``tests/references/patches/dynamiccnn.patch`` applied, the one edit for Python 3 (the folding
layer's ``input_shape[2]/2`` -> ``//2``, twice, in ``DCNN/folding.py``); PORT_PYTHON is an
interpreter with Theano 1.0.5, Lasagne 0.2.dev1 (Lasagne/Lasagne@5d3c63c) and NumPy 1.19
(Python 3.8 here). This file runs itself under PORT_PYTHON for the port's half
(``--port-side``: NumPy, Theano and the port only, no torch) and under our venv for ours.

The weights are drawn in the port's layout (float64) and mapped to ours:

* rows: the port's fold sums rows p and p + R/2, ours rows 2q and 2q + 1. The inputs of a
  layer are the outputs of the one below, so no reordering of one layer's filters alone makes
  the two equal; reordering the word-vector dimensions and every layer's rows does
  (``row_maps``: the top rows coincide; going down, a folding layer's input row 2q is the
  port's ``p(q)`` and 2q + 1 its ``p(q) + R/2``, where ``p(q)`` is the port's row that our
  output row q stands for).
* word vectors ``W`` (V, d): ``embedding.weight``, columns reordered (the port's padding id
  V, a zero row, is never fed: it runs one sentence at a time, batch size 1).
* ``Conv1DLayerSplitted.W`` (maps_out, maps_in, R, m) -> ``weight`` (maps_in, maps_out, R,
  m): maps swapped, the width axis reversed (Theano's ``conv2d`` convolves, flipping the
  filter; Eq. 1 and ours take the dot product with the window), rows reordered.
* ``Conv1DLayerSplitted.b`` (maps_out, R): the port adds it after the convolution, before
  folding and pooling; a bias constant along a row changes no k-max choice, so it is our
  post-pooling ``bias`` (Sec. 3.4): rows reordered, then the two a fold adds summed (as is
  where the layer does not fold).
* ``DenseLayer`` ``W`` (F, C), ``b`` (C,): ``output.weight = W.T``, ``output.bias = b``.

Two networks: (1) the port's own ``networks.buildDCNNPaper`` (folding after both
convolutions, k of Eq. 4 from the convolution's length, tanh, 48-d defaults shrunk), against
our ``DCNNClassifier`` with ``folding=(True, True)``, ``k_length="convolution"`` (the
``dcnn_sentence`` configuration); (2) the port's layer classes stacked with one fold, before
the top pooling (the paper's Fig. 3), against our ``DCNNEncoder`` (the pair model's encoder)
with ``folding=(False, True)``, ``k_length="convolution"``. Dropout off (Lasagne
``deterministic=True``, our ``eval()``). The port also runs the sentences as one padded batch
(its own padding), which is recorded but is not what ours is checked against
(docs/models/dcnn.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

PORT = "FredericGodin/DynamicCNN@694cf6c"
UPSTREAM = ("FredericGodin/DynamicCNN", "694cf6c3cb64fc9c3555f628d45af6de4386c666",
            "dynamiccnn.patch", ("DCNN", "networks.py"))  # (its data files are not needed)
VOCAB, DIM, CLASSES = 30, 12, 5
WIDTHS, MAPS, K_TOP = (7, 5), (4, 6), 4
LENGTHS = (1, 2, 4, 7, 12, 20, 31)  # layer-1 rows of 7 to 37 positions: sort and topk paths


def draw_port_weights(rng: np.random.RandomState, folds: tuple[bool, bool]) -> dict:
    """Random float64 weights in the port's layouts (scaled so tanh and k-max both matter)."""
    w = {"emb": rng.normal(0.0, 1.0, (VOCAB, DIM))}
    maps_in, rows = 1, DIM
    for i, (width, maps_out, fold) in enumerate(zip(WIDTHS, MAPS, folds, strict=True)):
        w[f"W{i}"] = rng.uniform(-0.5, 0.5, (maps_out, maps_in, rows, width))
        w[f"b{i}"] = rng.normal(0.0, 0.3, (maps_out, rows))
        maps_in, rows = maps_out, rows // 2 if fold else rows
    w["dense_W"] = rng.normal(0.0, 0.5, (maps_in * rows * K_TOP, CLASSES))
    w["dense_b"] = rng.normal(0.0, 0.3, (CLASSES,))
    return w


# --- the port's half (runs under PORT_PYTHON) -------------------------------------------------


def port_side(checkout: str, weights_in: str, results_out: str) -> None:
    sys.path.insert(0, checkout)
    import DCNN  # the port's package
    import lasagne
    import networks
    import theano
    import theano.tensor as T

    data = np.load(weights_in)
    ids = [data[f"ids{n}"] for n in range(len(LENGTHS))]
    X = T.imatrix("x")

    def set_weights(layers: list, prefix: str) -> None:
        emb = [lr for lr in layers if isinstance(lr, DCNN.embeddings.SentenceEmbeddingLayer)]
        convs = [lr for lr in layers if isinstance(lr, DCNN.convolutions.Conv1DLayerSplitted)]
        emb[0].W.set_value(data[prefix + "emb"])
        for i, conv in enumerate(convs):
            conv.W.set_value(data[f"{prefix}W{i}"])
            conv.b.set_value(data[f"{prefix}b{i}"])
        dense = [lr for lr in layers if isinstance(lr, lasagne.layers.DenseLayer)]
        if dense:
            dense[0].W.set_value(data[prefix + "dense_W"])
            dense[0].b.set_value(data[prefix + "dense_b"])

    def paper_network(batch_size: int) -> theano.compile.Function:
        """The port's own network; returns (logits, probabilities, top-layer features)."""
        net = networks.buildDCNNPaper(
            batch_size=batch_size, vocab_size=VOCAB, embeddings_size=DIM,
            filter_sizes=list(WIDTHS), nr_of_filters=list(MAPS), activations=["tanh", "tanh"],
            ktop=K_TOP, dropout=0.5, output_classes=CLASSES, padding="last")
        layers = lasagne.layers.get_all_layers(net)
        set_weights(layers, "two_folds_")
        top = [lr for lr in layers if isinstance(lr, lasagne.layers.NonlinearityLayer)][-1]
        probs, features = lasagne.layers.get_output([net, top], X, deterministic=True)
        net.nonlinearity = lasagne.nonlinearities.identity  # the same layer before its softmax
        logits = lasagne.layers.get_output(net, X, deterministic=True)
        return theano.function([X], [logits, probs, features.flatten(2)])

    run = paper_network(1)
    alone = [run(x[None, :].astype("int32")) for x in ids]
    padded = np.full((len(ids), max(LENGTHS)), VOCAB, dtype="int32")  # padding='last': id V
    for n, x in enumerate(ids):
        padded[n, : len(x)] = x
    batch_logits = paper_network(len(ids))(padded)[0]

    # One fold, before the top pooling (the paper's Fig. 3), from the port's layer classes.
    l_in = lasagne.layers.InputLayer(shape=(1, None))
    emb = DCNN.embeddings.SentenceEmbeddingLayer(l_in, VOCAB, DIM, padding="last")
    conv1 = DCNN.convolutions.Conv1DLayerSplitted(
        emb, MAPS[0], WIDTHS[0], nonlinearity=lasagne.nonlinearities.linear, border_mode="full")
    pool1 = DCNN.pooling.DynamicKMaxPoolLayer(conv1, K_TOP, nroflayers=2, layernr=1)
    tanh1 = lasagne.layers.NonlinearityLayer(pool1, nonlinearity=lasagne.nonlinearities.tanh)
    conv2 = DCNN.convolutions.Conv1DLayerSplitted(
        tanh1, MAPS[1], WIDTHS[1], nonlinearity=lasagne.nonlinearities.linear,
        border_mode="full")
    fold2 = DCNN.folding.FoldingLayer(conv2)
    pool2 = DCNN.pooling.KMaxPoolLayer(fold2, K_TOP)
    tanh2 = lasagne.layers.NonlinearityLayer(pool2, nonlinearity=lasagne.nonlinearities.tanh)
    set_weights(lasagne.layers.get_all_layers(tanh2), "one_fold_")
    encode = theano.function(
        [X], lasagne.layers.get_output(tanh2, X, deterministic=True).flatten(2))
    one_fold = [encode(x[None, :].astype("int32"))[0] for x in ids]

    np.savez(
        results_out,
        logits=np.concatenate([a[0] for a in alone]),
        probs=np.concatenate([a[1] for a in alone]),
        features=np.concatenate([a[2] for a in alone]),
        batch_logits=batch_logits,
        one_fold_features=np.stack(one_fold),
        versions=np.array(json.dumps({"theano": theano.__version__, "numpy": np.__version__,
                                      "floatX": theano.config.floatX})),
    )


# --- our half (runs under our venv) -----------------------------------------------------------


def row_maps(folds: tuple[bool, bool]) -> list[np.ndarray]:
    """For each layer's input, our row i is the port's row ``maps[l][i]`` (rows of the word
    vectors for layer 1). The top output rows coincide; going down, a folding layer with R
    input rows sums our rows 2q, 2q + 1 and the port's p, p + R/2, so our 2q is the port's
    ``out[q]`` and our 2q + 1 the port's ``out[q] + R/2``; a layer without folding keeps them."""
    rows = [DIM]
    for fold in folds:
        rows.append(rows[-1] // 2 if fold else rows[-1])
    maps, out = [], np.arange(rows[-1])
    for fold, R in zip(reversed(folds), reversed(rows[:-1]), strict=True):
        out = np.stack([out, out + R // 2], axis=1).reshape(-1) if fold else out
        maps.append(out)
    return maps[::-1]


def to_ours(w: dict, folds: tuple[bool, bool]) -> dict:
    """The port's weights (``draw_port_weights``) as our state_dict (module docstring)."""
    import torch

    maps = row_maps(folds)
    state = {"embedding.weight": w["emb"][:, maps[0]]}  # word-vector dimensions reordered
    for i, (fold, rows) in enumerate(zip(folds, maps, strict=True)):
        # (maps_out, maps_in, R, m) -> (maps_in, maps_out, R, m), filters unflipped, our rows
        W = w[f"W{i}"].transpose(1, 0, 2, 3)[:, :, rows, ::-1]
        b = w[f"b{i}"][:, rows]  # (maps_out, R), our rows
        if fold:
            b = b[:, 0::2] + b[:, 1::2]  # the two biases a fold adds: one per row (Sec. 3.4)
        state[f"encoder.layers.{i}.weight"], state[f"encoder.layers.{i}.bias"] = W, b
    state["output.weight"], state["output.bias"] = w["dense_W"].T, w["dense_b"]
    return {k: torch.tensor(np.ascontiguousarray(v), dtype=torch.float64)
            for k, v in state.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", help="a git clone of FredericGodin/DynamicCNN (the pinned "
                        "commit is exported and patched); with --port-side, the prepared tree")
    parser.add_argument("--port-python", help="interpreter with Theano + Lasagne")
    parser.add_argument("--port-side", nargs=2, metavar=("WEIGHTS", "RESULTS"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--out", default=str(Path(__file__).with_name("dcnn.pt")))
    args = parser.parse_args()
    if args.port_side:
        port_side(args.checkout, *args.port_side)
        return
    if not args.port_python:
        parser.error("--port-python is required")

    import torch
    from torch import nn

    from entailment_lab.models.dcnn import DCNNClassifier, DCNNEncoder

    rng = np.random.RandomState(2014)
    ids = [rng.randint(0, VOCAB, size=s) for s in LENGTHS]
    two, one = (True, True), (False, True)
    w_two, w_one = draw_port_weights(rng, two), draw_port_weights(rng, one)
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository: tests.*
    from tests.references.upstream import Upstream  # not on the port's side

    with tempfile.TemporaryDirectory() as tmp:
        code = Upstream(*UPSTREAM).prepare(Path(args.checkout), Path(tmp, "upstream"))
        weights, results = Path(tmp, "weights.npz"), Path(tmp, "results.npz")
        arrays = {f"two_folds_{k}": v for k, v in w_two.items()}
        arrays.update({f"one_fold_{k}": v for k, v in w_one.items()})
        arrays.update({f"ids{n}": x for n, x in enumerate(ids)})
        np.savez(weights, **arrays)
        env = dict(os.environ)
        env.setdefault("THEANO_FLAGS", "floatX=float64,blas.ldflags=")
        subprocess.run([args.port_python, __file__, str(code), "--port-side", str(weights),
                        str(results)], check=True, env=env)
        port = dict(np.load(results).items())
    print("port:", port.pop("versions"))

    T = max(LENGTHS)
    batch = torch.zeros(len(ids), T, dtype=torch.long)  # our padding: id 0 under a False mask
    mask = torch.zeros(len(ids), T, dtype=torch.bool)
    for n, x in enumerate(ids):
        batch[n, : len(x)], mask[n, : len(x)] = torch.from_numpy(x), True

    sentence_config = {"filter_widths": list(WIDTHS), "feature_maps": list(MAPS), "k_top": K_TOP,
                       "folding": list(two), "dropout": 0.5, "k_length": "convolution",
                       "init": "glorot"}
    model = DCNNClassifier(nn.Embedding(VOCAB, DIM), CLASSES, **sentence_config).double().eval()
    sentence_state = to_ours(w_two, two)
    model.load_state_dict(sentence_state)
    encoder_config = {"input_size": DIM, "filter_widths": list(WIDTHS), "feature_maps": list(MAPS),
                      "k_top": K_TOP, "folding": list(one), "k_length": "convolution"}
    encoder = DCNNEncoder(**encoder_config).double().eval()
    encoder_full = to_ours(w_one, one)
    embedding = encoder_full.pop("embedding.weight")
    encoder_full.pop("output.weight"), encoder_full.pop("output.bias")
    encoder_state = {k.removeprefix("encoder."): v for k, v in encoder_full.items()}
    encoder.load_state_dict(encoder_state)

    logits = torch.from_numpy(port["logits"])
    with torch.no_grad():
        ours_batch = model(batch, mask, return_details=True)
        ours_alone = torch.cat([model(batch[n : n + 1, : len(x)], mask[n : n + 1, : len(x)])
                                ["logits"] for n, x in enumerate(ids)])
        features_one, _ = encoder(embedding[batch], mask)
    report = {
        "logits, our padded batch vs port alone": ours_batch["logits"] - logits,
        "logits, ours one at a time vs port alone": ours_alone - logits,
        "log-probabilities, our padded batch vs port alone":
            ours_batch["logits"].log_softmax(-1) - torch.from_numpy(np.log(port["probs"])),
        "top features, our padded batch vs port alone":
            ours_batch["features"] - torch.from_numpy(port["features"]),
        "one fold: features, our padded batch vs port alone":
            features_one - torch.from_numpy(port["one_fold_features"]),
        "port: its own padded batch vs alone (not a check of ours)":
            torch.from_numpy(port["batch_logits"]) - logits,
    }
    for name, delta in report.items():
        print(f"max |Δ| {name}: {delta.abs().max().item():.3e}")

    fixture = {
        "port": PORT,
        "ids": batch, "mask": mask,
        "sentence": {"vocab_size": VOCAB, "dim": DIM, "num_classes": CLASSES,
                     "config": sentence_config, "state_dict": sentence_state,
                     "logits": logits, "log_probs": torch.from_numpy(np.log(port["probs"])),
                     "features": torch.from_numpy(port["features"]),
                     "port_padded_batch_logits": torch.from_numpy(port["batch_logits"])},
        "encoder_one_fold": {"config": encoder_config, "embedding": embedding,
                             "state_dict": encoder_state,
                             "features": torch.from_numpy(port["one_fold_features"])},
    }
    torch.save(fixture, args.out)
    print(f"wrote {args.out} ({Path(args.out).stat().st_size} bytes)")


if __name__ == "__main__":
    main()
