"""One training epoch of libowen2121/SNLI-decomposable-attention@5ac3eac (a PyTorch port of
Decomposable Attention), for ``benchmarks/peer_speed.py``.

Set-up (any Python >= 3.9 with torch and numpy; the port's model code runs unmodified on
today's torch)::

    git clone https://github.com/libowen2121/SNLI-decomposable-attention CHECKOUT
    git -C CHECKOUT checkout 5ac3eac
    python -m venv venv && venv/bin/pip install torch numpy
    venv/bin/python benchmarks/peers/decatt_port.py CHECKOUT --pairs PAIRS.jsonl --batch 4 \\
        --threads 1 --out record.json

The port's ``encoder`` and ``atten`` (``models/baseline_snli.py``) are imported from the
checkout. Its ``train_baseline_snli.py`` cannot be called for one epoch on a CPU (``.cuda()``
calls, ``loss.data[0]``, data read from harvardnlp's hdf5 files), so this file does per step
what its training loop does (``train_baseline_snli.py`` at 5ac3eac, lines 97-195):

* batches as harvardnlp/decomp-attn's ``preprocess.py`` makes them, which the port reads:
  ``<s>`` before every sentence, pairs sorted by (premise length, hypothesis length), each run
  of one length pair cut into batches of at most ``--batch`` pairs, unpadded; the batch order
  shuffled every epoch (line 104, ``shuffle(train_batches)``);
* two Adagrad optimisers (encoder without the frozen word vectors, attention), lr 0.05, weight
  decay 5e-5 (lines 78-86, 316-343: the port's defaults); N(0, 0.01²) init (``para_init``);
* zero both gradients, encoder, attention, ``NLLLoss`` (mean), backward (lines 111-133);
* the squared gradient norm summed over every ``nn.Linear`` of both modules and, where it
  exceeds ``max_grad_norm`` 5, each Linear's gradient scaled by ``5 / Σg²`` (lines 135-168;
  the port's own arithmetic: it scales by the squared norm);
* both optimiser steps, the training accuracy and loss tallies (lines 170-176); its log line
  every 1,000 batches is not printed.

Changes for today's torch, none in the port's files: no ``.cuda()`` (CPU), ``loss.item()`` for
``loss.data[0]``, ``bias is not None`` for ``if m.bias`` (a multi-element tensor has no truth
value), and the shrink skipped when the gradient norm is 0 (the port divides by it). Sizes:
hidden 200 (the paper's; the port's default is 300), 50-d random word vectors (our protocol
uses GloVe 6B 50-d; frozen on both sides, so the values do not change the speed), every
word of the file in the vocabulary (harvardnlp's keeps only GloVe words).
"""

from __future__ import annotations

import os
import random
import sys
import time
from collections import defaultdict

from measure import Epoch, driver_arguments, emit, read_pairs  # this folder's, stdlib only

IMPLEMENTATION = "libowen2121/SNLI-decomposable-attention@5ac3eac"
EMBEDDING, HIDDEN, PARA_INIT, LR, WEIGHT_DECAY, MAX_GRAD_NORM = 50, 200, 0.01, 0.05, 5e-5, 5.0
SPECIALS = ["<blank>", "<unk>", "<s>", "</s>"]  # harvardnlp's indexer: ids 0-3 after the shift


def harvardnlp_batches(pairs: list, stoi: dict[str, int], batch: int) -> list[tuple]:
    """``<s>`` + each sentence, grouped by (premise length, hypothesis length), chunks of at
    most ``batch`` pairs: harvardnlp's ``preprocess.py`` layout, as the port's ``snli_data``
    reads it (ids already 0-based)."""
    import torch

    groups: dict[tuple[int, int], list] = defaultdict(list)
    for premise, hypothesis, label in pairs:
        source = [stoi["<s>"]] + [stoi[w] for w in premise]
        target = [stoi["<s>"]] + [stoi[w] for w in hypothesis]
        groups[len(source), len(target)].append((source, target, label))
    batches = []
    for key in sorted(groups):
        group = groups[key]
        for start in range(0, len(group), batch):
            chunk = group[start:start + batch]
            batches.append((torch.tensor([c[0] for c in chunk]),
                            torch.tensor([c[1] for c in chunk]),
                            torch.tensor([c[2] for c in chunk])))
    return batches


def main() -> None:
    args = driver_arguments(__doc__, batch=4, seed=1)
    if not (args.checkout / "models" / "baseline_snli.py").is_file():
        sys.exit(f"decatt_port: {args.checkout} has no models/baseline_snli.py; give a checkout "
                 f"of {IMPLEMENTATION}")
    pairs = read_pairs(args.pairs, args.limit, "decatt_port")

    setup_start = time.perf_counter()
    import torch
    from torch import nn
    torch.set_num_threads(args.threads)
    sys.path.insert(0, str(args.checkout))
    from models.baseline_snli import atten, encoder

    random.seed(args.seed)
    torch.manual_seed(args.seed)
    words = sorted({w for p, h, _ in pairs for w in p + h} - set(SPECIALS))
    stoi = {w: i for i, w in enumerate(SPECIALS + words)}
    batches = harvardnlp_batches(pairs, stoi, args.batch)

    input_encoder = encoder(len(stoi), EMBEDDING, HIDDEN, PARA_INIT)
    input_encoder.embedding.weight.data.normal_()
    input_encoder.embedding.weight.requires_grad = False
    inter_atten = atten(HIDDEN, 3, PARA_INIT)
    input_optimizer = torch.optim.Adagrad(
        [p for p in input_encoder.parameters() if p.requires_grad], lr=LR,
        weight_decay=WEIGHT_DECAY)
    inter_atten_optimizer = torch.optim.Adagrad(inter_atten.parameters(), lr=LR,
                                                weight_decay=WEIGHT_DECAY)
    criterion = nn.NLLLoss()
    linears = [m for module in (input_encoder, inter_atten) for m in module.modules()
               if isinstance(m, nn.Linear)]
    setup_s = time.perf_counter() - setup_start

    with Epoch() as epoch:
        input_encoder.train()
        inter_atten.train()
        random.shuffle(batches)
        correct = total = 0
        loss_sum = 0.0
        for source, target, label in batches:
            input_optimizer.zero_grad()
            inter_atten_optimizer.zero_grad()
            log_prob = inter_atten(*input_encoder(source, target))
            loss = criterion(log_prob, label)
            loss.backward()
            grad_norm = 0.0
            for m in linears:
                grad_norm += m.weight.grad.data.norm() ** 2
                if m.bias is not None:
                    grad_norm += m.bias.grad.data.norm() ** 2
            shrinkage = MAX_GRAD_NORM / grad_norm if grad_norm > 0 else 1.0
            if shrinkage < 1:
                for m in linears:
                    m.weight.grad.data = m.weight.grad.data * shrinkage
                    if m.bias is not None:
                        m.bias.grad.data = m.bias.grad.data * shrinkage
            input_optimizer.step()
            inter_atten_optimizer.step()
            predict = log_prob.data.max(dim=1)[1]
            total += label.size(0)
            correct += int(torch.sum(predict == label))
            loss_sum += loss.item() * label.size(0)

    emit({
        "side": "theirs", "implementation": IMPLEMENTATION, "model": "decatt",
        "framework": f"torch {torch.__version__}", "examples": len(pairs),
        "steps": len(batches), "batch": args.batch, "threads": torch.get_num_threads(),
        "setup_s": round(setup_s, 3), **epoch.fields(),
        "train_acc": round(correct / max(total, 1), 4),
        "notes": "batches of one (premise, hypothesis) length each, unpadded (harvardnlp's "
                 "preprocessing); hidden 200, 50-d frozen vectors",
    }, args.out)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
