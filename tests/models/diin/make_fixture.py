"""Write tests/models/diin/diin.pt: our DIIN's weights, run through the authors' TensorFlow graph.

Run by hand only, never by the tests. Two interpreters take part: this project's (torch, our
model) and a Python 3.7 with ``tensorflow-cpu==1.15.0`` and ``numpy<1.19`` (the authors' code
is TensorFlow 1.x: ``tf.contrib``, placeholders, sessions). The first calls the second on this
same file with ``--tf-side``; that half imports no torch and nothing of this project::

    PYTHONPATH=src python tests/models/diin/make_fixture.py /path/to/DIIN-checkout \\
        --tf-python /path/to/py37-tf1.15/bin/python

(or ``make references``: tests/references/README.md). The checkout is a git clone of
YichenGong/Densely-Interactive-Inference-Network; its pinned commit (``UPSTREAM``) is exported
and ``tests/references/patches/diin.patch`` applied, the adaptations listed in
docs/models/diin.md: ``_linear``'s import path of TensorFlow 1.15, the 47-d POS input's width
a setting (``config.pos_width``, 0 here: we have no POS tags), and a switch
(``config.mask_padding``, on for the second of the two graphs) that multiplies the encoder
outputs by the sentence masks before the interaction layer (the authors' code does not mask
padding). Until the fixture was regenerated through the patch these three were made at run
time (monkey-patching); the patch makes the same operations, but it has not been run here (no
Python 3.7 with TensorFlow 1.15 on this machine).

Our model is built with small sizes and random weights (random biases too, so every bias is
carried over), its weights are written in the authors' variable layout, both run five SNLI
dev pairs (padded to ``sequence_length`` = 16 on their side, to the batch on ours) in
inference mode, and the fixture stores the authors' logits of both graphs.
"""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

OUT = Path(__file__).with_name("diin.pt")
UPSTREAM = ("YichenGong/Densely-Interactive-Inference-Network",
            "cb2c23bc1aca7cafb523104b0db07df2332a877a", "diin.patch", ("python",))
EMB_DIM = 8
CONFIG = {  # our constructor's arguments; the authors' flags of the same sizes are in TF_FLAGS
    "sequence_length": 16, "char_dim": 4, "char_filters": 6, "char_width": 3,
    "max_word_length": 8, "exact_match": True, "exact_match_stem": False,
    "highway_layers": 2, "share_highway": True, "scale_down": 0.3,
    "first_scale_down_kernel": 1, "dense_blocks": 3, "dense_layers": 2, "growth_rate": 4,
    "transition_rate": 0.5, "dropout": 0.0,
}
TF_FLAGS = [
    "--seq_length", "16", "--char_emb_size", "4", "--char_in_word_size", "8",
    "--char_out_size", "6", "--out_channel_dims", "6", "--filter_heights", "3",
    "--highway_num_layers", "2", "--dense_net_first_scale_down_ratio", "0.3",
    "--first_scale_down_kernel", "1", "--dense_net_layers", "2", "--dense_net_growth_rate", "4",
    "--dense_net_transition_rate", "0.5", "--keep_rate", "1.0",
]
# SNLI 1.0 dev pairs 7, 1, 9, 2, 8 (premise, hypothesis); the first is cut to 16 + 16 tokens,
# so one pair has no padding at all.
PAIRS = [
    ("A man selling donuts to a customer during a world exhibition event held in the city of "
     "Angeles", "A man selling donuts to a customer during a world exhibition event while people "
     "wait in line behind him ."),
    ("Two women are embracing while holding to go packages .", "Two woman are holding packages ."),
    ("Two young boys of opposing teams play football , while wearing full protection uniforms "
     "and helmets .", "boys play football"),
    ("Two women are embracing while holding to go packages .",
     "The men are fighting outside a deli ."),
    ("A man selling donuts to a customer during a world exhibition event held in the city of "
     "Angeles", "A man selling donuts to a customer ."),
]
UNKNOWN = {"packages", "helmets"}  # left out of the vocabulary: <unk> (no characters, no match)
DENSE_BLOCKS = ("first_dense_net_block", "second_dense_net_block", "third_dense_net_block")
TRANSITIONS = ("second_transition_layer", "third_transition_layer", "fourth_transition_layer")
ENCODERS = {"p": "prepro/0_layer_self_att_enc", "h": "prepro/0_layer_self_att_enc_h"}


# --------------------------------------------------------------------------------------------
# Our side (this project's interpreter)
# --------------------------------------------------------------------------------------------


def their_variables(model: object) -> dict[str, np.ndarray]:
    """Our weights in the authors' variable layout, keyed by their variable names.

    TensorFlow kernels are (in, out) where torch weights are (out, in); conv kernels are
    (kh, kw, in, out) against torch's (out, in, kh, kw). The fuse gate's (d, 2d) weight is the
    authors' two (d, d) kernels, ``lhs`` for p̂ and ``rhs`` for p̄; its bias is split into two.
    Our W1 / W2 / W3 (z, r on p̂, f on z) are their ``_1`` (z), ``_2`` (f, on lhs), ``_3``
    (f2, on z). The tri-linear score's bias, which we do not have, gets a non-zero value: it
    cancels in the softmax. Their flatten reads (row, column, channel), ours (channel, row,
    column), so the output kernel's rows are permuted.
    """
    import torch

    def arr(t: torch.Tensor) -> np.ndarray:
        return t.detach().to(torch.float32).numpy().copy()

    def conv2d(conv: torch.nn.Conv2d) -> tuple[np.ndarray, np.ndarray]:
        return arr(conv.weight.permute(2, 3, 1, 0)), arr(conv.bias)

    gen = torch.Generator().manual_seed(7)
    out: dict[str, np.ndarray] = {}
    out["emb/emb_var/Variable:0"] = arr(model.embedding.weight)
    chars = model.char_features
    out["char_emb/char_emb_mat:0"] = arr(chars.embedding.weight)
    conv = f"char_emb/char/conv/conv/conv1d_{chars.conv.kernel_size[0]}"
    out[f"{conv}/filter:0"] = arr(chars.conv.weight.permute(2, 1, 0).unsqueeze(0))
    out[f"{conv}/bias:0"] = arr(chars.conv.bias)
    for k, (transform, gate) in enumerate(
        zip(model.highway_p.transform, model.highway_p.gate, strict=True)
    ):
        for name, layer in (("trans", transform), ("gate", gate)):
            out[f"highway/highway_network/layer_{k}/{name}/kernel:0"] = arr(layer.weight.T)
            out[f"highway/highway_network/layer_{k}/{name}/bias:0"] = arr(layer.bias)
    d = model.hidden_size
    for side, scope in ENCODERS.items():
        encoder = model.encoder_p if side == "p" else model.encoder_h
        out[f"{scope}/self_attention/h_logits/first/kernel:0"] = arr(encoder.w.unsqueeze(1))
        out[f"{scope}/self_attention/h_logits/first/bias:0"] = arr(torch.rand(1, generator=gen))
        for k, gate in ((1, encoder.W1), (2, encoder.W2), (3, encoder.W3)):
            rhs_bias = (torch.rand(d, generator=gen) - 0.5).to(gate.bias.dtype)
            fuse = f"{scope}/self_att_fuse_gate"
            out[f"{fuse}/lhs_{k}/kernel:0"] = arr(gate.weight[:, :d].T)
            out[f"{fuse}/rhs_{k}/kernel:0"] = arr(gate.weight[:, d:].T)
            out[f"{fuse}/lhs_{k}/bias:0"] = arr(gate.bias - rhs_bias)
            out[f"{fuse}/rhs_{k}/bias:0"] = arr(rhs_bias)
    net = model.densenet
    out["main/dense_net/Conv/weights:0"], out["main/dense_net/Conv/biases:0"] = conv2d(
        net.scale_down)
    for block, transition, convs, trans in zip(
        DENSE_BLOCKS, TRANSITIONS, net.blocks, net.transitions, strict=True
    ):
        for i, conv_i in enumerate(convs):
            name = f"main/dense_net/{block}/Conv" + (f"_{i}" if i else "")
            out[f"{name}/weights:0"], out[f"{name}/biases:0"] = conv2d(conv_i)
        name = f"main/dense_net/{transition}/Conv"
        out[f"{name}/weights:0"], out[f"{name}/biases:0"] = conv2d(trans)
    c, size = net.out_channels, net.out_size
    weight = model.output.weight.reshape(-1, c, size, size)  # (classes, c, rows, columns)
    out["logit/kernel:0"] = arr(weight.permute(2, 3, 1, 0).reshape(size * size * c, -1))
    out["logit/bias:0"] = arr(model.output.bias)
    return out


def make(upstream: Path, tf_python: str, out: Path = OUT) -> None:
    import torch
    from torch import nn

    from entailment_lab.data.text import tokenize
    from entailment_lab.models.diin import DIIN, exact_match_feature, fit_length

    tokens = [[tokenize(s)[: CONFIG["sequence_length"]] for s in pair] for pair in PAIRS]
    words = sorted({t for pair in tokens for s in pair for t in s} - UNKNOWN)
    vocab = ["<pad>", "<unk>", *words]
    index = {w: i for i, w in enumerate(vocab)}

    def padded(sentences: list[list[str]]) -> tuple[torch.Tensor, torch.Tensor]:
        ids = torch.zeros(len(sentences), max(len(s) for s in sentences), dtype=torch.long)
        for row, s in enumerate(sentences):
            ids[row, : len(s)] = torch.tensor([index.get(t, 1) for t in s])
        return ids, torch.arange(ids.size(1)) < torch.tensor([[len(s)] for s in sentences])

    premise, premise_mask = padded([p for p, _ in tokens])
    hypothesis, hypothesis_mask = padded([h for _, h in tokens])

    torch.manual_seed(48)
    embedding = nn.Embedding(len(vocab), EMB_DIM, padding_idx=0)  # N(0, 1), row 0 zero
    model = DIIN(embedding, 3, vocab, **CONFIG).eval()
    with torch.no_grad():  # the official init leaves biases at zero: draw them, so each is used
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.uniform_(-0.5, 0.5)

    # The inputs of their graph: everything padded to L; the character ids and exact-match
    # features are ours (their preprocessing computes them outside the network).
    length = CONFIG["sequence_length"]
    keys = model.match_keys
    feed = {
        "premise": fit_length(premise, length), "hypothesis": fit_length(hypothesis, length),
        "premise_exact_match": fit_length(exact_match_feature(
            keys[premise], premise_mask, keys[hypothesis], hypothesis_mask), length),
        "hypothesis_exact_match": fit_length(exact_match_feature(
            keys[hypothesis], hypothesis_mask, keys[premise], premise_mask), length),
    }
    feed["premise_char"] = model.char_ids[feed["premise"]]
    feed["hypothesis_char"] = model.char_ids[feed["hypothesis"]]
    with tempfile.TemporaryDirectory() as tmp:
        weights, inputs, result = (Path(tmp) / n for n in ("w.npz", "x.npz", "y.npz"))
        np.savez(weights, **their_variables(model))
        np.savez(inputs, **{k: v.numpy() for k, v in feed.items()})
        subprocess.run([tf_python, __file__, str(upstream), "--tf-side", str(weights),
                        str(inputs), str(result)], check=True)
        with np.load(result) as theirs:
            released = torch.from_numpy(theirs["released"])
            masked = torch.from_numpy(theirs["masked"])

    with torch.no_grad():
        ours32 = model(premise, premise_mask, hypothesis, hypothesis_mask)["logits"]
        ours64 = model.double()(premise, premise_mask, hypothesis, hypothesis_mask)["logits"]
    full = premise_mask.all(1) & hypothesis_mask.all(1) & (premise.size(1) == length) & (
        hypothesis.size(1) == length)
    print(f"their logits (masked graph) {tuple(masked.shape)}, range "
          f"[{masked.min().item():.4f}, {masked.max().item():.4f}]")
    for name, ours in (("float32", ours32), ("float64", ours64)):
        print(f"ours {name}: max |ours - theirs, masked| = "
              f"{(ours.double() - masked.double()).abs().max().item():.3g}; "
              f"max |ours - theirs, as released| over the unpadded pair(s) {full.tolist()} = "
              f"{(ours.double() - released.double())[full].abs().max().item():.3g}, "
              f"per padded pair = "
              f"{(ours.double() - released.double())[~full].abs().amax(1).tolist()}")
    torch.save({
        "source": "YichenGong/Densely-Interactive-Inference-Network@cb2c23b models/DIIN.py "
                  "(TensorFlow 1.15.0, float32)",
        "config": CONFIG, "vocab": vocab, "emb_dim": EMB_DIM,
        "state_dict": {k: v.float() for k, v in model.state_dict().items()},
        "premise": premise, "premise_mask": premise_mask,
        "hypothesis": hypothesis, "hypothesis_mask": hypothesis_mask,
        "their_inputs": feed,
        "logits_masked": masked, "logits_released": released,
    }, out)
    print(f"wrote {out} ({out.stat().st_size} bytes)")


# --------------------------------------------------------------------------------------------
# Their side (Python 3.7, TensorFlow 1.15; no torch, nothing of this project)
# --------------------------------------------------------------------------------------------


def tf_side(upstream: Path, weights: str, inputs: str, result: str) -> None:
    sys.path.insert(0, str(upstream / "python"))
    sys.argv = [sys.argv[0], "DIIN", "transfer", *TF_FLAGS]  # their parameters.py reads argv
    import tensorflow as tf

    # patches/diin.patch: _linear from core_rnn_cell (TensorFlow 1.15's place), the POS width
    # a setting, and the padding mask a switch.
    their_module = importlib.import_module("models.DIIN")  # their python/models/DIIN.py
    from util import parameters

    _, config = parameters.load_parameters()
    values = dict(np.load(weights))
    x = dict(np.load(inputs))
    config.char_vocab_size = values["char_emb/char_emb_mat:0"].shape[0]
    # The 47-d POS one-hot placeholders get width 0 (we have no POS tags; fed as zeros they
    # would still widen every encoder layer by 47).
    config.pos_width = 0

    logits = {}
    for variant, mask_padding in (("released", False), ("masked", True)):
        # second graph only: the encoder outputs zero at padding, as ours are
        config.mask_padding = mask_padding
        config.keep_rate = 1.0  # MyModel replaces it with a tensor of the graph it builds
        with tf.Graph().as_default():
            emb = values["emb/emb_var/Variable:0"]
            model = their_module.MyModel(config, seq_length=x["premise"].shape[1],
                                         emb_dim=emb.shape[1], hidden_dim=emb.shape[1],
                                         emb_train=True, embeddings=emb)
            trainable = {v.name: v for v in tf.trainable_variables()}
            assert set(trainable) == set(values), sorted(set(trainable) ^ set(values))
            batch = x["premise"].shape[0]
            no_pos = np.zeros((batch, x["premise"].shape[1], 0), np.int32)
            feed = {
                model.premise_x: x["premise"], model.hypothesis_x: x["hypothesis"],
                model.premise_char: x["premise_char"],
                model.hypothesis_char: x["hypothesis_char"],
                model.premise_exact_match: x["premise_exact_match"].astype(np.int32),
                model.hypothesis_exact_match: x["hypothesis_exact_match"].astype(np.int32),
                model.premise_pos: no_pos, model.hypothesis_pos: no_pos,
                model.is_train: False,
            }
            with tf.Session() as sess:
                sess.run(tf.global_variables_initializer())
                for name, var in trainable.items():
                    assert tuple(var.shape.as_list()) == values[name].shape, name
                    var.load(values[name], sess)
                logits[variant] = sess.run(model.logits, feed)
    np.savez(result, **logits)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("upstream", type=Path, help="a git clone of the authors' repository (the "
                        "pinned commit is exported and patched); with --tf-side, the prepared "
                        "tree")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--tf-python", default=None,
                        help="a Python 3.7 with tensorflow-cpu 1.15.0 and numpy < 1.19")
    parser.add_argument("--tf-side", nargs=3, metavar=("WEIGHTS", "INPUTS", "RESULT"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.tf_side:
        tf_side(args.upstream, *args.tf_side)
    else:
        if not args.tf_python:
            parser.error("--tf-python is required")
        sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository
        from tests.references.upstream import Upstream  # not on the TF side

        with tempfile.TemporaryDirectory() as tmp:
            make(Upstream(*UPSTREAM).prepare(args.upstream, Path(tmp)), args.tf_python, args.out)


if __name__ == "__main__":
    main()
