"""DIIN (models/diin.py) in pure torch: shapes, masks, features, gradients, penalty, init.
Shapes, padding, gradients, over-fitting and save/load of the config: test_model_harness.

Small configurations (sequence_length 8, two tiny dense blocks) keep the whole file to a few
seconds.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from entailment_lab.errors import ConfigError, DataError
from entailment_lab.models.common import count_trainable_parameters
from entailment_lab.models.diin import (
    DIIN,
    Highway,
    SelfAttentionEncoder,
    build_char_ids,
    build_match_keys,
    exact_match_feature,
    fit_length,
)
from tests.conftest import compose_cfg

VOCAB = [
    "<pad>", "<unk>", "a", "man", "Man", "dog", "runs", "running", "n't", "not", "sleeps",
    "the", "cat", "is", "outside", "extraordinarily", ".",
]  # fmt: skip
IDS = {token: i for i, token in enumerate(VOCAB)}

SMALL = {
    "sequence_length": 8,
    "char_dim": 4,
    "char_filters": 6,
    "char_width": 3,
    "max_word_length": 8,
    "highway_layers": 1,
    "scale_down": 0.5,
    "dense_blocks": 2,
    "dense_layers": 2,
    "growth_rate": 4,
    "transition_rate": 0.5,
}
HARNESS_OVERRIDES = ["data.max_length=8", "model.net.char_filters=8", "model.net.dense_blocks=2",
                     "model.net.dense_layers=2", "model.net.growth_rate=4"]


def small_diin(vocab=VOCAB, emb_dim=10, num_classes=3, **overrides) -> DIIN:
    torch.manual_seed(0)
    embedding = nn.Embedding(len(vocab), emb_dim, padding_idx=0)
    return DIIN(embedding, num_classes, vocab, **{**SMALL, **overrides})


def ids(*tokens: str) -> list[int]:
    return [IDS[t] for t in tokens]


def batch(
    sentences: list[list[int]], length: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded (ids, mask) for a list of id lists."""
    length = length or max(len(s) for s in sentences)
    x = torch.zeros(len(sentences), length, dtype=torch.long)
    for row, s in enumerate(sentences):
        x[row, : len(s)] = torch.tensor(s)
    return x, x != 0


def test_shapes_and_details():
    model = small_diin().eval()
    p, pm = batch([ids("a", "man", "runs"), ids("the", "cat", "is", "outside", ".")])
    h, hm = batch([ids("a", "dog", "sleeps"), ids("a", "cat", "runs")])
    out = model(p, pm, h, hm, return_details=True)
    assert out["logits"].shape == (2, 3)
    assert out["interaction_norm"].shape == (2, 5, 3)
    assert out["premise_attention"].shape == (2, 5, 5)
    assert out["hypothesis_attention"].shape == (2, 3, 3)
    assert out["premise_exact_match"].shape == (2, 5)
    # Padded cells of the interaction image are zero: premise 0 has 3 real tokens.
    assert torch.all(out["interaction_norm"][0, 3:] == 0)
    # Padding columns past sequence_length are fine; the maps are capped at it.
    out = model(*batch([ids("a", "man", "runs")], length=12), h[:1], hm[:1], return_details=True)
    assert out["logits"].shape == (1, 3)
    assert out["interaction_norm"].shape == (1, 8, 3)
    # A real token past it is refused: truncation is the DataModule's (data.max_length).
    long_p, long_pm = batch([ids(*["a"] * 9)])
    with pytest.raises(DataError, match=r"more than 8 tokens.*data\.max_length"):
        model(long_p, long_pm, h[:1], hm[:1])
    with pytest.raises(DataError, match="more than 8 tokens"):
        model(h[:1], hm[:1], long_p, long_pm)


def test_padding_invariance():
    model = small_diin(dropout=0.0).eval()
    p, h = ids("a", "man", "runs"), ids("a", "man", "is", "outside")
    alone = model(*batch([p]), *batch([h]))["logits"]
    longer_p = ids("the", "cat", "is", "outside", "a", "dog", "sleeps")
    longer_h = ids("a", "cat", "sleeps", ".", "the", "dog", "runs", "running")
    # Padded to 7 / 8 tokens (the hypothesis batch fills sequence_length = 8).
    in_batch = model(*batch([longer_p, p]), *batch([longer_h, h]))["logits"][1:]
    torch.testing.assert_close(in_batch, alone, rtol=1e-5, atol=1e-6)
    # Extra all-padding columns beyond the batch's longest sentence change nothing either.
    padded = model(*batch([p], length=6), *batch([h], length=12))["logits"]
    torch.testing.assert_close(padded, alone, rtol=1e-5, atol=1e-6)


def test_exact_match_feature():
    keys = build_match_keys(VOCAB)
    assert keys[IDS["<pad>"]] == -1 and keys[IDS["<unk>"]] == -1
    assert keys[IDS["man"]] == keys[IDS["Man"]]  # case-insensitive
    assert keys[IDS["n't"]] == keys[IDS["not"]]  # official preprocessing reads n't as not
    assert keys[IDS["runs"]] != keys[IDS["running"]]  # no stemming by default

    p, pm = batch([ids("Man", "runs", "<unk>", "n't"), ids("a", "cat")])
    h, hm = batch([ids("a", "man", "<unk>", "not", "running"), ids("cat", "a", "cat")])
    em_p = exact_match_feature(keys[p], pm, keys[h], hm).squeeze(-1)
    em_h = exact_match_feature(keys[h], hm, keys[p], pm).squeeze(-1)
    assert em_p.tolist() == [[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 0.0, 0.0]]
    assert em_h.tolist() == [[0.0, 1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 0.0, 0.0]]
    # A real token never matches the other sentence's padding (pad id 0 has key -1 anyway,
    # but the mask must also hold when a caller pads with a real id).
    h_masked = hm.clone()
    h_masked[0, 1] = False
    assert exact_match_feature(keys[p], pm, keys[h], h_masked)[0, 0, 0] == 0.0


@pytest.mark.skipif(
    importlib.util.find_spec("snowballstemmer") is None, reason="snowballstemmer not installed"
)
def test_exact_match_with_stems():
    keys = build_match_keys(VOCAB, stem=True)
    assert keys[IDS["runs"]] == keys[IDS["running"]]


def test_char_ids_from_vocab():
    char_ids, alphabet = build_char_ids(VOCAB, max_word_length=8)
    assert char_ids.shape == (len(VOCAB), 8)
    assert alphabet == sorted(alphabet) and len(set(alphabet)) == len(alphabet)
    assert "<" not in alphabet  # special tokens contribute no characters
    assert torch.all(char_ids[IDS["<pad>"]] == 0) and torch.all(char_ids[IDS["<unk>"]] == 0)

    def spelled(row: torch.Tensor) -> str:
        return "".join(alphabet[k - 1] for k in row.tolist() if k > 0)

    assert spelled(char_ids[IDS["dog"]]) == "dog"
    assert char_ids[IDS["dog"], 3:].eq(0).all()  # padded with char id 0
    assert spelled(char_ids[IDS["extraordinarily"]]) == "extraord"  # cut at max_word_length
    assert spelled(char_ids[IDS["n't"]]) == "n't"
    model = small_diin()
    assert torch.equal(model.char_ids, char_ids)
    assert model.char_features.embedding.num_embeddings == len(alphabet) + 1


def test_self_attention_and_highway_masks():
    torch.manual_seed(0)
    encoder = SelfAttentionEncoder(6).eval()
    x = torch.randn(2, 5, 6)
    mask = torch.tensor([[True, True, True, False, False], [True] * 5])
    out, attention = encoder(x, mask)
    # The tri-linear score equals w·[a; b; a∘b] written out in full.
    a, b = x[0, 1], x[0, 2]
    full = encoder.w @ torch.cat([a, b, a * b])
    torch.testing.assert_close(encoder.attention_scores(x)[0, 1, 2], full)
    # Zero weight on padded keys, rows of real queries sum to one, padded queries all zero.
    assert torch.all(attention[0, :, 3:] == 0)
    torch.testing.assert_close(attention[0, :3].sum(-1), torch.ones(3))
    assert torch.all(attention[0, 3:] == 0) and torch.all(out[0, 3:] == 0)
    # Changing what sits at padded positions changes nothing at real positions.
    x2 = x.clone()
    x2[0, 3:] = 100 * torch.randn(2, 6)
    out2, _ = encoder(x2, mask)
    torch.testing.assert_close(out2[0, :3], out[0, :3])
    # The highway network is position-wise: a change at one position stays there.
    highway = Highway(6, 2).eval()
    y, y2 = highway(x), highway(x2)
    torch.testing.assert_close(y[0, :3], y2[0, :3])
    torch.testing.assert_close(y[1], y2[1])


def test_gradients_reach_every_trainable_parameter():
    model = small_diin(share_highway=False, dropout=0.1).train()
    p, pm = batch([ids("a", "man", "runs"), ids("the", "cat", "is", "outside", ".")])
    h, hm = batch([ids("a", "man", "sleeps"), ids("a", "cat", "runs", "outside")])
    logits = model(p, pm, h, hm)["logits"]
    loss = F.cross_entropy(logits, torch.tensor([0, 2])) + model.regularization_loss()
    loss.backward()
    assert model.embedding.weight.requires_grad  # train_embeddings=True: the paper fine-tunes
    for name, param in model.named_parameters():
        assert param.requires_grad, name
        assert param.grad is not None and param.grad.abs().sum() > 0, name
    assert model.embedding.weight.grad[0].abs().sum() == 0  # padding row stays zero


def test_recipe_difference_penalty_is_the_official_codes(tmp_path):
    """The official code adds ``1e-3 * tf.nn.l2_loss(W_p - W_h)`` per penalised kernel, and
    ``tf.nn.l2_loss(t) = sum(t**2) / 2``: the recipe's weight must give that exact loss."""
    diff_penalty = compose_cfg(["model=diin"], tmp_path).model.net.diff_penalty
    model = small_diin(diff_penalty=diff_penalty)  # the shared highway: not penalised
    official = 1e-3 * sum(
        (model.encoder_p.get_parameter(n) - model.encoder_h.get_parameter(n)).pow(2).sum() / 2
        for n in ["w", "W1.weight", "W2.weight", "W3.weight"]
    )
    torch.testing.assert_close(model.regularization_loss(), official)


def test_initialisation_is_the_official_codes():
    """TensorFlow draws every variable Glorot-uniform over its own shape. The official fuse gate
    has two (d, d) kernels per gate (bound √(3/d)), where one (d, 2d) Linear would get √(2/d);
    the character conv's bias is a bare variable, Glorot over (filters,), not zero."""
    model = small_diin(emb_dim=40, char_filters=60)
    d = model.hidden_size  # 40 + 60 + 1 exact match
    bound = (3 / d) ** 0.5
    for encoder in (model.encoder_p, model.encoder_h):
        for gate in (encoder.W1, encoder.W2, encoder.W3):
            w = gate.weight.detach()
            assert w.shape == (d, 2 * d)
            assert w.abs().max() <= bound
            assert w.abs().max() > 0.98 * bound  # 2d² draws reach the edge of U(±bound)
            assert abs(w.std().item() / (1 / d) ** 0.5 - 1) < 0.05  # std of U(±√(3/d)) = √(1/d)
            assert (gate.bias == 0).all()
    bias = model.char_features.conv.bias.detach()
    assert (bias != 0).all() and bias.abs().max() <= (6 / (2 * bias.numel())) ** 0.5
    # At this init the encoder-difference penalty is, in expectation, the official
    # 1e-3 · ½ · (3d · 2·Var(w) + 6 kernels · d² · 2·Var(W)) with Var(W) = 1/d.
    var_w = (6 / (3 * d + 1)) / 3
    expected = 1e-3 * 0.5 * (3 * d * 2 * var_w + 6 * d * d * 2 / d)
    penalty = small_diin(emb_dim=40, char_filters=60, diff_penalty=5e-4).regularization_loss()
    assert abs(penalty.item() / expected - 1) < 0.05


def test_regularization_loss():
    model = small_diin(share_highway=False, diff_penalty=1e-3)
    assert model.regularization_loss() > 0
    expected = sum(
        (model.encoder_p.get_parameter(n) - model.encoder_h.get_parameter(n)).pow(2).sum()
        for n in ["w", "W1.weight", "W2.weight", "W3.weight"]
    ) + sum(
        (w_p - w_h).pow(2).sum()
        for (n, w_p), (_, w_h) in zip(
            model.highway_p.named_parameters(), model.highway_h.named_parameters(), strict=True
        )
        if n.endswith("weight")
    )
    torch.testing.assert_close(model.regularization_loss(), 1e-3 * expected)
    model.encoder_h.load_state_dict(model.encoder_p.state_dict())
    model.highway_h.load_state_dict(model.highway_p.state_dict())
    assert model.regularization_loss() == 0
    # Biases are not penalised (official code: kernels only).
    with torch.no_grad():
        model.encoder_h.W1.bias.add_(1.0)
    assert model.regularization_loss() == 0
    # Shared highway: only the self-attention encoders are compared.
    shared = small_diin(share_highway=True)
    shared.encoder_h.load_state_dict(shared.encoder_p.state_dict())
    assert shared.highway_h is None and shared.regularization_loss() == 0


def test_dropout_schedule_and_embedding_freeze():
    model = small_diin(dropout=0.1, dropout_decay_rate=0.5, dropout_decay_steps=2)
    assert model.current_dropout() == pytest.approx(0.1)
    model.set_training_step(2)  # the LightningModule passes the trainer's global step
    assert model.current_dropout() == pytest.approx(1 - 0.9 * 0.5)
    assert "char_ids" not in model.state_dict()  # derived from the vocabulary, not saved
    frozen = small_diin(train_embeddings=False)
    assert not frozen.embedding.weight.requires_grad
    assert count_trainable_parameters(frozen, exclude=frozen.embedding) == sum(
        p.numel() for p in frozen.parameters() if p.requires_grad
    )


def test_parameter_count_against_the_paper():
    """Default config with 300-d words: ~3.7 M; with the paper's 47-d POS width (d=448): ~4.4 M."""
    vocab = ["<pad>", "<unk>"] + [chr(c) + "x" for c in range(ord("!"), ord("~"))]
    default = DIIN(nn.Embedding(len(vocab), 300), 3, vocab, sequence_length=48)  # the recipe's
    assert default.hidden_size == 401
    assert 3.6e6 < count_trainable_parameters(default, exclude=default.embedding) < 3.8e6
    # 347 + 100 + 1 = 448
    paper_width = DIIN(nn.Embedding(len(vocab), 347), 3, vocab, sequence_length=48)
    assert abs(paper_width.paper_parameter_count() - 4.4e6) / 4.4e6 < 0.01


def test_fit_length():
    x = torch.tensor([[3, 4, 5]])
    assert fit_length(x, 5).tolist() == [[3, 4, 5, 0, 0]]
    assert fit_length(x, 2).tolist() == [[3, 4]]
    assert fit_length(x != 0, 4).tolist() == [[True, True, True, False]]


@pytest.mark.parametrize(
    ("overrides", "knob"),
    [
        ({"sequence_length": 3}, r"data\.max_length=3"),
        ({"max_word_length": 2}, "max_word_length"),
        ({"scale_down": 0.0}, "scale_down"),
        ({"transition_rate": 1.5}, "transition_rate"),
        ({"dropout": 1.0}, "dropout"),
        ({"dense_layers": 0}, "dense_layers"),
        ({"diff_penalty": -1.0}, "diff_penalty"),
        ({"transition_rate": 0.01}, "transition_rate"),
    ],
)
def test_bad_config_raises(overrides, knob):
    with pytest.raises(ConfigError, match=knob):
        small_diin(**overrides)


def test_vocab_must_match_embedding():
    with pytest.raises(ConfigError, match="vocab"):
        DIIN(nn.Embedding(len(VOCAB) + 1, 8), 3, VOCAB, **SMALL)


@pytest.mark.skipif(
    importlib.util.find_spec("snowballstemmer") is not None, reason="snowballstemmer installed"
)
def test_stem_match_without_stemmer_is_a_config_error():
    with pytest.raises(ConfigError, match="snowballstemmer"):
        small_diin(exact_match_stem=True)
