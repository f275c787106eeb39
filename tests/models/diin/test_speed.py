"""DIIN's faster DenseNet (models/diin.py) computes the same function as the network at commit
6555cd6 (its models/diin.py, read with ``git show``): same logits, same gradients, float64.

The fast path computes each sample's feature maps only on a crop around the real words and
reads the rest from an all-zero image's maps (docs/models/diin.md, "Speed"). The cases below
make the crop smaller than the map in some blocks and whole in others, use odd and even
first-kernel sizes (different halos), and pad the batch beyond its longest sentence.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from entailment_lab.models.diin import DIIN, DenseNetExtractor

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "benchmarks"))
from pairs import load_commit_class  # noqa: E402  (benchmarks/pairs.py: a past model file)

BASE = "6555cd6"
VOCAB = ["<pad>", "<unk>", "a", "man", "Man", "dog", "runs", "not", "n't", "the", "cat", "is",
         "outside", "sleeps", "."]  # fmt: skip

SIZES = {
    "sequence_length": 24,
    "char_dim": 4,
    "char_filters": 6,
    "char_width": 3,
    "max_word_length": 8,
    "highway_layers": 2,
    "scale_down": 0.5,
    "dense_blocks": 3,
    "dense_layers": 3,
    "growth_rate": 4,
    "transition_rate": 0.5,
}


def baseline_class() -> type[nn.Module]:
    """DIIN as at 6555cd6; a checkout without the history cannot run this comparison."""
    past = load_commit_class(BASE, "diin", "DIIN")
    if past is None:
        pytest.skip(f"no git history here: models/diin.py at {BASE} cannot be read")
    return past


def padded_batch(premise_lengths: list[int], hypothesis_lengths: list[int], width: int,
                 seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Random ids (batch, width) with prefix masks of the given lengths; padding id 0."""
    generator = torch.Generator().manual_seed(seed)
    out = []
    for lengths in (premise_lengths, hypothesis_lengths):
        ids = torch.randint(1, len(VOCAB), (len(lengths), width), generator=generator)
        mask = torch.arange(width) < torch.tensor(lengths).unsqueeze(1)
        out += [ids * mask, mask]
    return tuple(out)


def logits_and_grads(model: nn.Module, batch: tuple[torch.Tensor, ...], labels: torch.Tensor
                     ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad()
    logits = model(*batch)["logits"]
    (F.cross_entropy(logits, labels) + model.regularization_loss()).backward()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()
                             if p.grad is not None}


CASES = {
    "crop in blocks 1-2, whole in 3": ([5, 3, 7, 2], [4, 6, 1, 3], 9, {}),
    "one word each": ([1, 1], [1, 1], 3, {}),
    "long premise: whole map at once": ([24, 3, 10], [2, 5, 4], 24, {}),
    "premise wider than hypothesis": ([12, 2], [2, 1], 14, {}),
    "padded past sequence_length": ([4, 2], [3, 5], 30, {}),
    "first kernel 3": ([5, 3, 7, 2], [4, 6, 1, 3], 9, {"first_scale_down_kernel": 3}),
    "first kernel 2 (uneven padding)": ([6, 3], [4, 2], 8, {"first_scale_down_kernel": 2}),
    "two blocks of four layers": ([3, 6], [5, 2], 7,
                                  {"dense_blocks": 2, "dense_layers": 4, "sequence_length": 20}),
}


@pytest.mark.parametrize("case", CASES)
def test_same_logits_and_gradients_as_6555cd6(case: str) -> None:
    premise_lengths, hypothesis_lengths, width, overrides = CASES[case]
    config = {**SIZES, **overrides}
    torch.manual_seed(0)
    embedding = nn.Embedding(len(VOCAB), 10, padding_idx=0)
    new = DIIN(embedding, 3, VOCAB, **config).double()
    old = baseline_class()(nn.Embedding(len(VOCAB), 10, padding_idx=0), 3, VOCAB, **config)
    old = old.double()
    old.load_state_dict(new.state_dict())
    with torch.no_grad():  # biases are zero at init: make them count
        for p in new.parameters():
            p.add_(0.1 * torch.randn_like(p))
        old.load_state_dict(new.state_dict())
    batch = padded_batch(premise_lengths, hypothesis_lengths, width)
    labels = torch.arange(len(premise_lengths)) % 3
    for model in (new, old):
        model.train()  # dropout 0 at step 0: training mode, deterministic

    new_logits, new_grads = logits_and_grads(new, batch, labels)
    old_logits, old_grads = logits_and_grads(old, batch, labels)
    torch.testing.assert_close(new_logits, old_logits, atol=1e-10, rtol=0)
    assert new_grads.keys() == old_grads.keys()
    for name, grad in old_grads.items():
        torch.testing.assert_close(new_grads[name], grad, atol=1e-10, rtol=0, msg=name)
    # The analysis outputs too
    new_details = new(*batch, return_details=True)
    old_details = old(*batch, return_details=True)
    assert new_details.keys() == old_details.keys()
    for key, value in old_details.items():
        torch.testing.assert_close(new_details[key], value, atol=1e-10, rtol=0, msg=key)


def test_crop_is_smaller_than_the_map(monkeypatch: pytest.MonkeyPatch) -> None:
    """The speed-up's premise: a short batch runs its 3×3 convs on crops, not the whole map."""
    torch.manual_seed(0)
    net = DenseNetExtractor(in_channels=4, image_size=24, scale_down=1.0, first_kernel=1,
                            blocks=2, layers=2, growth=2, transition_rate=0.5)
    shapes: list[tuple[int, ...]] = []
    conv2d = F.conv2d

    def recording_conv2d(x: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        shapes.append(tuple(x.shape))
        return conv2d(x, *args, **kwargs)

    monkeypatch.setattr(F, "conv2d", recording_conv2d)
    net(torch.randn(3, 4, 5, 2))
    # Block 1's 3×3 convs, batch 3: the reach grows a cell a conv, 5×2 -> 6×3 -> 7×4, the last
    # rounded to even rows (the pool) -> 8×4; + 1 halo row/column on each side. The
    # background (batch 1) runs at full size.
    crops = [shape for shape in shapes if shape[0] == 3]
    assert crops[:3] == [(3, 4, 5, 2), (3, 4, 8, 5), (3, 6, 10, 6)]  # scale-down (1×1), 3×3s
    assert all(s[0] == 1 for s in shapes if s[2:] == (24, 24))
