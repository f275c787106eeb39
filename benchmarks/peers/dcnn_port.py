"""Peer side of ``benchmarks/peer_speed.py``: one training epoch of F. Godin's Theano/Lasagne DCNN.

The public implementation is FredericGodin/DynamicCNN@694cf6c (a port of Kalchbrenner et al.'s
Matlab release of "A Convolutional Neural Network for Modelling Sentences"). This driver imports
its modules from a checkout given on the command line and contains none of its code. It builds
THEIR network (``networks.buildDCNNPaper``), THEIR loss with per-layer L2 and THEIR Adagrad
(``utils.adagrad``), compiles THEIR training function, and runs one epoch over the sentences of
a file the way ``trainDCNN.py`` batches them.

Get the checkout and the interpreter (Python 3.8; NumPy 1.19 and Theano 1.0.5 need it)::

    git clone https://github.com/FredericGodin/DynamicCNN CHECKOUT
    git -C CHECKOUT checkout 694cf6c3cb64fc9c3555f628d45af6de4386c666
    # the one edit for Python 3: integer division in the folding layer (twice)
    sed -i 's|input_shape\\[2\\]/2|input_shape[2]//2|g' CHECKOUT/DCNN/folding.py
    python3.8 -m venv VENV
    VENV/bin/pip install numpy==1.19.5 scipy==1.5.4 six Theano==1.0.5
    VENV/bin/pip install \
        https://github.com/Lasagne/Lasagne/archive/5d3c63cb315c50b1cbd27a6bc8664b406f34dd99.zip
    # Theano compiles C++: g++ must be on PATH

Run (from our repository root; FILE.jsonl from ``peer_speed.py export dcnn``)::

    VENV/bin/python benchmarks/peers/dcnn_port.py CHECKOUT --pairs FILE.jsonl --batch 4 \\
        --threads 1 --out RECORD.json [--limit N] [--compiledir DIR] [--floatx float32]

FILE.jsonl holds one ``{"sentence": "...", "label": int}`` per line, already tokenised and
lower-cased: tokens are split on single spaces.

The network: the hyper-parameters of ``trainDCNN.py``'s defaults, which are also our
``experiment=dcnn/trec`` (``model=dcnn_sentence``, ``recipe=dcnn``): 48-d word vectors
(Lasagne ``Normal(0.01)``, random: vectors do not change speed), widths (7, 5), feature maps
(6, 14), k_top 4, folding in both layers, tanh, dropout 0.5, L2 (1e-4, 3e-5, 3e-6, 1e-4)/2 on
embedding, conv 1, conv 2 and output weights, Adagrad lr 0.1 from a zero accumulator. The
vocabulary is the file's words (ids in order of first appearance), the padding id is the
vocabulary size (their ``padding='last'``: a zero row appended to the word vectors); the
classes are 0..max(label).

Per step, as ``trainDCNN.py`` (at 694cf6c) does it:

* data, ``dataUtils.py:6-51`` (``read_and_sort_matlab_data``): every sentence padded with the
  padding id to the longest sentence of the file, then grouped by length, shortest first (file
  order within a length), labels kept alongside;
* graph, ``trainDCNN.py:78-82`` (``buildDCNNPaper(..., padding='last')``), loss
  ``trainDCNN.py:86-90`` (mean categorical cross-entropy of the dropout forward plus
  ``regularize_layer_params_weighted`` over the embedding, both convolutions and the dense
  layer), update ``trainDCNN.py:98-99`` (``utils.adagrad``, lr 0.1), compiled function
  ``trainDCNN.py:103``;
* epoch, ``trainDCNN.py:119-128``: ``len // batch`` batches in a random permutation; a batch is
  the rows ``[i*B, (i+1)*B)`` of the sorted matrix, cut to the length of its last (longest)
  sentence, ``train_model(x, y)``; ``trainDCNN.py:156-158`` (Adagrad reset every 5 epochs)
  never fires in epoch 1.

Left out, as the contract asks: validation every 10 batches and the test pass
(``trainDCNN.py:130-154``), printing. Timing: compilation, data preparation and graph building
are ``setup_s``; the epoch loop alone is ``epoch_s`` (wall) and ``epoch_cpu_s`` (CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from measure import EpochMemory, cpu_name, peak_rss_mib  # this folder's, stdlib only

IMPLEMENTATION = "FredericGodin/DynamicCNN@694cf6c"
MODEL = "dcnn_sentence"
# trainDCNN.py:15-30 defaults (our dcnn_sentence / recipe dcnn use the same values)
HYPER = {
    "learning_rate": 0.1,
    "word_vector_size": 48,
    "filter_size_conv_layers": [7, 5],
    "nr_of_filters_conv_layers": [6, 14],
    "activations": ["tanh", "tanh"],
    "L2": [0.0001 / 2, 0.00003 / 2, 0.000003 / 2, 0.0001 / 2],
    "ktop": 4,
    "dropout_value": 0.5,
}


class DriverError(Exception):
    """A one-line reason why no record is written."""


def set_threads(threads: int, floatx: str, compiledir: str | None) -> None:
    """BLAS/OpenMP thread counts and Theano's flags; must run before theano is imported.
    Flags already in THEANO_FLAGS come after ours and win."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS"):
        os.environ[var] = str(threads)
    flags = ["device=cpu", f"floatX={floatx}", f"openmp={threads > 1}"]
    if compiledir:
        flags.append(f"base_compiledir={compiledir}")
    if os.environ.get("THEANO_FLAGS"):
        flags.append(os.environ["THEANO_FLAGS"])
    os.environ["THEANO_FLAGS"] = ",".join(flags)


def read_sentences(path: Path, limit: int | None) -> tuple[list[list[str]], list[int]]:
    """Token lists and labels from the contract's sentence file (split on single spaces)."""
    sentences, labels = [], []
    try:
        handle = path.open(encoding="utf-8")
    except OSError as error:
        raise DriverError(f"cannot read {path}: {error.strerror}") from error
    with handle:
        for number, line in enumerate(handle, 1):
            if limit is not None and len(sentences) >= limit:
                break
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                if "premise" in record:
                    raise DriverError(f"{path}:{number}: a sentence pair; the DCNN classifies "
                                      "single sentences ({'sentence', 'label'})")
                sentence, label = record["sentence"], record["label"]
            except (ValueError, KeyError, TypeError) as error:
                raise DriverError(f"{path}:{number}: not a {{'sentence', 'label'}} object "
                                  f"({type(error).__name__}: {error})") from error
            tokens = [t for t in sentence.split(" ") if t]
            if not tokens or not isinstance(label, int) or label < 0:
                raise DriverError(f"{path}:{number}: empty sentence or label not an int >= 0")
            sentences.append(tokens)
            labels.append(label)
    if not sentences:
        raise DriverError(f"{path}: no sentences")
    return sentences, labels


def sorted_matrix(sentences: list[list[str]], labels: list[int]) -> dict[str, Any]:
    """The file as ``dataUtils.read_and_sort_matlab_data`` hands it to trainDCNN.py.

    Their Matlab files hold word ids padded to the longest sentence with the padding id
    (``padding_value``, the vocabulary size); ``read_and_sort_matlab_data`` groups the rows by
    length in a dict and concatenates the groups (dataUtils.py:27-49). Under Python 2, the
    port's interpreter, a dict of small int keys iterates in ascending order, which trainDCNN.py
    relies on (a batch is cut to its last sentence's length, trainDCNN.py:126); Python 3 dicts
    keep insertion order, so the groups are sorted here explicitly."""
    import numpy

    vocab: dict[str, int] = {}
    rows = [[vocab.setdefault(token, len(vocab)) for token in tokens] for tokens in sentences]
    pad = len(vocab)  # padding='last': id V is the zero row after the V word vectors
    longest = max(len(row) for row in rows)
    by_length: dict[int, list[int]] = {}
    for index, row in enumerate(rows):
        by_length.setdefault(len(row), []).append(index)
    order = [index for length in sorted(by_length) for index in by_length[length]]
    x = numpy.full((len(rows), longest), pad, dtype=numpy.int32)
    for position, index in enumerate(order):
        x[position, : len(rows[index])] = rows[index]
    y = numpy.asarray([labels[index] for index in order], dtype=numpy.int32)
    lengths = [len(rows[index]) for index in order]
    return {"x": x, "y": y, "lengths": lengths, "vocab_size": len(vocab),
            "classes": max(labels) + 1, "longest": longest}


def import_port(checkout: Path) -> dict[str, Any]:
    """Theano, Lasagne and the port's modules (DCNN, networks, utils) from the checkout."""
    if not (checkout / "networks.py").is_file() or not (checkout / "DCNN").is_dir():
        raise DriverError(f"{checkout}: not a DynamicCNN checkout (no networks.py / DCNN/); "
                          f"see the docstring for {IMPLEMENTATION}")
    folding = (checkout / "DCNN" / "folding.py").read_text()
    if "input_shape[2]/2" in folding:
        raise DriverError(f"{checkout}/DCNN/folding.py lacks the Python 3 edit "
                          "(input_shape[2]/2 -> //2, see the docstring)")
    try:
        import lasagne
        import numpy
        import theano
        import theano.tensor as T
    except ImportError as error:
        raise DriverError(f"{sys.executable} lacks Theano/Lasagne ({error}); use the port's "
                          "interpreter (see the docstring)") from error
    if not theano.config.cxx:
        raise DriverError("Theano finds no C++ compiler (g++): it would run its Python "
                          "implementations, which says nothing about the port's speed")
    sys.path.insert(0, str(checkout))
    import DCNN
    import networks
    import utils

    return {"theano": theano, "T": T, "lasagne": lasagne, "numpy": numpy, "DCNN": DCNN,
            "networks": networks, "utils": utils}


def build_train_function(m: dict[str, Any], batch: int, vocab_size: int, classes: int) -> Any:
    """trainDCNN.py:78-103: their network, loss + per-layer L2, Adagrad, compiled step."""
    theano, T, lasagne, DCNN = m["theano"], m["T"], m["lasagne"], m["DCNN"]
    X_batch = T.imatrix("x")
    y_batch = T.ivector("y")
    output_layer = m["networks"].buildDCNNPaper(
        batch_size=batch, vocab_size=vocab_size, embeddings_size=HYPER["word_vector_size"],
        filter_sizes=HYPER["filter_size_conv_layers"],
        nr_of_filters=HYPER["nr_of_filters_conv_layers"], activations=HYPER["activations"],
        ktop=HYPER["ktop"], dropout=HYPER["dropout_value"], output_classes=classes,
        padding="last")
    l2_types = (DCNN.embeddings.SentenceEmbeddingLayer, DCNN.convolutions.Conv1DLayerSplitted,
                lasagne.layers.DenseLayer)
    l2_layers = [layer for layer in lasagne.layers.get_all_layers(output_layer)
                 if any(isinstance(layer, kind) for kind in l2_types)]
    weighted = {layer: HYPER["L2"][i] for i, layer in enumerate(l2_layers)}
    loss_train = lasagne.objectives.aggregate(
        lasagne.objectives.categorical_crossentropy(
            lasagne.layers.get_output(output_layer, X_batch), y_batch),
        mode="mean") + lasagne.regularization.regularize_layer_params_weighted(
            weighted, lasagne.regularization.l2)
    all_params = lasagne.layers.get_all_params(output_layer)
    updates, _accumulated = m["utils"].adagrad(loss_train, all_params, HYPER["learning_rate"])
    return theano.function(inputs=[X_batch, y_batch], outputs=loss_train, updates=updates)


def checkout_commit(checkout: Path) -> str | None:
    """The checkout's short commit when it is a git work tree (else None)."""
    try:
        done = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short=7", "HEAD"],
                              capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else None


def run(args: argparse.Namespace, command: str) -> dict[str, Any]:
    """Set up, run one epoch, and return the record."""
    start = time.perf_counter()
    if args.batch < 1 or args.threads < 1 or (args.limit is not None and args.limit < 1):
        raise DriverError("--batch, --threads and --limit must be >= 1")
    if not Path(args.out).resolve().parent.is_dir():
        raise DriverError(f"--out {args.out}: no such folder")
    checkout = Path(args.checkout).resolve()
    sentences, labels = read_sentences(Path(args.pairs), args.limit)
    if len(sentences) < args.batch:
        raise DriverError(f"{args.pairs}: {len(sentences)} sentences, fewer than one batch "
                          f"of {args.batch}")
    set_threads(args.threads, args.floatx, args.compiledir)
    m = import_port(checkout)
    numpy, theano, lasagne = m["numpy"], m["theano"], m["lasagne"]
    numpy.random.seed(args.seed)  # Lasagne's initialisers and dropout draw from numpy's RNG
    data = sorted_matrix(sentences, labels)
    train_model = build_train_function(m, args.batch, data["vocab_size"], data["classes"])
    x, y, lengths, batch = data["x"], data["y"], data["lengths"], args.batch
    n_train_batches = len(lengths) // batch  # trainDCNN.py:55 (Python 2 integer division)
    setup_s = time.perf_counter() - start

    rss_before = peak_rss_mib()
    memory = EpochMemory()
    memory.start()
    wall, cpu = time.perf_counter(), time.process_time()
    # trainDCNN.py:122-128, one epoch
    permutation = numpy.random.permutation(n_train_batches)
    train_loss = 0.0
    for minibatch_index in permutation:
        x_input = x[minibatch_index * batch:(minibatch_index + 1) * batch,
                    0:lengths[(minibatch_index + 1) * batch - 1]]
        y_input = y[minibatch_index * batch:(minibatch_index + 1) * batch]
        train_loss += train_model(x_input, y_input)
    epoch_s, epoch_cpu_s = time.perf_counter() - wall, time.process_time() - cpu
    peak = peak_rss_mib()
    epoch_mib = memory.mib()

    dropped = len(lengths) - n_train_batches * batch
    commit = checkout_commit(checkout)
    notes = [
        f"floatX={theano.config.floatX} (trainDCNN.py sets none: Theano's default would be "
        "float64; the author's GPU runs (README) need float32, and ours trains in float32)",
        f"BLAS: {theano.config.blas.ldflags or 'none found: NumPy C-API (numpy bundled BLAS)'}",
        f"vocabulary {data['vocab_size']} words from the file, random 48-d word vectors "
        f"(Lasagne Normal 0.01), {data['classes']} classes, longest sentence "
        f"{data['longest']} tokens",
        "batches as trainDCNN.py:119-128: sentences sorted by length (dataUtils.py, Python 2 "
        "dict order made explicit), len//batch batches in random order, each cut to its "
        "longest sentence, padding id V (zero row, padding='last')"
        + (f"; the last {dropped} sentences (not a full batch) are not trained, as in "
           "their script" if dropped else ""),
        "per step their compiled train_model: dropout forward, mean cross-entropy + per-layer "
        "L2 (trainDCNN.py:90), utils.adagrad lr 0.1 (trainDCNN.py:99); no clipping (none in "
        "their script)",
        "left out: validation every 10 batches and the test pass (trainDCNN.py:130-154)",
        "setup_s includes Theano's C compilation (shorter with a warm compile cache)",
        f"mean training loss over the epoch {train_loss / max(n_train_batches, 1):.4f}",
    ]
    if commit and not IMPLEMENTATION.endswith(commit):
        notes.append(f"checkout is at {commit}, not {IMPLEMENTATION.split('@')[1]}")
    return {
        "side": "theirs", "implementation": IMPLEMENTATION, "model": MODEL,
        "framework": f"theano {theano.__version__}, lasagne {lasagne.__version__}",
        "python": platform.python_version(), "examples": len(lengths),
        "steps": int(n_train_batches), "batch": batch, "threads": args.threads,
        "epoch_s": round(epoch_s, 3), "epoch_cpu_s": round(epoch_cpu_s, 3),
        "setup_s": round(setup_s, 3), "rss_before_mib": round(rss_before, 1),
        "peak_rss_mib": round(peak, 1), "epoch_mib": epoch_mib, "machine": cpu_name(),
        "command": command,
        "notes": "; ".join(notes),
    }


def main() -> None:
    """Parse the contract's command line, run one epoch, print and write the record."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", help=f"checkout of {IMPLEMENTATION} (docstring)")
    parser.add_argument("--pairs", required=True,
                        help="JSON lines {'sentence', 'label'} (peer_speed.py export)")
    parser.add_argument("--batch", type=int, default=4, help="batch size (theirs: 4)")
    parser.add_argument("--threads", type=int, default=1, help="BLAS / OpenMP threads")
    parser.add_argument("--out", required=True, help="where to write the record (JSON)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N sentences")
    parser.add_argument("--compiledir", default=None,
                        help="Theano base_compiledir (default: Theano's, ~/.theano)")
    parser.add_argument("--floatx", choices=("float32", "float64"), default="float32",
                        help="Theano floatX (default float32, as ours)")
    parser.add_argument("--seed", type=int, default=1, help="numpy seed (init, dropout, order)")
    args = parser.parse_args()
    command = shlex.join([sys.executable, *sys.argv])
    try:
        record = run(args, command)
    except DriverError as error:
        print(f"dcnn_port: {error}", file=sys.stderr)
        sys.exit(2)
    text = json.dumps(record, indent=1)
    print(text)
    Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
