"""Peer-speed driver: one training epoch of the DIIN authors' TensorFlow code (issue 50, item 3).

The peer side of ``benchmarks/peer_speed.py``'s ``diin`` row. It builds the authors' graph from
their unmodified checkout and runs one epoch doing per step what their training script does.
It imports nothing of this project. Run it with the authors' interpreter, from the repository
root::

    PEER_PYTHON benchmarks/peers/diin_tf.py CHECKOUT --pairs FILE.jsonl --batch 70 \\
        --threads 1 --out RECORD.json [--limit N]

Setup on a fresh machine:

* the checkout: YichenGong/Densely-Interactive-Inference-Network at commit cb2c23b, e.g.
  ``git clone https://github.com/YichenGong/Densely-Interactive-Inference-Network CHECKOUT &&
  git -C CHECKOUT checkout cb2c23b``; nothing in it is edited;
* the interpreter: Python 3.7 (TensorFlow 1.x has no wheels for newer Pythons), then
  ``python3.7 -m venv VENV && VENV/bin/pip install tensorflow-cpu==1.15.0 "numpy<1.19"
  "protobuf<4"``. Their ``nltk`` and ``tqdm`` imports are not needed: where they are missing,
  stand-ins are put in ``sys.modules`` (the functions used here call neither).

What is theirs and what is ours
-------------------------------
Theirs, imported from the checkout: the graph (``python/models/DIIN.py`` ``MyModel``, with
``python/my/tensorflow/nn.py`` and ``python/util/blocks.py``), their flags
(``python/util/parameters.py``, read from ``sys.argv``), and their data functions
(``python/util/data_processing.py``): ``sentences_to_padded_index_sequences`` (vocabulary, char
vocabulary, padding to ``seq_length``), ``fill_feature_vector_with_cropping_or_padding`` and
``construct_one_hot_feature_tensor`` (the per-step batch assembly).

Ours, mirroring ``python/train_mnli.py`` (file:line at cb2c23b, their README's SNLI command
``train_mnli.py DIIN NAME --training_completely_on_snli``):

* data (setup): ``load_nli_data`` (data_processing.py:38-57: the SNLI label map, shuffled once
  with ``random.seed(1)``); ``sentences_to_padded_index_sequences`` (train_mnli.py:71; called,
  on the training split only); ``config.char_vocab_size`` (train_mnli.py:73); word vectors as
  ``loadEmbedding_rand`` draws them (data_processing.py:531-543: N(0, 1), row 0 zero) without
  the GloVe file;
* graph (setup): ``MyModel(config, seq_length, emb_dim, hidden_dim, embeddings, emb_train)``
  (train_mnli.py:117); ``tf.clip_by_global_norm(tf.gradients(total_cost, tvars), 1.0)`` and
  ``tf.train.AdadeltaOptimizer(0.5).apply_gradients(..., global_step)`` (train_mnli.py:125-128;
  Adadelta is their only optimiser at this commit: the SGD switch is commented out,
  train_mnli.py:329-330); ``global_variables_initializer`` (train_mnli.py:135, 179). The loss
  is their graph's ``total_cost``: cross-entropy + the sigmoid-growing L2 term + the encoder
  difference penalty (DIIN.py:132-205, defaults of parameters.py);
* the epoch (timed): ``training_data = train_snli``, ``random.shuffle``, ``total_batch =
  int(len / batch)`` (train_mnli.py:222-233; the last partial batch is dropped, as theirs
  does); per step ``get_minibatch`` (train_mnli.py:143-171, mirrored by ``get_minibatch``
  below), the ``feed_dict`` (train_mnli.py:249-259) and ``sess.run([optimizer, total_cost,
  logits])`` (train_mnli.py:266), with ``model.summary`` fetched as well every
  ``display_step`` (50) steps (train_mnli.py:261-262); the running ``avg_cost``
  (train_mnli.py:347).

Left out of the epoch: the evaluations (``eval_step``, train_mnli.py:268-301, step 0
included), checkpoints (train_mnli.py:303-316), the TensorBoard write and log lines
(train_mnli.py:263-264): no evaluation, no checkpoint saving, no I/O.

Run-time adaptations (their files untouched; listed in the record's notes):

* ``_linear``'s import path of TensorFlow 1.15 (``core_rnn_cell``), as
  tests/models/diin/make_fixture.py does;
* the 47-d POS one-hot placeholders get width 0 and are fed empty (our model has no POS tags;
  fed as zeros they would still widen every encoder layer by 47); ``--pos-tags`` keeps the
  released 47-d width and feeds zeros instead. Their per-step ``generate_pos_feature_tensor``
  (parse-string parsing, train_mnli.py:159-160) is not run: there are no parses;
* word vectors of ``--emb-dim`` (default 50: our protocol's GloVe 6B 50-d; their
  ``word_embedding_dim`` is 300), random, fine-tuned as theirs (``emb_train``);
* exact match: their features come from ``shared.jsonl`` (WordNet and stems, precomputed per
  pair); here the same index lists are computed once in setup by plain token equality
  (lower-cased text, ``n't`` = ``not``), our model's ``exact_match_stem: false`` rule;
* the text is our DataModule's tokens; a token's ``(``/``)`` become ``-LRB-``/``-RRB-`` as in
  SNLI's binary parses (their tokenizer deletes parentheses).

Every other size is their default, which equals conf/model/diin.yaml: ``seq_length`` 48 (every
sentence padded or cut to 48, as their preprocessing does), char embedding 8, 100 char filters
of width 5, 16 characters per word, 2 highway layers, scale-down 0.3 with a 1x1 kernel, 3 dense
blocks of 8 layers with growth 20, transition rate 0.5, keep rate 1.0 decayed by 0.977 per
10,000 steps, L2 ratio 9e-5 (sigmoid over 100k steps), difference penalty 1e-3.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import io
import json
import os
import platform
import random
import shlex
import sys
import time
import types
from pathlib import Path

from measure import EpochMemory, cpu_name, peak_rss_mib  # this folder's, stdlib only

IMPLEMENTATION = "YichenGong/Densely-Interactive-Inference-Network@cb2c23b"
MODEL = "diin"
POS_WIDTH = 47  # their POS one-hot (DIIN.py:22-23)


class DriverError(Exception):
    """A one-line reason to stop without writing a record."""


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", type=Path, help="the authors' checkout (python/models/DIIN.py)")
    parser.add_argument("--pairs", type=Path, required=True, help="JSON lines: premise, "
                        "hypothesis (tokens split on single spaces), label")
    parser.add_argument("--batch", type=int, default=70, help="their --batch_size (recipe: 70)")
    parser.add_argument("--threads", type=int, default=1,
                        help="TensorFlow intra- and inter-op threads")
    parser.add_argument("--out", type=Path, required=True, help="the record (JSON)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N examples")
    parser.add_argument("--emb-dim", type=int, default=50,
                        help="word vector size (ours: GloVe 6B 50-d; their recipe: 300)")
    parser.add_argument("--seq-length", type=int, default=48, help="their --seq_length")
    parser.add_argument("--pos-tags", action="store_true",
                        help="keep the 47-d POS input (fed zeros) instead of width 0")
    return parser.parse_args()


def read_pairs(path: Path, limit: int | None) -> list[dict]:
    """The pairs file as their ``load_nli_data`` examples (before their shuffle)."""
    if not path.is_file():
        raise DriverError(f"diin_tf: pairs file {path} not found")
    data = []
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if limit is not None and len(data) >= limit:
                break
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                row = json.loads(line)
            except ValueError as err:
                raise DriverError(f"diin_tf: {where}: not JSON ({err})") from None
            if "premise" not in row or "hypothesis" not in row:
                raise DriverError(f"diin_tf: {where}: needs 'premise' and 'hypothesis' "
                                  "(DIIN takes sentence pairs)")
            label = row.get("label")
            if not isinstance(label, int) or label < 0:
                raise DriverError(f"diin_tf: {where}: label must be an int >= 0, got {label!r}")
            premise, hypothesis = (
                [t.replace("(", "-LRB-").replace(")", "-RRB-") for t in row[k].split(" ") if t]
                for k in ("premise", "hypothesis"))
            data.append({
                "sentence1_binary_parse": " ".join(premise),
                "sentence2_binary_parse": " ".join(hypothesis),
                "label": label, "genre": "snli", "pairID": str(number),
            })
    if not data:
        raise DriverError(f"diin_tf: {path}: no examples")
    return data


def exact_match(data: list[dict]) -> dict[str, dict[str, list[int]]]:
    """Their ``shared.jsonl`` content: per pair, the positions of tokens found in the other side.

    Plain token equality on lower-cased tokens, ``n't`` read as ``not``; theirs adds WordNet
    lemmas and Snowball stems (data_processing.py:81-101).
    """

    def key(token: str) -> str:
        token = token.lower()
        return "not" if token == "n't" else token

    shared = {}
    for example in data:
        s1 = [key(t) for t in example["sentence1_binary_parse"].split()]
        s2 = [key(t) for t in example["sentence2_binary_parse"].split()]
        in1, in2 = set(s1), set(s2)
        shared[example["pairID"]] = {
            "sentence1_token_exact_match_with_s2": [i for i, t in enumerate(s1) if t in in2],
            "sentence2_token_exact_match_with_s1": [j for j, t in enumerate(s2) if t in in1],
        }
    return shared


def stand_ins() -> None:
    """``nltk`` and ``tqdm`` stand-ins for data_processing.py's module-level imports.

    Only installed where the real packages are missing. data_processing.py:9-16 and 31-36
    touch ``nltk`` at import; the functions called here use neither package except ``tqdm``
    as a plain iterator wrapper.
    """
    if importlib.util.find_spec("tqdm") is None:
        tqdm = types.ModuleType("tqdm")
        tqdm.tqdm = lambda iterable=None, *args, **kwargs: iterable
        sys.modules["tqdm"] = tqdm
    if importlib.util.find_spec("nltk") is None:

        class Unavailable:
            def __init__(self, *args: object, **kwargs: object) -> None:
                pass

        nltk = types.ModuleType("nltk")
        parts = {name: types.ModuleType("nltk." + name)
                 for name in ("data", "corpus", "tag", "tokenize", "tokenize.treebank")}
        parts["data"].path = []
        parts["corpus"].wordnet = None
        parts["tag"].StanfordNERTagger = parts["tag"].StanfordPOSTagger = Unavailable
        parts["tokenize.treebank"].TreebankWordTokenizer = Unavailable
        parts["tokenize"].treebank = parts["tokenize.treebank"]
        nltk.SnowballStemmer = Unavailable
        for name, module in parts.items():
            if "." not in name:
                setattr(nltk, name, module)
            sys.modules["nltk." + name] = module
        sys.modules["nltk"] = nltk


def run(args: argparse.Namespace) -> dict:
    t_setup = time.perf_counter()
    python_dir = args.checkout / "python"
    for needed in ("models/DIIN.py", "util/parameters.py", "util/data_processing.py",
                   "my/tensorflow/nn.py"):
        if not (python_dir / needed).is_file():
            raise DriverError(f"diin_tf: {args.checkout} is not the DIIN checkout "
                              f"(no python/{needed}); see this file's docstring")
    if args.batch < 1 or args.threads < 1:
        raise DriverError("diin_tf: --batch and --threads must be >= 1")
    data = read_pairs(args.pairs, args.limit)
    if len(data) < args.batch:
        raise DriverError(f"diin_tf: {len(data)} examples, fewer than one batch of {args.batch} "
                          "(their epoch drops the last partial batch)")

    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        import numpy as np
        import tensorflow as tf
    except ImportError as err:
        raise DriverError(f"diin_tf: wrong interpreter {sys.executable}: {err} (needs Python 3.7 "
                          "with tensorflow-cpu==1.15.0 and numpy<1.19)") from None
    if not tf.__version__.startswith("1."):
        raise DriverError(f"diin_tf: wrong interpreter {sys.executable}: TensorFlow "
                          f"{tf.__version__}, their code needs 1.x (tensorflow-cpu==1.15.0)")
    tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.ERROR)
    import tensorflow.contrib.rnn.python.ops.rnn_cell as rnn_cell
    from tensorflow.contrib.rnn.python.ops import core_rnn_cell

    # Their flags, as their README's SNLI command sets them (parameters.py reads sys.argv).
    sys.argv = [sys.argv[0], "DIIN", "peer_speed", "--training_completely_on_snli",
                "--batch_size", str(args.batch), "--seq_length", str(args.seq_length)]
    sys.path.insert(0, str(python_dir))
    sys.dont_write_bytecode = True  # leave their checkout as it is
    rnn_cell._linear = core_rnn_cell._linear  # my/tensorflow/nn.py:1 (TensorFlow 1.3 path)
    stand_ins()
    with contextlib.redirect_stdout(io.StringIO()):  # their modules print shapes and names
        dp = importlib.import_module("util.data_processing")
        their_model = importlib.import_module("models.DIIN")
    config = dp.config
    fixed = dp.FIXED_PARAMETERS

    # Data: load_nli_data's shuffle (data_processing.py:54-56), train_mnli.py:71-73.
    random.seed(1)
    random.shuffle(data)
    shared_content = exact_match(data)
    _, word_indices, char_indices, _ = dp.sentences_to_padded_index_sequences([data])
    config.char_vocab_size = len(char_indices.keys())
    np.random.seed(1)
    embeddings = np.random.normal(size=(len(word_indices), args.emb_dim)).astype(np.float32)
    embeddings[0, :] = 0.0  # loadEmbedding_rand: <PAD> is zero (data_processing.py:543)
    classes = max(3, max(example["label"] for example in data) + 1)

    # Graph: train_mnli.py:117-135, the POS placeholders narrowed while MyModel is built.
    pos_width = POS_WIDTH if args.pos_tags else 0
    placeholder = tf.placeholder

    def pos_placeholder(dtype: object, shape: list | None = None,
                        name: str | None = None) -> object:  # tf.placeholder's signature
        if name in ("premise_pos", "hypothesis_pos"):
            shape = [*shape[:-1], pos_width]
        return placeholder(dtype, shape, name=name)

    tf.set_random_seed(1)
    tf.placeholder = pos_placeholder
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            model = their_model.MyModel(
                config, seq_length=fixed["seq_length"], emb_dim=args.emb_dim,
                hidden_dim=args.emb_dim, embeddings=embeddings, emb_train=fixed["emb_train"],
                pred_size=classes)
    finally:
        tf.placeholder = placeholder
    tvars = tf.trainable_variables()
    grads, _ = tf.clip_by_global_norm(tf.gradients(model.total_cost, tvars),
                                      config.gradient_clip_value)
    opt = tf.train.AdadeltaOptimizer(fixed["learning_rate"])
    optimizer = opt.apply_gradients([(grads[k], var) for k, var in enumerate(tvars)],
                                    global_step=model.global_step)
    init = tf.global_variables_initializer()
    sess_config = tf.ConfigProto(intra_op_parallelism_threads=args.threads,
                                 inter_op_parallelism_threads=args.threads)
    sess_config.gpu_options.allow_growth = True
    sess = tf.Session(config=sess_config)
    sess.run(init)
    parameters = sum(int(np.prod(v.shape.as_list())) for v in tvars)

    batch, seq_length = args.batch, config.seq_length

    def get_minibatch(dataset: list, start_index: int, end_index: int) -> tuple:
        """train_mnli.py:143-171, their helpers called; POS: zeros of ``pos_width``."""
        indices = range(start_index, end_index)
        genres = [dataset[i]["genre"] for i in indices]
        labels = [dataset[i]["label"] for i in indices]
        pair_ids = np.array([dataset[i]["pairID"] for i in indices])
        premise_pad_crop_pair = hypothesis_pad_crop_pair = [(0, 0)] * len(indices)
        fill = dp.fill_feature_vector_with_cropping_or_padding
        premise_vectors = fill([dataset[i]["sentence1_binary_parse_index_sequence"][:]
                                for i in indices], premise_pad_crop_pair, 1)
        hypothesis_vectors = fill([dataset[i]["sentence2_binary_parse_index_sequence"][:]
                                   for i in indices], hypothesis_pad_crop_pair, 1)
        premise_char_vectors = fill([dataset[i]["sentence1_binary_parse_char_index"][:]
                                     for i in indices], premise_pad_crop_pair, 2,
                                    column_size=config.char_in_word_size)
        hypothesis_char_vectors = fill([dataset[i]["sentence2_binary_parse_char_index"][:]
                                        for i in indices], hypothesis_pad_crop_pair, 2,
                                       column_size=config.char_in_word_size)
        premise_pos_vectors = np.zeros((len(indices), seq_length, pos_width), np.int32)
        hypothesis_pos_vectors = np.zeros((len(indices), seq_length, pos_width), np.int32)
        one_hot = dp.construct_one_hot_feature_tensor
        premise_exact_match = one_hot(
            [shared_content[pair_ids[i]]["sentence1_token_exact_match_with_s2"][:]
             for i in range(len(indices))], premise_pad_crop_pair, 1)
        hypothesis_exact_match = one_hot(
            [shared_content[pair_ids[i]]["sentence2_token_exact_match_with_s1"][:]
             for i in range(len(indices))], hypothesis_pad_crop_pair, 1)
        premise_exact_match = np.expand_dims(premise_exact_match, 2)
        hypothesis_exact_match = np.expand_dims(hypothesis_exact_match, 2)
        return (premise_vectors, hypothesis_vectors, labels, genres, premise_pos_vectors,
                hypothesis_pos_vectors, pair_ids, premise_char_vectors, hypothesis_char_vectors,
                premise_exact_match, hypothesis_exact_match)

    setup_s = time.perf_counter() - t_setup
    rss_before = peak_rss_mib()
    memory = EpochMemory()
    memory.start()

    # The epoch: train_mnli.py:221-347 (the first pass of `while True`), timed.
    wall0, cpu0 = time.perf_counter(), time.process_time()
    avg_cost, costs = 0.0, []
    training_data = data  # train_mnli.py:223 (training_completely_on_snli)
    random.shuffle(training_data)
    total_batch = int(len(training_data) / batch)
    for i in range(total_batch):
        (premise_vectors, hypothesis_vectors, labels, _, pre_pos, hyp_pos, _, premise_chars,
         hypothesis_chars, premise_em, hypothesis_em) = get_minibatch(
            training_data, batch * i, batch * (i + 1))
        feed_dict = {model.premise_x: premise_vectors,
                     model.hypothesis_x: hypothesis_vectors,
                     model.y: labels,
                     model.keep_rate_ph: fixed["keep_rate"],
                     model.is_train: True,
                     model.premise_pos: pre_pos,
                     model.hypothesis_pos: hyp_pos,
                     model.premise_char: premise_chars,
                     model.hypothesis_char: hypothesis_chars,
                     model.premise_exact_match: premise_em,
                     model.hypothesis_exact_match: hypothesis_em}
        if i % config.display_step == 0:  # their self.step: i in the first epoch
            _, c, _, _ = sess.run([optimizer, model.total_cost, model.summary, model.logits],
                                  feed_dict)
        else:
            _, c, _ = sess.run([optimizer, model.total_cost, model.logits], feed_dict)
        avg_cost += c / (total_batch * batch)
        costs.append(float(c))
    epoch_s = time.perf_counter() - wall0
    epoch_cpu_s = time.process_time() - cpu0
    peak = peak_rss_mib()
    epoch_mib = memory.mib()
    sess.close()

    notes = (
        f"Their train_mnli.py step (get_minibatch with their data_processing helpers, feed_dict, "
        f"sess.run of Adadelta(lr {fixed['learning_rate']}) on clip_by_global_norm("
        f"{config.gradient_clip_value}) gradients of total_cost = cross-entropy + sigmoid-growing "
        f"L2 + encoder difference penalty; summary fetched every {config.display_step} steps), "
        f"{total_batch} steps of {batch}, last partial batch dropped as theirs; every sentence "
        f"padded/cut to seq_length {seq_length} (their preprocessing). No evaluation, checkpoint, "
        f"TensorBoard write or logging. Adapted at run time: _linear import path of TF 1.15; "
        f"POS input width {pos_width} (released: 47 from a tagger; "
        f"{'zeros fed' if pos_width else 'no POS tags here'}), their per-step "
        f"generate_pos_feature_tensor not run; word vectors {args.emb_dim}-d random N(0,1) "
        f"(ours: GloVe 6B 50-d; their recipe: 300-d GloVe 840B), fine-tuned; exact match by "
        f"plain token equality (lower-case, n't = not), not their WordNet/stem shared.jsonl; "
        f"vocabulary {len(word_indices)} words and {len(char_indices)} chars from the pairs "
        f"file (their sentences_to_padded_index_sequences). Other sizes their defaults = "
        f"conf/model/diin.yaml. {parameters} trainable parameters. Setup includes importing "
        f"TensorFlow. Mean loss over the epoch {sum(costs) / len(costs):.4f} "
        f"(first {costs[0]:.4f}, last {costs[-1]:.4f})."
    )
    return {
        "side": "theirs", "implementation": IMPLEMENTATION, "model": MODEL,
        "framework": f"tensorflow {tf.__version__}", "python": platform.python_version(),
        "examples": len(data), "steps": total_batch, "batch": batch, "threads": args.threads,
        "epoch_s": epoch_s, "epoch_cpu_s": epoch_cpu_s, "setup_s": setup_s,
        "rss_before_mib": rss_before, "peak_rss_mib": peak, "epoch_mib": epoch_mib,
        "machine": cpu_name(),
        "command": " ".join(shlex.quote(a) for a in [sys.executable, *COMMAND]),
        "notes": notes,
    }


COMMAND = list(sys.argv)


def main() -> None:
    args = parse_args()
    try:
        record = run(args)
    except DriverError as err:
        print(str(err), file=sys.stderr)
        sys.exit(2)
    text = json.dumps(record, indent=1)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
