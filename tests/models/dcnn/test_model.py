"""DCNN: the pooling/folding/k-schedule pieces against references, counts, k per sample, init,
L2, config values. Shapes, padding, gradients, over-fitting and save/load: test_model_harness."""

from __future__ import annotations

import copy
from functools import partial

import pytest
import torch
from torch import nn

from entailment_lab.errors import ConfigError
from entailment_lab.models.common import count_trainable_parameters
from entailment_lab.models.dcnn import (
    DCNNClassifier,
    DCNNEncoder,
    DCNNLayer,
    DCNNPairClassifier,
    dynamic_k,
    k_max_pooling,
    wide_convolution_mask,
)
from entailment_lab.module import ClassifierModule
from tests.conftest import pad_with_noise, random_sentences
from tests.models.dcnn.reference import (
    fold,
    reference_k_max_pooling,
    reference_layer,
    reference_wide_mask,
)

VOCAB = 60


pytestmark = pytest.mark.usefixtures("one_thread")


def pad_batch(sentences: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    return pad_with_noise(sentences, VOCAB)


def random_batch(lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Random sentences of these lengths, padded (with noise)."""
    return pad_batch(random_sentences(lengths, VOCAB))


def dcnn(pair: bool = False, d_emb: int = 48, **kwargs) -> DCNNClassifier | DCNNPairClassifier:
    """The pair or the sentence DCNN over a new ``VOCAB x d_emb`` word embedding."""
    model = DCNNPairClassifier if pair else DCNNClassifier
    return model(nn.Embedding(VOCAB, d_emb, padding_idx=0), **kwargs)


# --- the pieces -------------------------------------------------------------------------------


def test_dynamic_k_matches_the_papers_example():
    # Sec. 3.3: three convolutional layers, k_top = 3, s = 18 -> k_1 = 12, k_2 = 6, k_3 = 3.
    assert [dynamic_k(layer, 3, 18, 3) for layer in (1, 2, 3)] == [12, 6, 3]
    assert dynamic_k(1, 2, 7, 4) == 4  # ceil(3.5) = 4
    assert dynamic_k(1, 2, 9, 4) == 5  # ceil(4.5) = 5
    lengths = torch.tensor([18, 1, 7])
    assert dynamic_k(1, 3, lengths, 3).tolist() == [12, 3, 5]


def test_k_max_pooling_keeps_the_k_largest_in_original_order():
    x = torch.tensor([[[3.0, 1.0, 5.0, 2.0, 4.0, 0.0], [0.0, 9.0, 1.0, 8.0, 2.0, 7.0]]])
    values, mask = k_max_pooling(x, 3)
    assert values.tolist() == [[[3.0, 5.0, 4.0], [9.0, 8.0, 7.0]]]
    assert mask.tolist() == [[True, True, True]]


def test_k_max_pooling_ignores_padding_and_uses_per_sample_k():
    x = torch.tensor([[1.0, 6.0, 2.0, 9.0, 9.0], [4.0, 3.0, 8.0, 1.0, 5.0]])
    real = torch.tensor([[True, True, True, False, False], [True] * 5])
    values, mask = k_max_pooling(x, torch.tensor([2, 4]), real)
    assert values.tolist() == [[6.0, 2.0, 0.0, 0.0], [4.0, 3.0, 8.0, 5.0]]
    assert mask.tolist() == [[True, True, False, False], [True] * 4]
    # k larger than the real length is clipped; a fixed output length pads with masked zeros.
    values, mask = k_max_pooling(x[:1], 4, real[:1], output_length=6)
    assert values.tolist() == [[1.0, 6.0, 2.0, 0.0, 0.0, 0.0]]
    assert mask.tolist() == [[True, True, True, False, False, False]]


@pytest.mark.parametrize("length", [3, 11, 20, 21, 40])  # both sides of SORT_BELOW
def test_k_max_pooling_matches_the_topk_formulation(length):
    torch.manual_seed(length)
    x = torch.randn(5, 3, 4, length, dtype=torch.float64, requires_grad=True)
    real = torch.arange(length)[None, :] < torch.tensor([length, length - 2, 1, 4, length])[:, None]
    k = torch.tensor([2, 5, 4, 3, length])
    for output_length in (None, length + 2):
        got, got_mask = k_max_pooling(x, k, real, output_length)
        want, want_mask = reference_k_max_pooling(x, k, real, output_length)
        assert torch.equal(got, want) and torch.equal(got_mask, want_mask)
        weights = torch.randn_like(got)
        (grad,) = torch.autograd.grad((got * weights).sum(), x)
        (grad_ref,) = torch.autograd.grad((want * weights).sum(), x)
        assert torch.equal(grad, grad_ref)


def test_folding_sums_adjacent_rows():
    x = torch.arange(24.0).reshape(1, 1, 4, 6)  # (batch, maps, rows, T)
    folded = fold(x)
    assert folded.shape == (1, 1, 2, 6)
    torch.testing.assert_close(folded[0, 0, 0], x[0, 0, 0] + x[0, 0, 1])
    torch.testing.assert_close(folded[0, 0, 1], x[0, 0, 2] + x[0, 0, 3])
    with pytest.raises(ValueError):
        fold(torch.zeros(1, 3, 5))


def test_wide_convolution_mask_matches_convolving_the_mask():
    torch.manual_seed(6)
    mask = torch.rand(7, 12) > 0.4  # any pattern, not only right padding
    mask[:, 0] = True
    for width in (1, 2, 5, 7):
        assert torch.equal(wide_convolution_mask(mask, width), reference_wide_mask(mask, width))


@pytest.mark.parametrize("folding", [False, True])
@pytest.mark.parametrize(("maps_in", "maps_out", "rows", "width"), [(1, 6, 8, 7), (3, 4, 6, 2)])
def test_layer_matches_the_grouped_convolution_formulation(folding, maps_in, maps_out, rows,
                                                           width):
    # The batched-matmul layer (fold inside the matmul) against the first formulation
    # (tests/models/dcnn/reference.py): same outputs, masks and gradients on random input.
    torch.manual_seed(7)
    layer = DCNNLayer(maps_in, maps_out, rows, width, folding)
    nn.init.normal_(layer.bias)
    lengths = torch.tensor([9, 1, 4, 9, 6])
    mask = torch.arange(9)[None, :] < lengths[:, None]
    k = dynamic_k(1, 2, lengths, 3)
    for output_length in (None, 3):
        x = torch.randn(5, maps_in, rows, 9, requires_grad=True)
        out, out_mask = layer(x, mask, k, output_length)
        grads = torch.autograd.grad(out.square().sum(), (x, layer.weight, layer.bias))
        ref, ref_mask = reference_layer(layer, x, mask, k, output_length)
        ref_grads = torch.autograd.grad(ref.square().sum(), (x, layer.weight, layer.bias))
        assert torch.equal(out_mask, ref_mask)
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
        for grad, ref_grad in zip(grads, ref_grads, strict=True):
            torch.testing.assert_close(grad, ref_grad, rtol=1e-4, atol=1e-5)


def test_wide_convolution_has_s_plus_m_minus_1_outputs_and_row_specific_filters():
    torch.manual_seed(0)
    layer = DCNNLayer(maps_in=2, maps_out=3, rows=4, width=5, folding=False)
    x = torch.randn(1, 2, 4, 7)  # s = 7
    mask = torch.ones(1, 7, dtype=torch.bool)
    assert wide_convolution_mask(mask, 5).sum().item() == 7 + 5 - 1
    out, out_mask = layer(x, mask, torch.tensor([11]), None)  # k = s + m - 1: keep everything
    assert out.shape == (1, 3, 4, 11) and out_mask.all()
    # Eq. 1 and 7 by hand: F_j[row] = sum_k m_{j,k,row} (*) F_k[row], wide, then bias and tanh.
    padded = nn.functional.pad(x, (4, 4))
    expected = torch.zeros(3, 4, 11)
    for j in range(3):
        for row in range(4):
            for t in range(11):
                window = padded[0, :, row, t : t + 5]  # s_{t-m+1 : t}, all input maps
                expected[j, row, t] = (layer.weight[:, j, row, :] * window).sum()
    expected = torch.tanh(expected + layer.bias[:, :, None])
    torch.testing.assert_close(out[0], expected.detach(), rtol=1e-5, atol=1e-6)
    # A 4th-order weight tensor: maps_in x maps_out x rows x width, no sharing across rows.
    assert layer.weight.shape == (2, 3, 4, 5)


# --- the models -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("folding", "features", "expected"),
    [
        # conv1 1*6*48*7 + 6*48, conv2 6*14*48*5 + 14*24, output 1344*2 + 2
        ((False, True), 14 * 24 * 4, 25_490),
        # conv1 1*6*48*7 + 6*24, conv2 6*14*24*5 + 14*12, output 672*2 + 2
        ((True, True), 14 * 12 * 4, 13_754),
    ],
)
def test_parameter_count_of_the_paper_configuration(folding, features, expected):
    model = dcnn(num_classes=2, folding=folding)
    assert model.encoder.output_size == features
    assert count_trainable_parameters(model, exclude=model.embedding) == expected


def test_details_report_per_sample_k():
    model = dcnn(num_classes=2).eval()
    ids, mask = random_batch([18, 3])
    out = model(ids, mask, return_details=True)
    # Two layers: k_1 = max(4, ceil(s / 2)), k_2 = k_top = 4.
    assert out["k"].tolist() == [[9, 4], [4, 4]]
    assert out["features"].shape == (2, 14 * 24 * 4)


def test_k_from_the_convolution_length_as_the_port_reads_eq_4():
    # k_length=convolution: s of Eq. 4 is the layer's wide-convolution output, s + m - 1.
    model = dcnn(num_classes=2, k_length="convolution").eval()
    ids, mask = random_batch([18, 3])
    out = model(ids, mask, return_details=True)
    # k_1 = max(4, ceil((s + 7 - 1) / 2)): 12 and 5; the top layer keeps k_top = 4.
    assert out["k"].tolist() == [[12, 4], [5, 4]]


def test_glorot_init_uses_lasagnes_bounds():
    torch.manual_seed(0)
    model = dcnn(num_classes=6, init="glorot")
    # Lasagne GlorotUniform of a (maps_out, maps_in, rows, m) weight:
    # sqrt(6 / ((in + out) * rows * m)).
    for layer, (maps_in, maps_out, rows, m) in zip(
            model.encoder.layers, [(1, 6, 48, 7), (6, 14, 48, 5)], strict=True):
        bound = (6 / ((maps_in + maps_out) * rows * m)) ** 0.5
        assert 0.9 * bound < float(layer.weight.abs().max()) <= bound
    out_bound = (6 / (14 * 24 * 4 + 6)) ** 0.5
    assert 0.9 * out_bound < float(model.output.weight.abs().max()) <= out_bound
    assert not model.output.bias.any()
    fan_in = dcnn(num_classes=6).encoder.layers[0].weight
    assert float(fan_in.abs().max()) > 0.9 / 7**0.5  # the default: U(+-1/sqrt(maps_in * m))


def test_l2_penalties_are_the_per_layer_groups():
    model = dcnn(num_classes=2, l2=(1.0, 2.0, 0.0, 4.0))
    embedding, layers = model.embedding, model.encoder.layers
    groups = [(c, [id(w) for w in ws]) for c, ws in model.l2_penalties()]
    # embedding, conv 1, (conv 2 has 0: no group), output; biases are not penalised
    assert groups == [(1.0, [id(embedding.weight)]), (2.0, [id(layers[0].weight)]),
                      (4.0, [id(model.output.weight)])]
    pair = dcnn(pair=True, num_classes=3, mlp_layers=1)
    mlp = [m.weight for m in pair.classifier.modules() if isinstance(m, nn.Linear)]
    assert [id(w) for w in pair.l2_penalties()[-1][1]] == [id(w) for w in mlp]


@pytest.mark.parametrize("fused", [False, True])
def test_optimiser_weight_decay_equals_the_l2_term_in_the_loss(fused):
    # The module hands l2_penalties() to the optimiser as per-group weight decay: three
    # Adagrad steps land where the penalty in the loss lands (one group, no weight decay).
    torch.manual_seed(8)
    model = dcnn(num_classes=3, dropout=0.0, l2=(0.1, 0.2, 0.0, 0.4))
    twin = copy.deepcopy(model)
    adagrad = partial(torch.optim.Adagrad, lr=0.1, initial_accumulator_value=0.1)
    module = ClassifierModule(net=model, embedding=model.embedding,
                              optimizer=partial(adagrad, weight_decay=0.0, fused=fused),
                              label_names=["a", "b", "c"])
    optimiser, twin_optimiser = module.configure_optimizers(), adagrad(twin.parameters())
    assert sorted(g["weight_decay"] for g in optimiser.param_groups) == [0.0, 0.1, 0.2, 0.4]
    inputs, labels = random_batch([5, 9, 3]), torch.tensor([0, 1, 2])
    for _ in range(3):
        optimiser.zero_grad()
        nn.functional.cross_entropy(model(*inputs)["logits"], labels).backward()
        optimiser.step()
        penalty = sum(0.5 * c * sum(w.pow(2).sum() for w in ws) for c, ws in twin.l2_penalties())
        twin_optimiser.zero_grad()
        (nn.functional.cross_entropy(twin(*inputs)["logits"], labels) + penalty).backward()
        twin_optimiser.step()
    for (name, p), q in zip(model.named_parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=name)
    expected = sum(0.5 * c * sum(w.pow(2).sum() for w in ws) for c, ws in model.l2_penalties())
    torch.testing.assert_close(module.l2_penalty(), expected.detach())


def test_decoupled_weight_decay_is_refused_for_l2_penalties():
    model = dcnn(num_classes=2)
    module = ClassifierModule(net=model, embedding=model.embedding,
                              optimizer=partial(torch.optim.AdamW, lr=1e-3),
                              label_names=["a", "b"])
    with pytest.raises(ConfigError, match="decouples weight decay"):
        module.configure_optimizers()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"filter_widths": (7, 5, 3)},  # lengths disagree
        {"feature_maps": (6, 0)},
        {"filter_widths": (0, 5)},
        {"k_top": 0},
        {"dropout": 1.5},
        {"l2": (1e-4, 1e-4)},  # needs embedding + 2 conv + output
        {"l2": (1e-4, -1.0, 0.0, 0.0)},
        {"k_length": "padded"},
        {"init": "xavier"},
    ],
)
def test_bad_config_raises_config_error(kwargs):
    with pytest.raises(ConfigError):
        dcnn(num_classes=2, **kwargs)


def test_embedding_size_must_survive_folding():
    with pytest.raises(ConfigError, match="divisible by 4"):
        dcnn(pair=True, d_emb=50, num_classes=3, folding=(True, True))
    with pytest.raises(ConfigError, match="divisible by 2"):
        DCNNEncoder(51)
    # Folding only at the top layer (the paper's Fig. 3, the default) accepts 50-d vectors.
    assert DCNNEncoder(50).output_size == 14 * 25 * 4
