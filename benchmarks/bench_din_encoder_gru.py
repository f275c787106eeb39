"""DIN's encoder GRU, both forms: one DIN-1 training step (forward, backward, Adam step;
dropout on), one thread, ``encoder_gru=torch`` (``nn.GRU``) against ``encoder_gru=paper``
(``PaperGRU``, Eq. 3-6 as printed); docs/models/din.md, "The encoder GRU".

    python benchmarks/bench_din_encoder_gru.py --data ../shared/data/snli/validation.jsonl.gz

Batches: SNLI dev pairs (whitespace tokens), sorted by premise then hypothesis length and cut
into batches of 32 (like the DataModule's length buckets); the same batches for both forms,
alternating form by form in rounds. Random word vectors, frozen.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import statistics
import time

import torch
from torch import nn

from entailment_lab.models.din import DIN

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--data", required=True,
                    help="SNLI pairs, JSONL(.gz) in the hub's schema: the batches' lengths")
parser.add_argument("--batches", type=int, default=20)
parser.add_argument("--rounds", type=int, default=3)
parser.add_argument("--d-emb", type=int, default=300)
parser.add_argument("--dim", type=int, default=400)
parser.add_argument("--batch-size", type=int, default=32)
args = parser.parse_args()
torch.set_num_threads(1)

with gzip.open(args.data, "rt") if args.data.endswith(".gz") else open(args.data) as f:
    pairs = [json.loads(line) for line in f]
lengths = sorted((len(p["premise"].split()), len(p["hypothesis"].split())) for p in pairs
                 if p["label"] in (0, 1, 2))
chunks = [lengths[i:i + args.batch_size] for i in range(0, len(lengths) - args.batch_size,
                                                         args.batch_size)]
rng = random.Random(0)
chosen = rng.sample(chunks, args.batches)
VOCAB = 1000


def side(ls: list[int], gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    mask = torch.arange(max(ls))[None, :] < torch.tensor(ls)[:, None]
    return torch.randint(1, VOCAB, mask.shape, generator=gen) * mask, mask


gen = torch.Generator().manual_seed(1)
batches = []
for chunk in chosen:
    p, pm = side([a for a, _ in chunk], gen)
    h, hm = side([b for _, b in chunk], gen)
    batches.append((p, pm, h, hm, torch.randint(0, 3, (len(chunk),), generator=gen)))

models, optims = {}, {}
for form in ("torch", "paper"):
    torch.manual_seed(0)
    emb = nn.Embedding(VOCAB, args.d_emb, padding_idx=0)
    emb.weight.requires_grad_(False)
    models[form] = DIN(emb, num_classes=3, dim=args.dim, variant="din1",
                       encoder_gru=form).train()
    optims[form] = torch.optim.Adam([q for q in models[form].parameters() if q.requires_grad],
                                    lr=1e-3)


def step(form: str, b: tuple[torch.Tensor, ...]) -> float:
    model, opt = models[form], optims[form]
    start = time.perf_counter()
    logits = model(*b[:4])["logits"]
    loss = nn.functional.cross_entropy(logits, b[4])
    opt.zero_grad()
    loss.backward()
    opt.step()
    return time.perf_counter() - start


for form in models:  # warm-up
    for b in batches[:3]:
        step(form, b)
times: dict[str, list[float]] = {form: [] for form in models}
encoder: dict[str, list[float]] = {form: [] for form in models}
for _ in range(args.rounds):
    for form in models:
        for b in batches:
            times[form].append(step(form, b))
            # the encoder alone, forward + backward (input with grad so backward runs through)
            x = models[form].embedding(b[0]).requires_grad_()
            t0 = time.perf_counter()
            models[form].encode(x, b[1]).sum().backward()
            encoder[form].append(time.perf_counter() - t0)

pm = sum(len(c) * max(a for a, _ in c) for c in chosen)
real = sum(a for c in chosen for a, _ in c)
print(f"# torch {torch.__version__}, 1 thread, DIN-1 d={args.dim}, d_emb={args.d_emb}, "
      f"batch {args.batch_size}, {args.batches} SNLI-dev batches x {args.rounds} rounds; "
      f"premise padding {1 - real / pm:.1%}; mean premise length "
      f"{real / (args.batches * args.batch_size):.1f}")
for form in models:
    n = sum(q.numel() for q in models[form].parameters() if q.requires_grad)
    print(f"{form:6s} train step median {1e3 * statistics.median(times[form]):7.1f} ms "
          f"(mean {1e3 * statistics.mean(times[form]):7.1f}); encoder fwd+bwd median "
          f"{1e3 * statistics.median(encoder[form]):6.1f} ms; params {n:,}")
ratio = statistics.median(times["paper"]) / statistics.median(times["torch"])
enc = statistics.median(encoder["paper"]) / statistics.median(encoder["torch"])
print(f"paper / torch: training step {ratio:.2f}x, encoder {enc:.2f}x")
