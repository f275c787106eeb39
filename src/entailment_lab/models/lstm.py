"""LSTM sentence-encoder baseline (Table 2 row 1; Bowman et al. 2015/2016 style).

A shared LSTM reads the premise and the hypothesis separately; each sentence is the LSTM's
final state at its true last token (packed sequences, so padding is never read); the pair is
classified from ``[u; v; |u - v|; u * v]`` by an MLP (Mou et al. 2016). Notes and recipe:
``docs/models/lstm.md``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from entailment_lab.errors import ConfigError
from entailment_lab.models.base import Network
from entailment_lab.models.common import (
    PairFeatureClassifier,
    check_positive_int,
    check_probability,
    pack,
    run_rnn,
)


class LSTMEncoder(nn.Module):
    """Embed and encode a sentence: (batch, len) ids -> (batch, hidden_size) final states."""

    def __init__(self, embedding: nn.Embedding, hidden_size: int, dropout: float) -> None:
        super().__init__()
        self.embedding = embedding
        self.dropout = nn.Dropout(dropout)
        self.lstm = nn.LSTM(embedding.embedding_dim, hidden_size, batch_first=True)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.dropout(self.embedding(ids))  # (batch, len, d_emb)
        _, (h_n, _) = run_rnn(self.lstm, pack(x, mask))  # h_n: (1, batch, hidden) at each true end
        return h_n[-1]


class LSTMEncoderClassifier(Network):
    """Table 2 row 1: shared LSTM encoder + matching features + MLP."""

    def __init__(
        self,
        embedding: nn.Embedding,
        num_classes: int,
        hidden_size: int,
        mlp_size: int = 1024,
        mlp_layers: int = 1,
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        self.validate_config(hidden_size=hidden_size, mlp_size=mlp_size, mlp_layers=mlp_layers,
                             dropout=dropout)
        self.embedding = embedding
        self.encoder = LSTMEncoder(embedding, hidden_size, dropout)
        self.classifier = PairFeatureClassifier(hidden_size, mlp_size, num_classes,
                                                num_layers=mlp_layers, dropout=dropout)

    @classmethod
    def validate_config(cls, *, hidden_size: int, mlp_size: int, mlp_layers: int,
                        dropout: float, **_: Any) -> None:
        check_positive_int("hidden_size (dim in the config, the LSTM hidden size)", hidden_size,
                           "e.g. dim=128")
        if mlp_size < 1 or mlp_layers < 0:
            raise ConfigError(f"model.net.mlp_size must be >= 1 and mlp_layers >= 0, got "
                              f"{mlp_size}, {mlp_layers}")
        check_probability("dropout", dropout)

    def forward(
        self,
        premise: torch.Tensor,
        premise_mask: torch.Tensor,
        hypothesis: torch.Tensor,
        hypothesis_mask: torch.Tensor,
        return_details: bool = False,
    ) -> dict[str, torch.Tensor]:
        u = self.encoder(premise, premise_mask)        # (batch, hidden)
        v = self.encoder(hypothesis, hypothesis_mask)  # (batch, hidden)
        out = {"logits": self.classifier(u, v)}        # (batch, num_classes)
        if return_details:
            out.update(premise_vector=u, hypothesis_vector=v)
        return out
