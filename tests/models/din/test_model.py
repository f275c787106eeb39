"""DIN (models/din.py) in pure torch: equations vs a naive reference, the padded baseline, counts,
details, config values. Shapes, padding, gradients, over-fitting and save/load:
test_model_harness (din1, din2, din1_static, and the non-default readings below)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from entailment_lab.errors import ConfigError
from entailment_lab.models.common import Dropout
from entailment_lab.models.din import DIN, Interaction, MatrixControlGRU, PaperGRU, Words
from entailment_lab.models.kernels import gru_outputs, tanh, tanh_
from tests.models.din.padded import padded_forward
from tests.models.din.reference import reference_forward, reference_layers

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
# The non-default readings through the harness's network checks (each applies to the config
# that has its knobs: din1, din2, din1_static).
HARNESS_VARIANTS = [[f"model.net.{k}={v}" for k, v in knobs.items()] for _, knobs in CONFIGS
                    if knobs]
HARNESS_VARIANTS.append(["model.net.encoder_gru=paper"])  # Eq. 3-6 as printed: all three configs


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
    words = Words.of(hm)  # the layers take transposed matrices, W_h as the words' rows
    rows = model.interact_and_control(W_p.permute(1, 0, 3, 2), pm,
                                      words.gather(W_h).transpose(-1, -2), x_h, words)[0]
    torch.testing.assert_close(words.scatter(rows), reference_layers(model, W_p, pm, W_h, x_h, hm))


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


def test_cpu_tanh_through_the_sigmoid_matches_torch_tanh():
    """``tanh``/``tanh_`` (2σ(2x) − 1 on CPU): torch.tanh's values within about one float32 ulp
    of 1, exact saturation, gradients 1 − tanh², in place only where asked."""
    torch.manual_seed(0)
    x = torch.cat([torch.randn(10_000) * 3, torch.tensor([0.0, -0.0, 50.0, -50.0, 1e-8])])
    exact = torch.tanh(x.double())
    assert float((tanh(x).double() - exact).abs().max()) < 2.5e-7
    assert tanh(torch.tensor([50.0, -50.0, 0.0])).tolist() == [1.0, -1.0, 0.0]
    x64 = x.double()
    torch.testing.assert_close(tanh(x64), exact, rtol=0, atol=1e-15)
    y = x.clone()
    assert tanh_(y) is y
    torch.testing.assert_close(y, tanh(x), rtol=0, atol=0)
    assert tanh(x) is not x
    leaf = x64[:50].clone().requires_grad_()
    assert torch.autograd.gradcheck(tanh, (leaf,))
    (grad,) = torch.autograd.grad(tanh(leaf).sum(), leaf)
    torch.testing.assert_close(grad, 1 - torch.tanh(leaf.detach()) ** 2)
    half = x.bfloat16()
    torch.testing.assert_close(tanh(half), torch.tanh(half), rtol=0, atol=0)  # torch.tanh itself



@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_gru_training_pass_matches_nn_gru(dtype):
    """``gru_outputs`` (the encoder's training pass, hand-written backward) against ``nn.GRU``:
    outputs and the gradients of the input and every parameter; without gradients it is
    ``nn.GRU`` itself."""
    torch.manual_seed(4)
    gru = nn.GRU(5, 7, batch_first=True).to(dtype)
    x = torch.randn(3, 6, 5, dtype=dtype, requires_grad=True)
    weights = torch.randn(3, 6, 7, dtype=dtype)
    results = []
    for run in (lambda: gru(x)[0], lambda: gru_outputs(gru, x)):
        x.grad = None
        gru.zero_grad()
        out = run()
        (out * weights).sum().backward()
        results.append((out.detach(), x.grad, *(p.grad for p in gru.parameters())))
    tol = {"rtol": 1e-12, "atol": 1e-13} if dtype == torch.float64 else {"rtol": 1e-5, "atol": 2e-6}
    for ours, theirs in zip(*results, strict=True):
        torch.testing.assert_close(ours, theirs, **tol)
    with torch.no_grad():
        torch.testing.assert_close(gru_outputs(gru, x), gru(x)[0], rtol=0, atol=0)
    if dtype == torch.float64:
        params = [p.detach().clone().requires_grad_() for p in gru.parameters()]

        def fn(x, *values):
            for name, value in zip(("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"),
                                   values, strict=True):
                delattr(gru, name)
                setattr(gru, name, value)
            return gru_outputs(gru, x)

        assert torch.autograd.gradcheck(fn, (x.detach()[:2, :4].requires_grad_(), *params))

@pytest.mark.parametrize(("variant", "knobs"), CONFIGS, ids=IDS)
def test_float32_model_with_torch_tanh_gives_the_same_outputs(variant, knobs, monkeypatch):
    """The sigmoid-based tanh in a float32 model (training mode's loop and eval): logits and
    gradients as with ``torch.tanh`` everywhere, to float32 rounding."""
    from entailment_lab.models.kernels import elementwise

    torch.manual_seed(3)
    model = make_model(variant, dim=16, d_emb=7, dtype=torch.float32, **knobs)
    model.dropout.p = 0.0  # same outputs in train mode, which runs the hand-written loop
    batch = make_batch([6, 3, 5, 6], [4, 2, 5, 1])

    def run() -> tuple[torch.Tensor, list[torch.Tensor]]:
        model.zero_grad()
        model.train()
        logits = model(*batch)["logits"]
        logits.square().sum().backward()
        model.eval()
        with torch.no_grad():
            torch.testing.assert_close(model(*batch)["logits"], logits.detach(), rtol=0,
                                       atol=1e-6)
        return logits.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]

    logits, grads = run()
    monkeypatch.setattr(elementwise, "sigmoid_tanh_applies", lambda x: False)  # torch.tanh
    exact_logits, exact_grads = run()
    torch.testing.assert_close(logits, exact_logits, rtol=0, atol=2e-6)
    for grad, exact in zip(grads, exact_grads, strict=True):
        torch.testing.assert_close(grad, exact, rtol=1e-4, atol=2e-6)


@pytest.mark.parametrize("init", ["zeros", "hypothesis"])
def test_interaction_backward_passes_gradcheck(init):
    """The interaction's hand-written backward (float32 training) against finite differences."""
    torch.manual_seed(6)
    m, lengths = 3, [4, 2, 3]
    interaction = Interaction(m, init).double()
    pm = torch.arange(4)[None, :] < torch.tensor(lengths)[:, None]
    hm = torch.arange(3)[None, :] < torch.tensor([3, 1, 2])[:, None]
    pair = Words.of(hm).pair  # the 6 words' pairs, not sorted by premise length
    W_p = torch.randn(4, 3, m, m, dtype=torch.float64, requires_grad=True)  # time-major
    W_h = torch.randn(len(pair), m, m, dtype=torch.float64, requires_grad=True)  # the words

    W_inter = torch.randn(m, m, dtype=torch.float64, requires_grad=True)
    b_inter = torch.randn(m, m, dtype=torch.float64, requires_grad=True)
    del interaction.W_inter, interaction.b_inter  # the parameters become gradcheck's inputs

    def fn(W_p, W_h, W_inter, b_inter):
        interaction.W_inter, interaction.b_inter = W_inter, b_inter
        return interaction(W_p, pm, W_h, pair)[0]

    assert torch.autograd.gradcheck(fn, (W_p, W_h, W_inter, b_inter))



@pytest.mark.parametrize("weights", ["shared", "split"])
def test_control_backward_passes_gradcheck(weights):
    """DIN-1's control recurrence with its hand-written backward (training) against finite
    differences: hypotheses of different lengths, so rows leave the loop at different steps."""
    torch.manual_seed(7)
    m = 3
    control = MatrixControlGRU(m, weights).double()
    words = Words.of(torch.arange(4)[None, :] < torch.tensor([4, 1, 3])[:, None])
    W_out = torch.randn(len(words.pair), m, m, dtype=torch.float64, requires_grad=True)
    W_h = torch.randn(len(words.pair), m, m, dtype=torch.float64, requires_grad=True)
    params = {name: p.detach().clone().requires_grad_() for name, p in control.named_parameters()}
    for name in params:
        delattr(control, name)  # the parameters become gradcheck's inputs

    def fn(W_out, W_h, *values):
        for name, value in zip(params, values, strict=True):
            setattr(control, name, value)
        return control(W_out, W_h, words)[0]

    assert torch.autograd.gradcheck(fn, (W_out, W_h, *params.values()))

# encoder_gru="paper": Eq. 3-6 as printed (PaperGRU) for the encoder and row 18's GRU.


@pytest.mark.parametrize("variant", ["din1", "din2"])
def test_paper_gru_matches_the_naive_and_padded_references(variant):
    """The packed PaperGRU (real positions only) equals the same module run on each sentence cut
    to its length (naive reference) and over the padded batch (padded one): outputs, gradients."""
    torch.manual_seed(1)
    model = make_model(variant, dim=16, encoder_gru="paper")
    for p in model.parameters():
        if p.requires_grad:
            p.data.add_(0.3 * torch.randn_like(p))
    batch = make_batch([5, 2, 4, 1], [3, 4, 1, 2], seed=11)
    weights = torch.randn(4, 3, dtype=torch.float64)
    results = []
    for forward in (model, lambda *b: reference_forward(model, *b),
                    lambda *b: padded_forward(model, *b)):
        model.zero_grad()
        logits = forward(*batch)["logits"]
        (logits * weights).sum().backward()
        results.append((logits, {n: p.grad.clone() for n, p in model.named_parameters()
                                 if p.requires_grad}))
    (fast, fast_grads), *references = results
    for logits, grads in references:
        torch.testing.assert_close(fast, logits, rtol=1e-9, atol=1e-10)
        for name, grad in grads.items():
            torch.testing.assert_close(fast_grads[name], grad, rtol=1e-9, atol=1e-10, msg=name)


def test_paper_gru_steps_and_masks():
    """Every real step is Eq. 3 over ``gates`` (Eq. 4-6); padding is 0, never read, and the last
    state is each row's at its true length."""
    torch.manual_seed(2)
    gru = PaperGRU(5, 4).double()
    lengths = [4, 1, 3]
    mask = torch.arange(4)[None, :] < torch.tensor(lengths)[:, None]
    x = torch.randn(3, 4, 5, dtype=torch.float64)
    out, last = gru(x, mask)
    noisy, _ = gru(torch.where(mask[..., None], x, torch.randn_like(x)), mask)
    torch.testing.assert_close(noisy, out, rtol=0, atol=0)  # padding is never read
    assert (out[~mask] == 0).all()
    for b, n in enumerate(lengths):
        h = torch.zeros(4, dtype=torch.float64)
        for t in range(n):
            z, _, h_tilde = gru.gates(x[b, t], h)
            h = (1 - z) * h + z * h_tilde  # Eq. 3
            torch.testing.assert_close(out[b, t], h, rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(last[0, b], h)
        torch.testing.assert_close(gru(x[b:b + 1, :n])[0][0], out[b, :n], rtol=1e-12, atol=1e-14)


# (variant, dim): true count and paper convention with encoder_gru="paper"; one bias per gate is
# 3d fewer parameters per GRU than nn.GRU's two bias vectors (docs/models/din.md).
PAPER_GRU_COUNTS = [
    ("din1", 256, 640_003, 497_411),
    ("din1", 400, 1_288_003, 1_007_603),
    ("din2", 256, 1_031_683, 889_091),
    ("static", 400, 2_605_603, 1_884_803),  # two GRUs: the encoder and row 18's
]


@pytest.mark.parametrize(("variant", "dim", "true", "convention"), PAPER_GRU_COUNTS)
def test_paper_gru_parameter_counts(variant, dim, true, convention):
    embedding = nn.Embedding(50, 300, padding_idx=0)
    embedding.weight.requires_grad_(False)
    paper = DIN(embedding, num_classes=3, dim=dim, variant=variant, encoder_gru="paper")
    torch_gru = DIN(embedding, num_classes=3, dim=dim, variant=variant)
    grus = 2 if variant == "static" else 1
    assert paper.parameter_count() == true == torch_gru.parameter_count() - 3 * dim * grus
    assert paper.paper_parameter_count() == convention
    # the convention drops a third of each GRU: 2d of its 3d biases, against 2d of nn.GRU's 6d
    assert convention == torch_gru.paper_parameter_count() - 2 * dim * grus


def test_encoder_gru_must_be_a_choice():
    with pytest.raises(ConfigError, match=r"model\.net\.encoder_gru must be one of "
                       r"\('torch', 'paper'\), got 'tensorflow'"):
        make_model("din1", encoder_gru="tensorflow")
    with pytest.raises(ConfigError, match="encoder_gru"):
        DIN.validate_config(dim=16, encoder_gru="after")
