"""Lexicalized classifier (Bowman et al. 2015 §3.2): features by hand, hashing, padding, the
pipeline's run of it. Shapes, gradients, over-fitting and save/load: test_model_harness."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf
from torch import nn

from entailment_lab.data.batching import pad_ids
from entailment_lab.data.text import Vocabulary, tokenize
from entailment_lab.errors import ConfigError
from entailment_lab.models.common import count_trainable_parameters
from entailment_lab.models.lexical import (
    DENSE_FEATURE_NAMES,
    LexicalClassifier,
    bleu_score,
    dense_features,
    hash_ids,
)
from entailment_lab.pipeline import evaluate, train
from tests.conftest import FAST, compose_cfg, file_overrides, pad_with_noise, random_sentences

VOCAB = 40
HARNESS_OVERRIDES = ["model.net.num_buckets=4096"]
CONFIG = Path(__file__).resolve().parents[3] / "conf" / "model" / "lexical.yaml"

pytestmark = pytest.mark.usefixtures("one_thread")


def embedding() -> nn.Embedding:
    return nn.Embedding(VOCAB, 8, padding_idx=0)


def pad_batch(sentences: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    return pad_with_noise(sentences, VOCAB)


def encode(vocab: Vocabulary, sentences: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    return pad_ids([vocab.encode(tokenize(s)) for s in sentences])


def test_dense_features_of_a_hand_made_pair():
    vocab = Vocabulary(["<pad>", "<unk>", "a", "man", "plays", "guitar", "music"])
    p_ids, p_mask = encode(vocab, ["a man plays a guitar"])
    h_ids, h_mask = encode(vocab, ["a man plays music"])
    # Hypothesis n-grams against the premise (clipped matches / hypothesis n-grams):
    #   n=1: a, man, plays match; music does not          p1 = 3/4
    #   n=2: "a man", "man plays" match; "plays music" no  p2 = (2+1)/(3+1) = 3/4   (add-one)
    #   n=3: "a man plays" matches; "man plays music" no   p3 = (1+1)/(2+1) = 2/3
    #   n=4: "a man plays music" does not match            p4 = (0+1)/(1+1) = 1/2
    #   brevity penalty, c = 4 < r = 5:  BP = exp(1 - 5/4) = exp(-0.25) = 0.77880
    #   BLEU = BP * (3/4 * 3/4 * 2/3 * 1/2) ** (1/4) = 0.77880 * (3/16) ** 0.25
    #        = 0.77880 * 0.65804 = 0.51248
    bleu = math.exp(-0.25) * (3 / 16) ** 0.25
    assert bleu == pytest.approx(0.51248, abs=1e-5)
    features = dense_features(p_ids, p_mask, h_ids, h_mask)
    assert DENSE_FEATURE_NAMES == ("bleu", "length_difference", "overlap_count",
                                   "overlap_fraction")
    # length difference 4 - 5 = -1; overlap: a, man, plays = 3 of 4 hypothesis tokens.
    torch.testing.assert_close(features, torch.tensor([[bleu, -1.0, 3.0, 0.75]]))

    model = LexicalClassifier(embedding(), num_classes=3)
    out = model(p_ids, p_mask, h_ids, h_mask, return_details=True)
    torch.testing.assert_close(out["dense_features"], features)
    # Hashed: 3 buckets + 4 unigrams + 3 bigrams + 1 new word ("music") + 16 distinct cross
    # unigrams (5 x 4, "a" twice in the premise) + 4 x 3 cross bigrams = 39.
    assert out["num_hashed_features"].tolist() == [39]


def reference_bleu(candidate: list[int], reference: list[int], max_n: int = 4) -> float:
    """Plain-Python sentence BLEU with the model's smoothing (add-one for n > 1)."""
    log_p = 0.0
    for n in range(1, max_n + 1):
        c = Counter(tuple(candidate[i:i + n]) for i in range(len(candidate) - n + 1))
        r = Counter(tuple(reference[i:i + n]) for i in range(len(reference) - n + 1))
        matches, total = sum(min(k, r[g]) for g, k in c.items()), sum(c.values())
        if n == 1 and matches == 0:
            return 0.0
        log_p += math.log(matches / total if n == 1 else (matches + 1) / (total + 1))
    brevity = min(0.0, 1.0 - len(reference) / len(candidate))
    return math.exp(brevity + log_p / max_n)


def test_bleu_matches_a_plain_python_reference():
    torch.manual_seed(0)
    # Few word types, so n-grams repeat and clipping matters; lengths 1..9 (shorter than n too).
    cands = [torch.randint(2, 6, (int(n),)) for n in torch.randint(1, 10, (40,))]
    refs = [torch.randint(2, 6, (int(n),)) for n in torch.randint(1, 10, (40,))]
    refs[0] = cands[0]  # identical sentences: BLEU 1
    got = bleu_score(*pad_batch(cands), *pad_batch(refs))
    pairs = zip(cands, refs, strict=True)
    want = torch.tensor([reference_bleu(c.tolist(), r.tolist()) for c, r in pairs])
    torch.testing.assert_close(got, want)
    assert (want == 0).any() and (want == 1).any() and ((want > 0) & (want < 1)).any()
    # Clipping: "a a a" against "a man": p1 = 1/3 (not 3/3), p2 = (0+1)/(2+1), p3 = (0+1)/(1+1),
    # p4 = (0+1)/(0+1) (no 4-gram), BP = 1 (3 > 2): BLEU = (1/3 * 1/3 * 1/2 * 1) ** (1/4).
    one = torch.ones(1, 3, dtype=torch.bool)
    clipped = bleu_score(torch.tensor([[2, 2, 2]]), one, torch.tensor([[2, 3]]), one[:, :2])
    assert clipped.item() == pytest.approx((1 / 18) ** 0.25)


def test_identical_pairs_give_identical_feature_ids_whatever_the_padding():
    torch.manual_seed(1)
    model = LexicalClassifier(embedding(), num_classes=3, num_buckets=4096)
    premise, hypothesis = torch.randint(1, VOCAB, (7,)), torch.randint(1, VOCAB, (4,))
    p_ids, p_mask = pad_batch([premise, torch.randint(1, VOCAB, (15,)), premise])
    h_ids, h_mask = pad_batch([hypothesis, torch.randint(1, VOCAB, (6,)), hypothesis])
    # Row 2: the same pair with padding in front and in the middle (masks need not be a
    # prefix); padded slots hold real ids, so only the masks hide them.
    p_ids[2, 8:], p_mask[2] = premise, torch.arange(15) >= 8
    h_ids[2, [0, 2, 3, 4]], h_mask[2] = hypothesis, torch.tensor([1, 0, 1, 1, 1, 0]).bool()
    ids, valid = model.feature_ids(p_ids, p_mask, h_ids, h_mask)
    first, third = ids[0][valid[0]], ids[2][valid[2]]
    assert torch.equal(first, third)
    assert len(first) == len(set(first.tolist()))  # binary: each id once
    assert ((ids >= 0) & (ids < 4096)).all()
    assert not torch.equal(first, ids[1][valid[1]])
    # Families are salted: the same ids in another family land elsewhere.
    x = torch.arange(2, 200)
    assert (hash_ids(4, x, num_buckets=2**20) != hash_ids(6, x, num_buckets=2**20)).all()


@pytest.mark.parametrize("pairs", ["all", "same_second"])
def test_padding_does_not_change_logits(pairs):
    torch.manual_seed(2)
    model = LexicalClassifier(embedding(), num_classes=3, num_buckets=4096,
                              cross_bigram_pairs=pairs, premise_unigrams=True)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_()
    premise, hypothesis = torch.randint(1, VOCAB, (5,)), torch.randint(1, VOCAB, (4,))
    alone = model(*pad_batch([premise]), *pad_batch([hypothesis]), return_details=True)
    others_p = random_sentences((14, 9), VOCAB)
    others_h = random_sentences((7, 12), VOCAB)
    batch = model(*pad_batch([premise, *others_p]), *pad_batch([hypothesis, *others_h]),
                  return_details=True)
    torch.testing.assert_close(batch["logits"][0:1], alone["logits"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(batch["dense_features"][0:1], alone["dense_features"])
    assert batch["num_hashed_features"][0] == alone["num_hashed_features"][0]


def test_cross_bigram_restriction_keeps_pairs_with_equal_second_words():
    p = torch.tensor([[2, 3, 4, 5]])  # bigrams (2,3) (3,4) (4,5)
    h = torch.tensor([[6, 3, 7, 5]])  # bigrams (6,3) (3,7) (7,5): second words 3 and 5 shared
    mask = torch.ones(1, 4, dtype=torch.bool)
    only = {"new_words": False, "hypothesis_unigrams": False, "hypothesis_bigrams": False,
            "cross_unigrams": False, "bleu": False, "length_difference": False,
            "overlap": False}
    every = LexicalClassifier(embedding(), 3, cross_bigram_pairs="all", **only)
    same = LexicalClassifier(embedding(), 3, cross_bigram_pairs="same_second", **only)
    assert every.feature_ids(p, mask, h, mask)[1].sum() == 9
    assert same.feature_ids(p, mask, h, mask)[1].sum() == 2  # (2,3)~(6,3), (4,5)~(7,5)


def test_gradients_reach_bag_linear_and_bias():
    torch.manual_seed(3)
    model = LexicalClassifier(embedding(), num_classes=3, num_buckets=4096)
    p_ids, p_mask = pad_batch(random_sentences((13, 6, 9), VOCAB))
    h_ids, h_mask = pad_batch(random_sentences((4, 12, 7), VOCAB))
    logits = model(p_ids, p_mask, h_ids, h_mask)["logits"]
    nn.functional.cross_entropy(logits, torch.tensor([0, 1, 2])).backward()
    names = {name for name, _ in model.named_parameters()}
    assert names == {"bag.weight", "dense.weight", "bias"}  # the word embedding is not kept
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name
    # Only the buckets of the batch's features get a gradient.
    touched = (model.bag.weight.grad.abs().sum(1) > 0).sum()
    ids, valid = model.feature_ids(p_ids, p_mask, h_ids, h_mask)
    assert touched <= ids[valid].unique().numel()


def test_parameter_count_formula():
    model = LexicalClassifier(embedding(), num_classes=3)
    assert count_trainable_parameters(model, exclude=embedding()) == 2**20 * 3 + 4 * 3 + 3
    small = LexicalClassifier(embedding(), num_classes=3, num_buckets=1000, bleu=False)
    assert count_trainable_parameters(small) == 1000 * 3 + 3 * 3 + 3


def test_config_builds_the_model():
    # Composition with train.yaml is covered by test_configs (every conf/model option).
    cfg = OmegaConf.load(CONFIG)
    assert cfg.name == "lexical" and cfg.default_dim is None
    LexicalClassifier.validate_config(**{k: v for k, v in cfg.net.items() if k != "_target_"})
    cfg.net.num_buckets = 1024
    net = instantiate(cfg.net, embedding=embedding(), num_classes=3, _convert_="all")
    assert isinstance(net, LexicalClassifier) and net.bag.weight.shape == (1024, 3)
    defaults = LexicalClassifier(embedding(), num_classes=3, num_buckets=1024)
    assert (net.families, net.dense_names) == (defaults.families, defaults.dense_names)
    ids, mask = pad_batch(random_sentences((3, 5), VOCAB))
    assert net(ids, mask, ids, mask)["logits"].shape == (2, 3)


@pytest.mark.parametrize(
    "kwargs",
    [{"num_buckets": 0}, {"num_buckets": 2**31}, {"cross_bigram_pairs": "same_pos"},
     {"bleu_max_n": 0}, {"max_length_difference": -1}, {"overlap_fraction_bins": 0},
     {"bleu": False, "length_difference": False, "overlap": False, "new_words": False,
      "hypothesis_unigrams": False, "hypothesis_bigrams": False, "cross_unigrams": False,
      "cross_bigrams": False}],
)
def test_bad_config_raises_config_error(kwargs):
    with pytest.raises(ConfigError):
        LexicalClassifier(embedding(), num_classes=3, **kwargs)
    with pytest.raises(ConfigError):
        LexicalClassifier.validate_config(**kwargs)


def test_l2_penalty_is_sklearns_objective():
    """regularization_loss = l2/2 · ‖W‖² over the weights, never the bias (sklearn's C)."""
    net = LexicalClassifier(embedding(), num_classes=3, num_buckets=64, l2=0.5)
    assert net.regularization_loss().item() == 0.0  # all weights start at zero
    with torch.no_grad():
        net.bag.weight.fill_(1.0)
        net.dense.weight.fill_(2.0)
        net.bias.fill_(100.0)
    expected = 0.5 * 0.5 * (64 * 3 * 1.0 + net.dense.weight.numel() * 4.0)
    assert net.regularization_loss().item() == pytest.approx(expected)
    with pytest.raises(ConfigError, match="l2"):
        LexicalClassifier(embedding(), num_classes=3, num_buckets=64, l2=-1.0)


def test_lexical_model_trains_and_evaluates(pair_files, tmp_path):
    """The lexical floor runs through the same pipeline as every neural model: checkpoint,
    eval-mode train accuracy, results.json with the recipe's budget, and eval.py from the
    checkpoint alone."""
    cfg = compose_cfg(["model=lexical", "model.net.num_buckets=4096", *FAST,
                       *file_overrides(pair_files), "trainer.max_epochs=3"], tmp_path)
    metrics = train(cfg)
    assert 0.0 <= metrics["train/acc_eval"] <= 1.0 and 0.0 <= metrics["test/acc"] <= 1.0
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["budget"] == {"max_epochs": 3, "configured_max_epochs": 1}  # the recipe's
    best = results["best_checkpoint"]
    evaluated = evaluate(compose_cfg([f"ckpt_path={best}", "split=test",
                                      "trainer.enable_model_summary=false"], tmp_path / "eval",
                                     config_name="eval"))
    assert evaluated["test/acc"] == pytest.approx(metrics["test/acc"])


def test_features_in_chunks_and_the_training_memo_change_nothing():
    torch.manual_seed(5)
    model = LexicalClassifier(embedding(), num_classes=3, num_buckets=4096, feature_chunk=1024)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_()
    p_ids, p_mask = pad_batch(random_sentences((3, 14, 6, 9, 2), VOCAB))
    h_ids, h_mask = pad_batch(random_sentences((4, 2, 12, 7, 5), VOCAB))
    whole = model(p_ids, p_mask, h_ids, h_mask)["logits"]
    model.feature_chunk = 2  # chunks of 2 pairs, each cut to its own longest sentences
    torch.testing.assert_close(model(p_ids, p_mask, h_ids, h_mask)["logits"], whole)
    model.train()
    first = model(p_ids, p_mask, h_ids, h_mask)["logits"]
    assert model._memo is not None  # kept for L-BFGS's next evaluation of this batch
    torch.testing.assert_close(model(p_ids, p_mask, h_ids, h_mask)["logits"], first)
    other = h_ids.clone()
    other[:, 0] = (other[:, 0] % (VOCAB - 2)) + 1  # other tensors: features computed again
    assert not torch.equal(model(p_ids, p_mask, other, h_mask)["logits"], first)
    model.eval()
    model(p_ids, p_mask, h_ids, h_mask)
    assert model._memo is None  # evaluation keeps nothing


def noisy_pairs(n: int, seed: int) -> list[dict]:
    """Pairs from 40 words whose label follows overlap and a negation word, 25 % flipped: a
    task a lexical classifier learns, but not perfectly (so accuracies can differ)."""
    rng = torch.Generator().manual_seed(seed)
    words = [f"w{i}" for i in range(40)]

    def pick(k: int) -> list[str]:
        return [words[int(i)] for i in torch.randint(0, len(words), (k,), generator=rng)]

    rows = []
    for _ in range(n):
        premise = pick(int(torch.randint(5, 10, (1,), generator=rng)))
        label = int(torch.randint(0, 3, (1,), generator=rng))
        kept = [premise[int(i)] for i in torch.randint(0, len(premise), (3,), generator=rng)]
        hypothesis = {0: kept + pick(1), 1: kept[:1] + pick(3), 2: kept[:2] + ["not"] + pick(1)}
        text = " ".join(hypothesis[label])
        if float(torch.rand(1, generator=rng)) < 0.25:  # the gold label, drawn again
            label = int(torch.randint(0, 3, (1,), generator=rng))
        rows.append({"premise": " ".join(premise), "hypothesis": text, "label": label})
    return rows


def test_convex_recipe_reaches_sklearns_optimum(tmp_path):
    """``model=lexical`` through the real pipeline (full-batch L-BFGS, one epoch) against
    scikit-learn's LogisticRegression fit on the same feature matrix with the same L2:
    test accuracies within 0.3 points, objectives within 1e-5 (relative)."""
    sklearn = pytest.importorskip("sklearn.linear_model")
    import numpy as np
    from scipy import sparse
    from scipy.special import logsumexp
    from torch.utils.data import DataLoader

    from entailment_lab.data.batching import PadCollator
    from entailment_lab.data.demo import write_jsonl
    from entailment_lab.pipeline import build_datamodule

    files = {split: str(write_jsonl(noisy_pairs(n, seed), tmp_path / "data" / f"{split}.jsonl"))
             for split, n, seed in (("train", 400, 1), ("validation", 100, 2), ("test", 400, 3))}
    l2, buckets = 1e-2, 1024
    fast = [o for o in FAST if not o.startswith("data.batch_size")]
    cfg = compose_cfg(["model=lexical", f"model.net.num_buckets={buckets}", f"model.net.l2={l2}",
                       *fast, *(f"data.files.{s}={p}" for s, p in files.items())],
                      tmp_path / "run")
    assert cfg.optimizer._target_ == "torch.optim.LBFGS" and cfg.trainer.max_epochs == 1
    metrics = train(cfg)
    best = torch.load(next((tmp_path / "run" / "checkpoints").glob("epoch_*.ckpt")),
                      weights_only=True)["state_dict"]

    # The same feature matrix: the run's vocabulary (rebuilt from the same files) and features.
    datamodule = build_datamodule(cfg.data)
    net = instantiate(cfg.model.net, embedding=embedding(), num_classes=3, _convert_="all").eval()
    net.load_state_dict({k.removeprefix("net."): v for k, v in best.items()
                         if k.startswith("net.")})
    W, b = net.weights()  # (3, buckets + n_dense), (3,)

    def features(split: str) -> tuple[sparse.csr_matrix, np.ndarray]:
        loader = DataLoader(datamodule.splits[split], batch_size=10_000,
                            collate_fn=PadCollator(datamodule.keys))
        return net.feature_matrix([next(iter(loader))])

    (x_train, y_train), (x_test, y_test) = features("train"), features("test")
    ours_test = np.mean(np.argmax(x_test @ W.T + b, axis=1) == y_test)
    assert ours_test == pytest.approx(metrics["test/acc"], abs=1e-6)  # the matrix is the run's

    n = x_train.shape[0]
    reference = sklearn.LogisticRegression(C=1.0 / (l2 * n), solver="lbfgs", tol=1e-10,
                                           max_iter=10_000).fit(x_train, y_train)

    def objective(weights: np.ndarray, bias: np.ndarray) -> float:
        """Mean cross-entropy + l2/2 · ‖W‖² (bias not penalised): sklearn's, divided by C·N."""
        z = x_train @ weights.T + bias  # (N, 3)
        loss = logsumexp(z, axis=1) - z[np.arange(n), y_train]
        return float(loss.mean() + 0.5 * l2 * np.square(weights).sum())

    ours, theirs = objective(W, b), objective(reference.coef_, reference.intercept_)
    assert theirs <= ours <= theirs * (1 + 1e-5), (ours, theirs)
    assert 0.5 < reference.score(x_test, y_test) < 0.99  # a task where accuracies can differ
    assert abs(100 * ours_test - 100 * reference.score(x_test, y_test)) <= 0.3, (
        ours_test, reference.score(x_test, y_test))
