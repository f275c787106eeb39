import numpy as np
import pytest
import torch

from entailment_lab.data.text import Vocabulary
from entailment_lab.embeddings import glove_6b_50d, glove_file, random_embeddings
from entailment_lab.errors import ConfigError, DataError

VOCAB = Vocabulary(["<pad>", "<unk>", "cat", "Dog", "quokkaqq", "new york"])


def write_glove(path, rows):
    path.write_text("".join(f"{w} {' '.join(str(x) for x in v)}\n" for w, v in rows))
    return path


def test_glove_text_file_lookup_oov_padding_and_cache(tmp_path):
    path = write_glove(tmp_path / "g.txt", [("cat", [1, 2, 3]), ("dog", [4, 5, 6]),
                                            ("new york", [7, 8, 9]), ("the", [0, 0, 1])])
    emb = glove_file(VOCAB, str(path), dim=3, cache_dir=str(tmp_path / "cache"), oov_range=0.05)
    w = emb.weight
    assert torch.equal(w[0], torch.zeros(3))                      # padding row zero
    assert w[2].tolist() == [1, 2, 3] and w[3].tolist() == [4, 5, 6]  # lower-case fallback
    assert w[5].tolist() == [7, 8, 9]                              # a token with a space
    assert w[4].abs().max() <= 0.05 and w[4].abs().sum() > 0       # OOV: U[-0.05, 0.05]
    assert not w.requires_grad                                     # frozen by default
    assert emb.stats["found"] == 3 and emb.stats["oov_rate"] == pytest.approx(0.25)
    assert len(list((tmp_path / "cache").glob("*.npz"))) == 1
    path.unlink()  # the cache is keyed on the file, so a missing file is still an error...
    with pytest.raises(ConfigError, match="embeddings.path"):
        glove_file(VOCAB, str(path), dim=3, cache_dir=str(tmp_path / "cache"))


def test_glove_file_wrong_dimension_is_reported(tmp_path):
    path = write_glove(tmp_path / "g.txt", [("cat", [1, 2, 3])])
    with pytest.raises(DataError, match=r"line 1: expected a word and 5 numbers.*embeddings\.dim"):
        glove_file(VOCAB, str(path), dim=5)


def test_glove_6b_50d_package_gives_real_vectors():
    emb = glove_6b_50d(Vocabulary(["<pad>", "<unk>", "cat", "dog", "xqzzyq"]))
    assert emb.embedding_dim == 50 and emb.stats["found"] == 2
    cat, dog = emb.weight[2], emb.weight[3]
    assert torch.cosine_similarity(cat, dog, dim=0) > 0.6  # real GloVe: cat ~ dog


def test_random_embeddings_are_trainable_and_seeded():
    a = random_embeddings(VOCAB, dim=4, seed=1)
    b = random_embeddings(VOCAB, dim=4, seed=1)
    assert a.weight.requires_grad and torch.equal(a.weight, b.weight)
    assert np.allclose(a.weight[0].detach().numpy(), 0)
