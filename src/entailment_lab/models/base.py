"""The contract between a network and the rest of the platform.

Every network subclasses ``Network``. The pipeline builds it from ``conf/model/<name>.yaml``,
the one LightningModule (``module.ClassifierModule``) trains it, ``explain`` draws its maps and
the report lays out its table, all through the members below and nothing else, so a new model
is one file under ``models/`` plus one config (README, "Add a model").

What a subclass defines
    ``__init__(self, embedding, num_classes, **config)``: ``embedding`` is the word-embedding
    layer (padding id 0, built by the pipeline from ``embeddings=``), ``num_classes`` comes from
    the data; every other argument is a key of the config's ``net`` node. A constructor starts
    with ``self.validate_config(...)`` on its config arguments; checks that need the embedding
    or the vocabulary follow it. Every check raises ``ConfigError`` naming the knob (the
    ``check_*`` helpers of ``models/common.py`` word the usual ones).

    ``forward(...)`` returns ``{"logits": (batch, num_classes)}``; with
    ``return_details=True`` also the intermediate tensors that ``heatmaps`` draws. Its inputs
    are the batch keys of ``inputs``: ``"pair"`` -> ``premise, premise_mask, hypothesis,
    hypothesis_mask``; ``"sentence"`` -> ``sentence, sentence_mask``. Ids are ``(batch, len)``
    long tensors, masks ``(batch, len)`` bool, True on real tokens (each row has at least one).

Optional members (the defaults here do nothing)
    ``needs_vocab``, ``validate_config``, ``regularization_loss``, ``l2_penalties``,
    ``paper_parameter_count``, ``heatmaps``, ``set_training_step``.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
from torch import nn

from entailment_lab.errors import ConfigError

#: Constructor arguments the pipeline supplies; every other one is a key of ``model.net``.
CONTEXT_ARGUMENTS = ("embedding", "num_classes", "vocab")


@dataclass
class HeatMap:
    """One analysis map of one example, ready to draw: ``values`` (rows, cols) in [0, 1]."""

    values: torch.Tensor
    rows: list[str]
    cols: list[str]
    title: str
    xlabel: str
    ylabel: str
    colorbar: str


class Network(nn.Module):
    """Base class of every network; see the module docstring for the contract."""

    #: The batch the network reads: a sentence pair (premise, hypothesis) or one sentence.
    inputs: ClassVar[Literal["pair", "sentence"]] = "pair"
    #: True: the pipeline also passes ``vocab`` (list[str], id -> token) to the constructor
    #: (DIIN derives character ids and exact-match keys from the words).
    needs_vocab: ClassVar[bool] = False

    @classmethod
    def validate_config(cls, **config: Any) -> None:
        """Check the ``net`` config values (every constructor argument but the context ones,
        defaults filled in) and raise ``ConfigError`` naming the knob. Runs before any data is
        read, so a bad value fails in a second instead of after tokenising."""

    @classmethod
    def check_config(cls, net_config: Mapping[str, Any]) -> None:
        """What the pipeline runs before reading data: every key of ``net_config`` (a
        ``model.net`` node) must be a constructor argument, then ``validate_config`` on them
        with the constructor's defaults filled in."""
        params = inspect.signature(cls.__init__).parameters
        knobs = {n: p for n, p in params.items() if n != "self" and n not in CONTEXT_ARGUMENTS
                 and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
        config = {k: v for k, v in net_config.items() if k != "_target_"}
        open_ended = any(p.kind == p.VAR_KEYWORD for p in params.values())
        unknown = sorted(set(config) - set(knobs))
        if unknown and not open_ended:
            raise ConfigError(f"model.net.{unknown[0]} is not a knob of {cls.__name__}; its "
                              f"knobs are: {', '.join(knobs)}")
        defaults = {n: p.default for n, p in knobs.items() if p.default is not p.empty}
        cls.validate_config(**{**defaults, **config})

    def regularization_loss(self) -> torch.Tensor | None:
        """A penalty added to the cross-entropy at every training step (None: none)."""
        return None

    def l2_penalties(self) -> list[tuple[float, list[nn.Parameter]]]:
        """Plain L2 penalties ``lambda / 2 * ||w||^2`` as ``(lambda, parameters)`` groups.

        The LightningModule gives each group to the optimiser as a parameter group with
        ``weight_decay = lambda`` (plus the optimiser's own ``weight_decay``): the gradient
        ``lambda * w`` is the penalty's, with no pass over the weights in the loss (for trained
        word vectors, most of a small model's step). Optimisers that decouple weight decay
        (AdamW) would change the meaning, so they are refused. Frozen parameters are skipped.
        Penalties that are not plain L2 belong in ``regularization_loss``. Empty: none.
        """
        return []

    def paper_parameter_count(self) -> int | None:
        """The parameter count under the paper's own convention where it differs from the true
        count (None: the true count is the paper's)."""
        return None

    def heatmaps(self, details: Mapping[str, torch.Tensor], premise: Sequence[str],
                 hypothesis: Sequence[str], index: int = 0) -> dict[str, HeatMap]:
        """Analysis maps of example ``index`` from ``forward(..., return_details=True)``;
        ``premise`` and ``hypothesis`` are its words (no padding). Empty: nothing to draw."""
        return {}

    def set_training_step(self, step: int) -> None:
        """Called before every training step with the trainer's global step (schedules that
        live inside the network, e.g. DIIN's dropout decay)."""
