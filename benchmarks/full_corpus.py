"""The full corpus, rehearsed: the default training path's data stage on an SNLI-sized corpus.

Writes a corpus of SNLI's size in the Hugging Face hub's schema (``premise``, ``hypothesis``,
``label``; 550,152 training pairs, label -1 on 785 of them scattered at random as in
``stanfordnlp/snli``'s train split, three hypotheses per premise; 10,000 validation and test
pairs with 158 and 176 such rows), then starts ``src/train.py``'s data stage on it twice in a
fresh process pinned to one core: the DataModule of the default config (``data=snli`` with
``data.files.*``) built as the pipeline builds it (``pipeline.build_datamodule``: read, validate,
drop the no-gold rows, tokenise, build the vocabulary, index). The first start has an empty
``datasets`` cache, the second reads the cache the first filled.

Printed: the wall time of each start (the data stage, and the process from its start with its
imports), where the first start's time goes, the peak resident memory of the process (and of
its largest ``datasets.map`` worker), and the machine's load average.

Sentence lengths (in tokens) are drawn pair by pair from a given SNLI file
(``--lengths-from PATH``: any file the project reads, e.g. SNLI dev in the hub's schema), or
from a synthetic distribution close to SNLI's (premise 14, hypothesis 8 tokens on average);
words from a Zipf-like vocabulary of 40,000 made-up words (SNLI train has about 37,000 types).

    python benchmarks/full_corpus.py                                   # 550,152 pairs
    python benchmarks/full_corpus.py --lengths-from ../shared/data/snli/validation.jsonl.gz
    python benchmarks/full_corpus.py --tiny                            # 3,000 pairs, seconds
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks" / "peers"))

from measure import cpu_name  # noqa: E402  (benchmarks/peers/measure.py, shared with the peers)

SNLI = {"train": (550_152, 785), "validation": (10_000, 158), "test": (10_000, 176)}
TINY = {"train": (3_000, 4), "validation": (300, 5), "test": (300, 5)}
WORDS = 40_000
STAGES = ("read", "validate + drop no-gold", "tokenise", "vocabulary", "index")


# --- the corpus --------------------------------------------------------------------------
def snli_lengths(path: str) -> np.ndarray:
    """(n, 2) token counts (premise, hypothesis) of every pair of an SNLI file."""
    from entailment_lab.data.sources import read_rows
    from entailment_lab.data.text import tokenize

    lengths = []
    for _, row in read_rows(path):
        premise = row.get("premise", row.get("sentence1"))
        hypothesis = row.get("hypothesis", row.get("sentence2"))
        if isinstance(premise, str) and isinstance(hypothesis, str):
            lengths.append((len(tokenize(premise)), len(tokenize(hypothesis))))
    if not lengths:
        raise SystemExit(f"--lengths-from {path}: no premise/hypothesis pairs found")
    return np.asarray(lengths)


def synthetic_lengths(rng: np.random.Generator, n: int) -> np.ndarray:
    """(n, 2) lengths: 2 + negative binomial, means 14.1 and 8.3 (SNLI train's token means)."""
    premise = 2 + rng.negative_binomial(5, 5 / (5 + 12.1), n)
    hypothesis = 2 + rng.negative_binomial(6, 6 / (6 + 6.3), n)
    return np.stack([premise, hypothesis], axis=1)


def _vocabulary() -> tuple[list[str], np.ndarray]:
    """Made-up lower-case words and Zipf-like probabilities (rank r: 1 / (r + 2.7)^1.07)."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = []
    for i in range(WORDS):
        word, k = "", i
        while True:
            word, k = letters[k % 26] + word, k // 26
            if not k:
                break
        words.append(word + "o")
    weights = 1.0 / (np.arange(WORDS) + 2.7) ** 1.07
    return words, weights / weights.sum()


def write_split(path: Path, pairs: int, no_gold: int, lengths: np.ndarray,
                rng: np.random.Generator) -> None:
    """``pairs`` rows in the hub's schema, three hypotheses per premise, label -1 on
    ``no_gold`` rows at random positions; lengths drawn (pair by pair) from ``lengths``."""
    words, probs = _vocabulary()
    # a sentence of n tokens: n - 1 words and its full stop (at least one word)
    drawn = np.maximum(lengths[rng.integers(0, len(lengths), pairs)] - 1, 1)
    premises = (np.arange(pairs) // 3)  # SNLI: about three hypotheses per premise
    premise_len = drawn[premises * 3 % pairs, 0]
    ids = rng.choice(WORDS, size=int(premise_len.sum() + drawn[:, 1].sum()), p=probs)
    labels = rng.integers(0, 3, pairs)
    labels[rng.choice(pairs, size=no_gold, replace=False)] = -1
    at, premise_text = 0, ""
    with path.open("w", encoding="utf-8") as f:
        for i in range(pairs):
            if i % 3 == 0:
                n = int(premise_len[i])
                premise_text = " ".join(words[j] for j in ids[at : at + n]).capitalize() + " ."
                at += n
            n = int(drawn[i, 1])
            hypothesis = " ".join(words[j] for j in ids[at : at + n]).capitalize() + " ."
            at += n
            f.write(json.dumps({"premise": premise_text, "hypothesis": hypothesis,
                                "label": int(labels[i])}) + "\n")


def write_corpus(folder: Path, sizes: dict[str, tuple[int, int]], lengths_from: str | None,
                 seed: int) -> dict[str, str]:
    rng = np.random.default_rng(seed)
    lengths = snli_lengths(lengths_from) if lengths_from else synthetic_lengths(rng, 100_000)
    files = {}
    for split, (pairs, no_gold) in sizes.items():
        files[split] = str(folder / f"{split}.jsonl")
        write_split(Path(files[split]), pairs, no_gold, lengths, rng)
    return files


# --- one start (a fresh process) ---------------------------------------------------------
@contextmanager
def _timed(owner: object, name: str, stage: str, spent: dict[str, float]) -> Iterator[None]:
    """Add the time of every call of ``owner.name`` to ``spent[stage]`` while inside."""
    original = getattr(owner, name)

    def timed(*args: object, **kwargs: object) -> object:
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent[stage] = spent.get(stage, 0.0) + time.perf_counter() - start

    setattr(owner, name, timed)
    try:
        yield
    finally:
        setattr(owner, name, original)


def start(files: dict[str, str], cache: str, overrides: list[str]) -> dict[str, object]:
    """Build the default config's DataModule as the training pipeline does; its figures."""
    import torch
    from hydra import compose, initialize_config_dir

    from entailment_lab.config import register_resolvers
    from entailment_lab.data import datamodule
    from entailment_lab.pipeline import build_datamodule

    torch.set_num_threads(1)
    register_resolvers()
    with initialize_config_dir(version_base="1.3", config_dir=str(REPO / "conf")):
        cfg = compose(config_name="train", overrides=[
            *(f"data.files.{split}={path}" for split, path in files.items()),
            f"data.cache_dir={cache}", *overrides])
    spent: dict[str, float] = {}
    hooks: list[tuple[object, str, str]] = [
        (datamodule, "load_local_split", "read"), (datamodule, "prepare_split", "validate"),
        (datamodule, "drop_rows", "drop"), (datamodule.TextDataModule, "_tokenize", "tokenise"),
        (datamodule, "count_tokens", "vocabulary"), (datamodule.TextDataModule, "_index", "index")]
    born = psutil.Process().create_time()  # the process's start: its imports count
    imported = time.time() - born
    begin, cpu = time.perf_counter(), _cpu_seconds()
    with _stack(hooks, spent):
        dm = build_datamodule(cfg.data)
    stage, stage_cpu = time.perf_counter() - begin, _cpu_seconds() - cpu
    spent["validate + drop no-gold"] = spent.pop("validate", 0.0) + spent.pop("drop", 0.0)
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"stage_s": stage, "stage_cpu_s": stage_cpu, "process_cpu_s": _cpu_seconds(),
            "process_s": time.time() - born,
            "imports_s": imported, "parts": spent, "rss_mb": own, "worker_rss_mb": workers,
            "sizes": {s: len(ds) for s, ds in dm.splits.items()}, "vocab": len(dm.vocab),
            "no_gold": {k.split("/")[0]: v for k, v in dm.stats.items()
                        if k.endswith("/no_gold")},
            "num_proc": dm.hparams.num_proc, "cores": sorted(os.sched_getaffinity(0))}


def _cpu_seconds() -> float:
    """CPU time of this process and its finished children (``datasets.map`` workers): on a
    busy machine, about what an idle core would take."""
    own, workers = (resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                         resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + workers.ru_utime + workers.ru_stime


@contextmanager
def _stack(hooks: list[tuple[object, str, str]], spent: dict[str, float]) -> Iterator[None]:
    if not hooks:
        yield
        return
    owner, name, stage = hooks[0]
    with _timed(owner, name, stage, spent), _stack(hooks[1:], spent):
        yield


def child(args: argparse.Namespace) -> None:
    """``--start``: one start of the data stage on core ``--core`` (pinned before torch and
    ``datasets`` are imported; ``datasets.map`` workers inherit the pin), its figures as one
    JSON line on stdout."""
    os.sched_setaffinity(0, {args.core})
    print(json.dumps(start(json.loads(args.start), args.cache, args.override)))


def run_start(files: dict[str, str], cache: Path, core: int, overrides: list[str]
              ) -> dict[str, object]:
    """One start in a fresh Python process pinned to ``core`` (its workers inherit the pin)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "WANDB_MODE": "offline",
           "HF_DATASETS_DISABLE_PROGRESS_BARS": "1", "PYTHONPATH": str(REPO / "src")}
    command = [sys.executable, __file__, "--start", json.dumps(files), "--cache", str(cache),
               "--core", str(core), *(x for o in overrides for x in ("--override", o))]
    wall = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - wall
    if done.returncode != 0:
        raise SystemExit(f"the data stage failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["wall_s"] = wall  # the whole process: the interpreter's start to its exit
    return result


# --- the report --------------------------------------------------------------------------
def report(results: list[dict], sizes: dict[str, tuple[int, int]], source: str,
           loads: list[tuple[float, float, float]], corpus_s: float, files: dict[str, str],
           overrides: list[str]) -> None:
    first, second = results
    train_pairs, no_gold = sizes["train"]
    mb = sum(Path(f).stat().st_size for f in files.values()) / 2**20
    print(f"corpus: train {train_pairs:,} pairs ({no_gold:,} with label -1), validation "
          f"{sizes['validation'][0]:,}, test {sizes['test'][0]:,}; {mb:,.0f} MB of JSON Lines; "
          f"lengths: {source}; written in {corpus_s:.1f} s")
    print(f"kept after the no-gold drop: {first['sizes']}; dropped {first['no_gold']}; "
          f"vocabulary {first['vocab']:,}")
    print(f"one core: {first['cores']} ({cpu_name()}), OMP_NUM_THREADS=1, data.num_proc="
          f"{first['num_proc']}{' ' + ' '.join(overrides) if overrides else ''}")
    print()
    print(f"{'start':<8} {'data stage (CPU)':>17} {'process (CPU)':>16} {'imports':>9} "
          f"{'peak RSS':>10} {'worker RSS':>11}")
    for name, r in (("first", first), ("second", second)):
        print(f"{name:<8} {r['stage_s']:>6.1f} s ({r['stage_cpu_s']:>5.1f} s) "
              f"{r['wall_s']:>5.1f} s ({r['process_cpu_s']:>5.1f} s) {r['imports_s']:>7.1f} s "
              f"{r['rss_mb']:>7,.0f} MB {r['worker_rss_mb']:>8,.0f} MB")
    print()
    print("first start, where the data stage's time goes:")
    parts = first["parts"]
    for stage in STAGES:
        print(f"  {stage:<26} {parts.get(stage, 0.0):>6.1f} s")
    other = first["stage_s"] - sum(parts.get(s, 0.0) for s in STAGES)
    print(f"  {'other (lengths, logging)':<26} {other:>6.1f} s")
    print()
    print("load average (1, 5, 15 min) before, between and after the starts: "
          + "; ".join(", ".join(f"{v:.2f}" for v in load) for load in loads)
          + f" on {os.cpu_count()} cores")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths-from", metavar="PATH",
                        help="an SNLI file whose pairs' token counts are drawn (default: a "
                             "synthetic distribution with SNLI's means)")
    parser.add_argument("--tiny", action="store_true",
                        help="3,000 / 300 / 300 pairs instead of SNLI's sizes (a smoke test)")
    parser.add_argument("--pairs", type=int, help="training pairs (default: SNLI's 550,152)")
    parser.add_argument("--out", help="keep the corpus and cache in this folder (default: a "
                                      "temporary one, removed)")
    parser.add_argument("--core", type=int, help="the core to pin to (default: the last one "
                                                 "this process may use)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--override", action="append", default=[],
                        help="a further Hydra override of the data stage (e.g. "
                             "data.num_proc=1); repeatable")
    parser.add_argument("--start", help=argparse.SUPPRESS)
    parser.add_argument("--cache", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.start:
        child(args)
        return
    sizes = dict(TINY if args.tiny else SNLI)
    if args.pairs:
        sizes["train"] = (args.pairs, round(args.pairs * 785 / 550_152))
    core = args.core if args.core is not None else max(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.out or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        began = time.perf_counter()
        files = write_corpus(folder, sizes, args.lengths_from, args.seed)
        corpus_s = time.perf_counter() - began
        cache = folder / "hf-cache"
        loads, results = [os.getloadavg()], []
        for _ in range(2):
            results.append(run_start(files, cache, core, args.override))
            loads.append(os.getloadavg())
        source = args.lengths_from or "synthetic (premise 14.1, hypothesis 8.3 tokens on average)"
        report(results, sizes, source, loads, corpus_s, files, args.override)

if __name__ == "__main__":
    main()
