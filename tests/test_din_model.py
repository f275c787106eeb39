"""DIN (models/din.py) in pure torch: equations vs a naive reference, masking, counts, overfit."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from din_padded import padded_forward
from din_reference import reference_forward, reference_layers
from entailment_lab.errors import ConfigError
from entailment_lab.models.common import Dropout
from entailment_lab.models.din import DIN, Interaction
from tests.conftest import fits_exactly

VOCAB = 40

# (variant, extra knobs): the three variants with their defaults, then every non-default reading.
CONFIGS = [
    ("din1", {}),
    ("din2", {}),
    ("static", {}),
    ("din1", {"din1_weights": "split", "interaction_init": "hypothesis"}),
    ("din2", {"din2_weights": "row_scale", "din2_input": "word", "fc_activation": "relu"}),
    ("static", {"static_input": "hypothesis_matrix", "fc_activation": "none"}),
]
IDS = [f"{v}-{'-'.join(k.values()) or 'default'}" for v, k in CONFIGS]


def make_model(variant: str, dim: int = 9, d_emb: int = 7, dtype=torch.float64, **knobs) -> DIN:
    embedding = nn.Embedding(VOCAB, d_emb, padding_idx=0)
    embedding.weight.requires_grad_(False)
    model = DIN(embedding, num_classes=3, dim=dim, variant=variant, **knobs).to(dtype)
    return model.eval()


def make_batch(lengths_p: list[int], lengths_h: list[int], seed: int = 0):
    """Right-padded random token ids and bool masks for the given true lengths."""
    gen = torch.Generator().manual_seed(seed)

    def side(lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        mask = torch.arange(max(lengths))[None, :] < torch.tensor(lengths)[:, None]
        ids = torch.randint(1, VOCAB, mask.shape, generator=gen) * mask
        return ids, mask

    return (*side(lengths_p), *side(lengths_h))


@pytest.mark.parametrize(("variant", "knobs"), CONFIGS, ids=IDS)
def test_matches_naive_reference_outputs_and_gradients(variant, knobs):
    torch.manual_seed(0)
    model = make_model(variant, **knobs)
    for p in model.parameters():  # move away from the init so nothing is trivially symmetric
        if p.requires_grad:
            p.data.add_(0.3 * torch.randn_like(p))
    batch = make_batch([5, 2, 4], [3, 4, 1])
    weights = torch.randn(3, 3, dtype=torch.float64)

    fast = model(*batch, return_details=True)
    (fast["logits"] * weights).sum().backward()
    fast_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    model.zero_grad()
    ref = reference_forward(model, *batch)
    (ref["logits"] * weights).sum().backward()

    for key in ("logits", "interaction_norms", "gate_change"):
        torch.testing.assert_close(fast[key], ref[key], rtol=1e-9, atol=1e-10, msg=key)
    for name, p in model.named_parameters():
        if p.requires_grad:
            torch.testing.assert_close(fast_grads[name], p.grad, rtol=1e-9, atol=1e-10, msg=name)


def test_reference_layers_match_interact_and_control():
    """The layer-only reference that benchmarks/bench_din.py times against the fast layers."""
    torch.manual_seed(5)
    model = make_model("din1")
    p, pm, h, hm = make_batch([5, 2, 4], [3, 4, 1], seed=8)
    W_p = torch.randn(3, 5, 3, 3, dtype=torch.float64).tanh() * pm[:, :, None, None]
    W_h = torch.randn(3, 4, 3, 3, dtype=torch.float64).tanh() * hm[:, :, None, None]
    x_h = model.embedding(h)
    fast = model.interact_and_control(W_p, pm, W_h, x_h, hm)[0] * hm[:, :, None]
    torch.testing.assert_close(fast, reference_layers(model, W_p, pm, W_h, x_h, hm))


@pytest.mark.parametrize("variant", ["din1", "din2", "static"])
def test_padded_baseline_matches_outputs_and_gradients(variant):
    """The padded implementation benchmarks/bench_din.py times against computes the same."""
    torch.manual_seed(3)
    model = make_model(variant, dim=16)
    batch = make_batch([5, 2, 4, 5], [3, 4, 1, 4], seed=9)
    weights = torch.randn(4, 3, dtype=torch.float64)
    outputs, grads = [], []
    for forward in (model, lambda *b: padded_forward(model, *b)):
        model.zero_grad()
        logits = forward(*batch)["logits"]
        (logits * weights).sum().backward()
        outputs.append(logits)
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad})
    torch.testing.assert_close(outputs[0], outputs[1], rtol=1e-9, atol=1e-10)
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], rtol=1e-9, atol=1e-10,
                                   msg=name)


@pytest.mark.parametrize("variant", ["din1", "din2", "static"])
def test_padding_does_not_change_a_pair(variant):
    torch.manual_seed(1)
    model = make_model(variant, dim=16, dtype=torch.float32)
    p, pm, h, hm = make_batch([3, 9, 6], [2, 5, 7], seed=3)
    p, pm, h, hm = (nn.functional.pad(x, (0, 2)) for x in (p, pm, h, hm))  # all-padding columns
    with torch.no_grad():
        batched = model(p, pm, h, hm)["logits"][0]
        alone = model(p[:1, :3], pm[:1, :3], h[:1, :2], hm[:1, :2])["logits"][0]
    torch.testing.assert_close(batched, alone, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("variant", "knobs"), CONFIGS, ids=IDS)
def test_gradients_reach_every_trainable_parameter(variant, knobs):
    torch.manual_seed(2)
    model = make_model(variant, dtype=torch.float32, **knobs).train()
    model(*make_batch([4, 6], [3, 5]))["logits"].sum().backward()
    for name, p in model.named_parameters():
        if p.requires_grad:
            assert p.grad is not None and p.grad.abs().sum() > 0, name
    assert model.embedding.weight.grad is None  # frozen word vectors


# Table 2 "Para" (paper convention) and its printed precision.
TABLE2 = [
    ("din1", 256, 497_923, "498k"),
    ("din1", 324, 718_311, "718k"),
    ("din1", 400, 1_008_403, "1.0M"),
    ("din2", 256, 889_603, "889k"),
    ("din2", 324, 1_346_223, "1.3M"),
    ("din2", 400, 1_966_003, "1.9M"),
    ("static", 400, 1_886_403, "1.9M"),
]


def printed_agrees(count: int, printed: str) -> bool:
    """``count`` is within one unit of the last printed digit of ``printed`` (e.g. 1.9M, 498k)."""
    unit = {"k": 1_000, "M": 1_000_000}[printed[-1]]
    number = printed[:-1]
    step = unit * (10 ** -len(number.split(".")[1]) if "." in number else 1)
    return abs(count - float(number) * unit) <= step


@pytest.mark.parametrize(("variant", "dim", "expected", "printed"), TABLE2)
def test_paper_convention_parameter_counts_match_table2(variant, dim, expected, printed):
    embedding = nn.Embedding(50, 300, padding_idx=0)
    embedding.weight.requires_grad_(False)
    model = DIN(embedding, num_classes=3, dim=dim, variant=variant)
    assert model.paper_parameter_count() == expected
    assert printed_agrees(expected, printed)
    # The true count is larger: every GRU with static gates has a third weight block.
    assert model.parameter_count() > expected
    if variant == "din1" and dim == 256:
        assert model.parameter_count() == 640_771  # the literal build (docs/models/din.md)


@pytest.mark.parametrize("dim", [250, 0, -16, 17])
def test_dim_must_be_a_perfect_square(dim):
    with pytest.raises(ConfigError, match=rf"dim={dim} must be a perfect square \(e.g. 256"):
        make_model("din1", dim=dim)


def test_bad_knobs_are_config_errors():
    with pytest.raises(ConfigError, match="variant"):
        make_model("din3")
    with pytest.raises(ConfigError, match="row_scale"):
        make_model("din2", din2_input="word")  # diagonal weight of size d vs a d_emb input


@pytest.mark.parametrize("variant", ["din1", "din2", "static"])
def test_overfits_random_labels(variant):
    torch.manual_seed(4)
    gen = torch.Generator().manual_seed(5)
    lengths_p = torch.randint(2, 9, (24,), generator=gen).tolist()
    lengths_h = torch.randint(1, 6, (24,), generator=gen).tolist()
    batch = make_batch(lengths_p, lengths_h, seed=6)
    labels = torch.randint(0, 3, (24,), generator=gen)
    model = make_model(variant, dim=16, d_emb=16, dtype=torch.float32, dropout=0.0).train()
    assert fits_exactly(model, batch, labels, lr=0.01)


@pytest.mark.parametrize("variant", ["din1", "din2", "static"])
def test_details_shapes_and_ranges(variant):
    model = make_model(variant, dim=16, dtype=torch.float32)
    p, pm, h, hm = make_batch([5, 1, 3], [4, 2, 1], seed=7)
    out = model(p, pm, h, hm, return_details=True)
    norms, change = out["interaction_norms"], out["gate_change"]
    assert out["logits"].shape == (3, 3)
    assert norms.shape == (3, 4, 5) and change.shape == (3, 3, 4)
    for x in (norms, change):
        assert x.min() >= 0 and x.max() <= 1
    real = pm[:, None, :] & hm[:, :, None]
    assert (norms[~real] == 0).all()  # padding, either side
    assert (change.transpose(1, 2)[~hm] == 0).all()
    torch.testing.assert_close(norms[0, :, :5].amax(-1), torch.ones(4))  # min-max per row
    assert (norms[1] == 0).all()  # one-word premise: nothing to normalise
    assert out["premise_mask"] is pm and out["hypothesis_mask"] is hm


def test_cpu_dropout_keeps_the_expectation_and_rate():
    torch.manual_seed(0)
    dropout, x = Dropout(0.2), torch.ones(200_000)
    y = dropout(x)
    assert set(y.unique().tolist()) == {0.0, 1.25}  # dropped, or scaled by 1 / (1 - p)
    assert abs(float((y == 0).float().mean()) - 0.2) < 0.01
    assert abs(float(y.mean()) - 1.0) < 0.01
    dropout.eval()
    assert dropout(x) is x
    x.requires_grad_()
    dropout.train()
    y = dropout(x)
    y.sum().backward()
    torch.testing.assert_close(x.grad, (y != 0).float() * 1.25)  # the kept entries' scale


@pytest.mark.parametrize("init", ["zeros", "hypothesis"])
def test_interaction_backward_passes_gradcheck(init):
    """The interaction's hand-written backward (float32 training) against finite differences."""
    torch.manual_seed(6)
    m, lengths = 3, [4, 2, 3]
    interaction = Interaction(m, init).double()
    pm = torch.arange(4)[None, :] < torch.tensor(lengths)[:, None]
    hm = torch.arange(3)[None, :] < torch.tensor([3, 1, 2])[:, None]
    W_p = torch.randn(3, 4, m, m, dtype=torch.float64, requires_grad=True)
    W_h = torch.randn(3, 3, m, m, dtype=torch.float64, requires_grad=True)

    W_inter = torch.randn(m, m, dtype=torch.float64, requires_grad=True)
    b_inter = torch.randn(m, m, dtype=torch.float64, requires_grad=True)
    del interaction.W_inter, interaction.b_inter  # the parameters become gradcheck's inputs

    def fn(W_p, W_h, W_inter, b_inter):
        interaction.W_inter, interaction.b_inter = W_inter, b_inter
        return interaction(W_p, pm, W_h, hm)[0]

    assert torch.autograd.gradcheck(fn, (W_p, W_h, W_inter, b_inter))
