"""Time the DataModule's read + tokenise + vocabulary + index pipeline on a 550k-pair corpus.

The corpus is made by repeating a fixture (the generated demo pairs, or any JSONL file in the
SNLI schema given with --data) up to --pairs rows, so it is SNLI-train-sized. Prints the cold
time (empty ``datasets`` cache) and the warm time (cached ``map`` results).

    python benchmarks/bench_tokenize.py                       # demo pairs repeated
    python benchmarks/bench_tokenize.py --data ../shared/data/snli/validation.jsonl.gz
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import tempfile
import time
from pathlib import Path

from entailment_lab.data.datamodule import TextDataModule
from entailment_lab.data.demo import demo_pairs


def make_corpus(source: str | None, pairs: int, out: Path) -> Path:
    if source:
        opener = gzip.open if source.endswith(".gz") else open
        with opener(source, "rt", encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
    else:
        rows = demo_pairs(3000, seed=0)
    lines = [json.dumps(r) + "\n" for r in rows]
    with open(out, "w", encoding="utf-8") as f:
        for i in range(pairs):
            f.write(lines[i % len(lines)])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="JSONL(.gz) pairs to repeat (default: demo pairs)")
    parser.add_argument("--pairs", type=int, default=550_000)
    parser.add_argument("--num-proc", type=int, default=None,
                        help="datasets.map workers (default: the DataModule's choice)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        corpus = make_corpus(args.data, args.pairs, Path(tmp) / "train.jsonl")
        cache = str(Path(tmp) / "hf-cache")
        timings = []
        for label in ("cold (empty cache)", "warm (cached)"):
            dm = TextDataModule(
                fields={"premise": "premise", "hypothesis": "hypothesis"},
                label_names=["entailment", "neutral", "contradiction"],
                files={"train": str(corpus)}, vocab_splits=["train"], cache_dir=cache,
                num_proc=args.num_proc,
            )
            start = time.perf_counter()
            dm.setup()
            timings.append(time.perf_counter() - start)
            print(f"{label}: {args.pairs:,} pairs read, tokenised, vocabulary of "
                  f"{len(dm.vocab):,} built, indexed in {timings[-1]:.1f} s")
        print(f"cpu cores: {os.cpu_count()}; source: {args.data or 'generated demo pairs'}")


if __name__ == "__main__":
    main()
