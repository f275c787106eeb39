"""One training epoch of facebookresearch/InferSent@48fe288 (``NLINet`` with its
``LSTMEncoder``), for ``benchmarks/peer_speed.py``.

Set-up (any Python >= 3.9 with torch and numpy)::

    git clone https://github.com/facebookresearch/InferSent CHECKOUT
    git -C CHECKOUT checkout 48fe288    # the last commit with train_nli.py
    # models.py, three changes for a CPU and today's torch (docs/models/lstm.md lists them):
    # torch.from_numpy(idx_sort) for torch.cuda.LongTensor(idx_sort) in LSTMEncoder.forward
    # (twice), a .copy() of the sorted lengths, and inputdim // 2 in NLINet
    python -m venv venv && venv/bin/pip install torch numpy
    venv/bin/python benchmarks/peers/infersent.py CHECKOUT --pairs PAIRS.jsonl --batch 128 \\
        --threads 1 --out record.json

``NLINet`` (``models.py``) and ``get_batch`` (``data.py``) are imported from the checkout.
``train_nli.py`` runs its whole experiment at import (data from its own files, CUDA), so this
file does per step what its ``trainepoch`` does (``train_nli.py`` at 48fe288, lines 140-218):

* every sentence ``<s> w1 ... wn </s>`` (lines 83-87), the pairs permuted every epoch
  (line 153), consecutive slices of ``--batch`` pairs (line 164);
* ``get_batch``: a (length, batch, dim) numpy array filled word by word from the word-vector
  dictionary, turned into a tensor (lines 166-169; ``data.py`` lines 13-23);
* ``NLINet`` forward (line 175), the loss (line 182), the predictions' tally (lines 177-178),
  ``zero_grad``, backward (lines 187-188);
* every gradient divided by the batch size and its norm summed; the learning rate scaled for
  the step where the norm exceeds ``max_norm`` 5; the optimiser step (lines 191-207).

Settings: InferSent's options set to our recipe, as in the accuracy comparison (README's
results): ``--encoder_type LSTMEncoder --enc_lstm_dim 128 --nonlinear_fc 1 --fc_dim 1024
--dpout_fc 0.1 --optimizer adam,lr=0.001`` (Adam built directly: its ``mutils.get_optimizer``
uses ``inspect.getargspec``, gone from Python 3.11); ``CrossEntropyLoss(reduction="sum")``,
what its ``loss_fn.size_average = False`` meant (today's torch ignores the attribute);
50-d random word vectors (ours: GloVe 6B 50-d; their values do not change the speed), every
word of the file kept (it keeps only words with a vector); no CUDA.
"""

from __future__ import annotations

import os
import sys
import time

from measure import Epoch, driver_arguments, emit, read_pairs  # this folder's, stdlib only

IMPLEMENTATION = "facebookresearch/InferSent@48fe288"
EMBEDDING, HIDDEN, FC, DROPOUT_FC, LR, MAX_NORM = 50, 128, 1024, 0.1, 1e-3, 5.0


def main() -> None:
    args = driver_arguments(__doc__, batch=128, seed=1234)
    if not (args.checkout / "models.py").is_file() or not (args.checkout / "data.py").is_file():
        sys.exit(f"infersent: {args.checkout} has no models.py and data.py; give a checkout of "
                 f"{IMPLEMENTATION}")
    pairs = read_pairs(args.pairs, args.limit, "infersent")

    setup_start = time.perf_counter()
    import numpy as np
    import torch
    from torch import nn
    torch.set_num_threads(args.threads)
    sys.path.insert(0, str(args.checkout))
    from data import get_batch
    from models import NLINet

    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    words = sorted({w for p, h, _ in pairs for w in p + h} | {"<s>", "</s>"})
    word_vec = {w: np.random.randn(EMBEDDING).astype(np.float32) for w in words}
    s1 = np.array([["<s>", *p, "</s>"] for p, _, _ in pairs], dtype=object)
    s2 = np.array([["<s>", *h, "</s>"] for _, h, _ in pairs], dtype=object)
    target = np.array([label for _, _, label in pairs])
    nli_net = NLINet({
        "n_words": len(word_vec), "word_emb_dim": EMBEDDING, "enc_lstm_dim": HIDDEN,
        "n_enc_layers": 1, "dpout_model": 0.0, "dpout_fc": DROPOUT_FC, "fc_dim": FC,
        "bsize": args.batch, "n_classes": 3, "pool_type": "max", "nonlinear_fc": 1,
        "encoder_type": "LSTMEncoder", "use_cuda": False})
    loss_fn = nn.CrossEntropyLoss(reduction="sum")
    optimizer = torch.optim.Adam(nli_net.parameters(), lr=LR)
    setup_s = time.perf_counter() - setup_start

    with Epoch() as epoch:
        nli_net.train()
        permutation = np.random.permutation(len(s1))
        s1, s2, target = s1[permutation], s2[permutation], target[permutation]
        correct, steps, loss_sum = 0, 0, 0.0
        for stidx in range(0, len(s1), args.batch):
            s1_batch, s1_len = get_batch(s1[stidx:stidx + args.batch], word_vec, EMBEDDING)
            s2_batch, s2_len = get_batch(s2[stidx:stidx + args.batch], word_vec, EMBEDDING)
            tgt_batch = torch.LongTensor(target[stidx:stidx + args.batch])
            k = s1_batch.size(1)
            output = nli_net((s1_batch, s1_len), (s2_batch, s2_len))
            pred = output.data.max(1)[1]
            correct += int(pred.long().eq(tgt_batch.data.long()).sum())
            loss = loss_fn(output, tgt_batch)
            loss_sum += loss.item()
            optimizer.zero_grad()
            loss.backward()
            shrink_factor, total_norm = 1.0, 0.0
            for p in nli_net.parameters():
                if p.requires_grad:
                    p.grad.data.div_(k)
                    total_norm += float(p.grad.data.norm() ** 2)
            total_norm = float(np.sqrt(total_norm))
            if total_norm > MAX_NORM:
                shrink_factor = MAX_NORM / total_norm
            current_lr = optimizer.param_groups[0]["lr"]
            optimizer.param_groups[0]["lr"] = current_lr * shrink_factor
            optimizer.step()
            optimizer.param_groups[0]["lr"] = current_lr
            steps += 1

    emit({
        "side": "theirs", "implementation": IMPLEMENTATION, "model": "lstm",
        "framework": f"torch {torch.__version__}", "examples": len(s1), "steps": steps,
        "batch": args.batch, "threads": torch.get_num_threads(), "setup_s": round(setup_s, 3),
        **epoch.fields(), "train_acc": round(correct / max(len(s1), 1), 4),
        "notes": "LSTMEncoder 128, nonlinear_fc 1,024 x 2, Adam 1e-3; word vectors looked up "
                 "in numpy per batch (its get_batch)",
    }, args.out)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
