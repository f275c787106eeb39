"""The float64 comparisons of a model with its reference: the one helper of the reference tests
(``tests/models/NAME/test_reference*.py``) and of the fixture generators
(``tests/models/NAME/make_fixture.py``).

- Weight transfer: ``load_fixture`` reads ``tests/models/NAME/NAME.pt``, ``reference_model``
  rebuilds our network in float64 from it, ``assert_reference_logits`` compares our logits with
  the public implementation's.
- Equation references: ``frozen_vectors`` and ``padded_pairs`` (``padded_batch`` a side) are the
  word vectors and the padded batch they read, and ``training_gap`` compares the training path.

A model's inference (eval mode, no gradients) and its training can run different code: fast
paths with hand-written backwards, kernels that run only with gradients on or off, dropout
placed where inference never looks. ``training_gap`` runs the model's training forward (the
caller builds it with dropout 0) and backward of the cross-entropy, and the reference's
logits with autograd through the reference's own arithmetic, from the same weights; the
gradients of the two share no code but autograd's elementary operations.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

MODELS = Path(__file__).resolve().parent


def load_fixture(name: str) -> dict:
    """The weight-transfer fixture of model ``name``: ``tests/models/NAME/NAME.pt``, written by
    ``make_fixture.py`` beside it."""
    return torch.load(MODELS / name / f"{name}.pt", weights_only=True)


def reference_model(model_class: type[nn.Module], name: str, case: str | None = None
                    ) -> tuple[nn.Module, dict, dict]:
    """Our ``model_class`` rebuilt in float64 eval mode from the weight-transfer fixture
    ``tests/models/NAME/NAME.pt`` (its ``case`` where it holds several); returns the model, the
    fixture, and the stored entry (the case's, else the fixture itself) with the public
    implementation's outputs."""
    ref = load_fixture(name)
    stored = ref["cases"][case] if case else ref
    embedding = nn.Embedding.from_pretrained(ref["embeddings"], freeze=True, padding_idx=0)
    model = model_class(embedding, num_classes=3, **stored["config"]).double().eval()
    model.load_state_dict(stored["state_dict"])
    return model, ref, stored


def assert_reference_logits(logits: Tensor, theirs: Tensor) -> None:
    """Our float64 logits equal the public implementation's, on pairs whose logits differ."""
    assert (theirs.max(dim=0).values - theirs.min(dim=0).values).min() > 0.05  # pairs differ
    assert logits.dtype == torch.float64 and logits.shape == theirs.shape
    torch.testing.assert_close(logits, theirs, rtol=0, atol=1e-12)


def frozen_vectors(vocab_size: int, dim: int) -> nn.Embedding:
    """``nn.Embedding(vocab_size, dim, padding_idx=0)`` drawn from torch's global generator, in
    float64 and frozen: the word vectors of an equation reference's model."""
    embedding = nn.Embedding(vocab_size, dim, padding_idx=0).double()
    embedding.weight.requires_grad_(False)
    return embedding


def padded_batch(lengths: Sequence[int], vocab_size: int, generator: torch.Generator
                 ) -> tuple[Tensor, Tensor]:
    """Random ids 1 .. vocab_size - 1 and a mask (batch, max_len) True on each row's first
    ``lengths`` positions; the padding holds random real ids too, so only the mask can hide
    it."""
    ids = torch.randint(1, vocab_size, (len(lengths), max(lengths)), generator=generator)
    mask = torch.arange(max(lengths))[None, :] < torch.tensor(lengths)[:, None]
    return ids, mask


def padded_pairs(lengths: Sequence[tuple[int, int]], vocab_size: int, seed: int
                 ) -> dict[str, Tensor]:
    """The network's inputs (``premise``, ``premise_mask``, ``hypothesis``,
    ``hypothesis_mask``) for pairs of these (premise, hypothesis) lengths: ``padded_batch``
    of the premises, then of the hypotheses, from one generator seeded with ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    premise, premise_mask = padded_batch([lp for lp, _ in lengths], vocab_size, generator)
    hypothesis, hypothesis_mask = padded_batch([lh for _, lh in lengths], vocab_size, generator)
    return {"premise": premise, "premise_mask": premise_mask, "hypothesis": hypothesis,
            "hypothesis_mask": hypothesis_mask}


def training_gap(model: nn.Module, inputs: Mapping[str, Tensor], labels: Tensor,
                 reference: Callable[[dict[str, Tensor]], Tensor],
                 dtype: torch.dtype | None = None) -> tuple[float, float]:
    """(max |Δ logit|, the largest over trainable weights of max |Δ grad| / max |grad|).

    ``model`` (float64) gives the weights; its training forward runs in ``dtype`` (default:
    float64). ``reference(state)`` returns the (batch, classes) logits from ``state``, the
    model's float64 ``state_dict`` whose trainable entries require gradients.
    """
    trainable = [k for k, w in model.named_parameters() if w.requires_grad]
    state = {k: v.detach().clone().requires_grad_(k in trainable)
             for k, v in model.state_dict().items()}
    model = model.to(dtype or torch.float64).train()
    model.zero_grad()
    logits = model(**inputs)["logits"]
    F.cross_entropy(logits, labels).backward()
    expected = reference(state)
    rows = torch.arange(len(labels))
    wanted = torch.autograd.grad(-expected.log_softmax(-1)[rows, labels].mean(),
                                 [state[k] for k in trainable])
    params = dict(model.named_parameters())
    grad = max(float((params[k].grad.double() - w).abs().max() / w.abs().max())
               for k, w in zip(trainable, wanted, strict=True))
    return float((logits.detach().double() - expected.detach()).abs().max()), grad
