"""DIIN: Densely Interactive Inference Network (Gong, Luo & Zhang, ICLR 2018, §3.2).

Five layers, top to bottom in this file: embedding (word vector ⊕ character feature ⊕ exact
match; the paper's POS one-hot is left out: no offline tagger), encoding (highway network,
self-attention, fuse gate; ``regularization_loss()`` keeps the premise and hypothesis encoders
close), interaction (``I_ij = p̃_i ∘ h̃_j``), feature extraction (DenseNet) and output (flatten,
linear). Every sentence is zero-padded to ``sequence_length`` (= ``data.max_length``): the
DenseNet's flatten needs a fixed image size, so a pair's logits do not depend on its batch.
Choices, the official code's details and the parameter count: ``docs/models/diin.md``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from entailment_lab.errors import ConfigError, DataError
from entailment_lab.models.base import HeatMap, Network
from entailment_lab.models.common import count_trainable_parameters, masked_softmax

PAD_TOKEN = "<pad>"
UNK_TOKEN = "<unk>"


# --------------------------------------------------------------------------------------------
# Features derived from the vocabulary (built once in the constructor, kept as buffers)
# --------------------------------------------------------------------------------------------


def build_char_ids(vocab: list[str], max_word_length: int) -> tuple[torch.Tensor, list[str]]:
    """Character ids of every vocabulary entry: ``(vocab_size, max_word_length)`` long, 0 = pad.

    The character alphabet is the sorted set of characters in ``vocab``, so it is a pure function
    of the vocabulary (the same vocabulary always gives the same ids). Words longer than
    ``max_word_length`` are cut (official code: 16 characters). The padding row (index 0) and
    ``<unk>`` get no characters: the characters of an unknown word are not known to the model.
    Returns the id table and the alphabet (id ``k`` is ``alphabet[k - 1]``).
    """
    special = {0} | {i for i, token in enumerate(vocab) if token == UNK_TOKEN}
    alphabet = sorted({c for i, token in enumerate(vocab) if i not in special for c in token})
    char_index = {c: k + 1 for k, c in enumerate(alphabet)}
    char_ids = torch.zeros(len(vocab), max_word_length, dtype=torch.long)
    for i, token in enumerate(vocab):
        if i in special:
            continue
        ids = [char_index[c] for c in token[:max_word_length]]
        char_ids[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    return char_ids, alphabet


def build_match_keys(vocab: list[str], stem: bool = False) -> torch.Tensor:
    """A key per vocabulary entry such that two tokens "match" iff their keys are equal: ``(V,)``.

    The key is the id of the normalised token: lower-cased, ``n't`` read as ``not`` (as in the
    official preprocessing), and, with ``stem=True``, Snowball-stemmed (needs the
    ``snowballstemmer`` package). Padding and ``<unk>`` get key -1 and never match: two unknown
    words are not known to be the same word.
    """
    stemmer = None
    if stem:
        try:
            import snowballstemmer
        except ImportError as err:  # pragma: no cover - depends on the environment
            raise ConfigError(
                "model.net.exact_match_stem=true needs the 'snowballstemmer' package "
                "(pip install snowballstemmer); or set model.net.exact_match_stem=false "
                "for lower-cased token match"
            ) from err
        stemmer = snowballstemmer.stemmer("english")
    normal_ids: dict[str, int] = {}
    keys = torch.full((len(vocab),), -1, dtype=torch.long)
    for i, token in enumerate(vocab):
        if i == 0 or token == UNK_TOKEN:
            continue
        word = token.lower()
        word = "not" if word == "n't" else word
        if stemmer is not None:
            word = stemmer.stemWord(word)
        keys[i] = normal_ids.setdefault(word, len(normal_ids))
    return keys


def exact_match_feature(
    keys_a: torch.Tensor, mask_a: torch.Tensor, keys_b: torch.Tensor, mask_b: torch.Tensor
) -> torch.Tensor:
    """Binary exact-match feature of sentence a w.r.t. sentence b: ``(batch, len_a, 1)`` float.

    1 where token i of a is real, has a key (not padding / ``<unk>``), and some real token of b
    has the same key; 0 elsewhere (padding included).
    """
    # (batch, len_a, 1) == (batch, 1, len_b) -> (batch, len_a, len_b)
    same = keys_a.unsqueeze(2) == keys_b.unsqueeze(1)
    same = same & (mask_b & (keys_b >= 0)).unsqueeze(1)
    hit = same.any(dim=2) & mask_a & (keys_a >= 0)  # (batch, len_a)
    return hit.unsqueeze(-1).float()


def fit_length(x: torch.Tensor, length: int) -> torch.Tensor:
    """Truncate or zero-pad ``x`` (batch, len, ...) along dim 1 to exactly ``length``.

    Works for ids (pad id 0), masks (pad False) and features (pad 0).
    """
    if x.size(1) >= length:
        return x[:, :length]
    pad = x.new_zeros((x.size(0), length - x.size(1), *x.shape[2:]))
    return torch.cat([x, pad], dim=1)


# --------------------------------------------------------------------------------------------
# Building blocks
# --------------------------------------------------------------------------------------------


class CharFeatures(nn.Module):
    """Character feature of each word: char embedding → Conv1D (valid) → ReLU → max over chars.

    One module serves both sentences (the paper shares it). Padding characters embed to zero.
    """

    def __init__(self, num_chars: int, char_dim: int, filters: int, width: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(num_chars, char_dim, padding_idx=0)
        self.conv = nn.Conv1d(char_dim, filters, kernel_size=width)

    def forward(self, char_ids: torch.Tensor, dropout: float = 0.0) -> torch.Tensor:
        # char_ids: (batch, len, chars) -> (batch, len, filters)
        batch, length, chars = char_ids.shape
        x = self.embedding(char_ids.reshape(batch * length, chars))  # (B·L, chars, char_dim)
        x = F.dropout(x, dropout, self.training)  # official: dropout on the conv input
        x = F.relu(self.conv(x.transpose(1, 2)))  # (B·L, filters, chars - width + 1)
        return x.max(dim=2).values.reshape(batch, length, -1)


class Highway(nn.Module):
    """Highway network (Srivastava et al. 2015): ``y = g∘relu(W_t x + b_t) + (1 − g)∘x``.

    ``g = σ(W_g x + b_g)``; the size stays ``d`` (official code: ReLU transform, no resize).
    """

    def __init__(self, size: int, num_layers: int) -> None:
        super().__init__()
        self.transform = nn.ModuleList(nn.Linear(size, size) for _ in range(num_layers))
        self.gate = nn.ModuleList(nn.Linear(size, size) for _ in range(num_layers))

    def forward(self, x: torch.Tensor, dropout: float = 0.0) -> torch.Tensor:
        # x: (batch, len, d) -> (batch, len, d); position-wise, so padding cannot leak
        for transform, gate in zip(self.transform, self.gate, strict=True):
            x_in = F.dropout(x, dropout, self.training)  # official: dropout on linear inputs
            g = torch.sigmoid(gate(x_in))
            x = g * F.relu(transform(x_in)) + (1 - g) * x
        return x


class SelfAttentionEncoder(nn.Module):
    """Self-attention with a tri-linear score, then the fuse gate (paper §3.2, "Encoding layer").

    ``A_ij = w·[p̂_i; p̂_j; p̂_i∘p̂_j]``, ``p̄_i = Σ_j softmax_j(A_ij) p̂_j`` over real j only;
    ``z = tanh(W1[p̂;p̄] + b1)``, ``r = σ(W2[p̂;p̄] + b2)``, ``f = σ(W3[p̂;p̄] + b3)``,
    ``p̃ = r∘p̂ + f∘z``. Outputs at padding positions are set to zero.
    """

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size
        self.w = nn.Parameter(torch.empty(3 * size))  # w = [w_a; w_b; w_c] of the tri-linear form
        self.W1 = nn.Linear(2 * size, size)  # z (candidate)
        self.W2 = nn.Linear(2 * size, size)  # r (gate on p̂)
        self.W3 = nn.Linear(2 * size, size)  # f (gate on z)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The official initialisation: TensorFlow draws each variable Glorot-uniform over its
        own shape. ``w`` is the official (3d, 1) kernel of the score; each gate is two official
        (d, d) kernels (one for p̂, one for p̄), bound √(6/2d) — a Glorot over our (d, 2d) weight
        would be √(2/3) as large. Biases zero."""
        score_bound = (6 / (3 * self.size + 1)) ** 0.5
        nn.init.uniform_(self.w, -score_bound, score_bound)
        bound = (6 / (2 * self.size)) ** 0.5
        for gate in (self.W1, self.W2, self.W3):  # weight (d, 2d) = [W_p̂ | W_p̄]
            nn.init.uniform_(gate.weight, -bound, bound)
            nn.init.zeros_(gate.bias)

    def attention_scores(self, x: torch.Tensor) -> torch.Tensor:
        """Tri-linear scores ``A`` (batch, len, len) without building the (len, len, 3d) tensor.

        ``w·[a; b; a∘b] = w_a·a + w_b·b + (a∘w_c)·b``.
        """
        w_a, w_b, w_c = self.w.split(self.size)
        left = x @ w_a  # (batch, len)
        right = x @ w_b  # (batch, len)
        cross = (x * w_c) @ x.transpose(1, 2)  # (batch, len, len)
        return left.unsqueeze(2) + right.unsqueeze(1) + cross

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor, dropout: float = 0.0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # x: p̂ (batch, len, d); mask: (batch, len) -> p̃ (batch, len, d), attention (batch, len, len)
        x_in = F.dropout(x, dropout, self.training)  # official: dropout on the inputs of linears
        A = self.attention_scores(x_in)  # (batch, len, len)
        attention = masked_softmax(A, mask.unsqueeze(1), dim=-1)  # over real j only
        attention = attention * mask.unsqueeze(2)  # rows of padding positions: all zero
        x_bar = attention @ x  # p̄ (batch, len, d)

        gate_in = F.dropout(torch.cat([x, x_bar], dim=-1), dropout, self.training)  # (B, L, 2d)
        z = torch.tanh(self.W1(gate_in))
        r = torch.sigmoid(self.W2(gate_in))
        f = torch.sigmoid(self.W3(gate_in))
        x_tilde = r * x + f * z  # p̃ (batch, len, d)
        return x_tilde * mask.unsqueeze(-1), attention


def _same_padding(conv: nn.Conv2d) -> tuple[int, int]:
    """Rows (and columns) that ``padding="same"`` adds before and after: ``(k - 1) // 2`` before,
    the rest after (PyTorch's rule; equal for an odd kernel)."""
    k = conv.kernel_size[0]
    return (k - 1) // 2, k - 1 - (k - 1) // 2


def extend_crop(x: torch.Tensor, background: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Grow the top-left crop ``x`` (batch, c, a, b) of a map to (batch, c, rows, cols).

    Outside the crop every sample's map equals ``background`` (1, c, ≥ rows, ≥ cols), so the
    new cells are copied from it (one copy broadcast over the batch).
    """
    batch, _, a, b = x.shape
    if cols > b:
        x = torch.cat([x, background[:, :, :a, b:cols].expand(batch, -1, -1, -1)], dim=3)
    if rows > a:
        x = torch.cat([x, background[:, :, a:rows, :cols].expand(batch, -1, -1, -1)], dim=2)
    return x


def with_halo(x: torch.Tensor, background: torch.Tensor, before: int, after: int, rows: int,
              cols: int) -> torch.Tensor:
    """What a "same" convolution reads to give the top-left ``rows × cols`` crop of its output,
    from the crop ``x`` (batch, c, a ≤ rows, b ≤ cols) of its input.

    ``before`` rows/columns above and left: the map's own zero padding (the crop starts at the
    map's corner); the cells right and below ``x``, ``after`` more included: ``background``
    (1, c, H, W), or zero padding past the map. Returns (batch, c, rows + before + after, ...).
    """
    _, _, a, b = x.shape
    if before == after == 0 and (rows, cols) == (a, b):
        return x
    padded = F.pad(background, (before, after, before, after))  # (1, c, H + k - 1, W + k - 1)
    x = F.pad(x, (before, 0, before, 0))  # the map's top and left border
    return extend_crop(x, padded, rows + before + after, cols + before + after)


class DenseNetExtractor(nn.Module):
    """Feature extraction over the interaction image (paper §3.2; Huang et al. 2017).

    1×1 (``first_kernel``) conv scaling ``d`` channels to ``floor(d·η)``, then ``blocks`` times:
    a dense block (``layers`` 3×3 convs, ``growth`` channels each, ReLU, each output concatenated
    to its input) and a transition (1×1 conv to ``floor(c·θ)`` channels, no activation, 2×2 max
    pool). Activations follow the official code: none on the scale-down and transition convs.

    Speed, same function: the image is zero outside the top-left (p, h) box of real words, so
    outside the reach of that box (it grows by one cell per 3×3 conv, halves with each pool)
    every sample's feature maps equal those of an all-zero image, the *background*. The
    background is computed once per batch at full size (batch 1); each sample's maps only on a
    crop that covers the reach (growing conv by conv), with the crop's surroundings read from
    the background. The
    result (and its gradient) is the full computation's (docs/models/diin.md, "Speed").
    """

    def __init__(
        self,
        in_channels: int,
        image_size: int,
        scale_down: float,
        first_kernel: int,
        blocks: int,
        layers: int,
        growth: int,
        transition_rate: float,
        kernel: int = 3,
    ) -> None:
        super().__init__()
        self.image_size = image_size
        channels = int(in_channels * scale_down)
        self.scale_down = nn.Conv2d(in_channels, channels, first_kernel, padding="same")
        self.blocks = nn.ModuleList()
        self.transitions = nn.ModuleList()
        size = image_size
        for _ in range(blocks):
            convs = nn.ModuleList()
            for i in range(layers):
                convs.append(nn.Conv2d(channels + i * growth, growth, kernel, padding="same"))
            self.blocks.append(convs)
            channels += layers * growth
            compressed = int(channels * transition_rate)
            if compressed < 1:
                raise ConfigError(
                    f"DIIN: model.net.transition_rate={transition_rate} compresses {channels} "
                    "DenseNet channels to none"
                )
            self.transitions.append(nn.Conv2d(channels, compressed, 1))
            channels = compressed
            size //= 2  # 2×2 max pool, stride 2, floor (TF "VALID")
        self.out_channels = channels
        self.out_size = size
        self.out_features = channels * size * size

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        # image: (batch, d, a, b), the top-left a×b crop of the (L, L) interaction image, zero
        # outside it (a = b = L: the whole image) -> features (batch, out_channels · out_size²)
        size = self.image_size
        reach_a, reach_b = image.shape[2:]  # rows / columns that may differ from the background
        background: torch.Tensor | None = image.new_zeros((1, image.size(1), size, size))
        x = image  # this crop of every sample's map, exact; the rest is the background
        convs_before = [self.scale_down]
        for convs, transition in zip(self.blocks, self.transitions, strict=True):
            layers = [*convs_before, *convs]
            for i, conv in enumerate(layers):
                before, after = _same_padding(conv)
                # The reach grows by `before` cells: output cell i reads input cells ≥ i - before
                reach_a, reach_b = min(size, reach_a + before), min(size, reach_b + before)
                rows, cols = max(reach_a, x.size(2)), max(reach_b, x.size(3))
                if i == len(layers) - 1:  # the 2×2 pool after the block reads whole cells
                    rows, cols = min(size, rows + rows % 2), min(size, cols + cols % 2)
                if background is not None and rows == cols == size:  # the crop fills the map
                    x, background = extend_crop(x, background, size, size), None
                if background is None:  # the plain computation
                    y, x_in = conv(x), x
                else:
                    x_halo = with_halo(x, background, before, after, rows, cols)
                    y = F.conv2d(x_halo, conv.weight, conv.bias)  # (batch, c_out, rows, cols)
                    x_in = x_halo[:, :, before:before + rows, before:before + cols]
                    y_background = conv(background)  # (1, c_out, size, size)
                if conv is self.scale_down:
                    x = y
                    background = None if background is None else y_background
                else:  # dense connectivity: c += growth
                    x = torch.cat([x_in, F.relu(y)], dim=1)
                    if background is not None:
                        background = torch.cat([background, F.relu(y_background)], dim=1)
            x = F.max_pool2d(transition(x), kernel_size=2, stride=2)  # c·θ channels, size / 2
            if background is not None:
                background = F.max_pool2d(transition(background), kernel_size=2, stride=2)
            size //= 2
            reach_a, reach_b = (reach_a + 1) // 2, (reach_b + 1) // 2
            convs_before = []
        if background is not None:  # the crop back into the full map of every sample
            x = extend_crop(x, background, size, size)
        return x.flatten(start_dim=1)


# --------------------------------------------------------------------------------------------
# The network
# --------------------------------------------------------------------------------------------


class DIIN(Network):
    """Densely Interactive Inference Network for sentence pairs.

    Parameters beyond the model contract (``embedding``, ``num_classes``, ``vocab``):

    - ``sequence_length``: premise and hypothesis are zero-padded to this many tokens so the
      DenseNet's flatten has a fixed size (official ``seq_length=48``). Its config value is
      ``${data.max_length}``: the DataModule truncates, and a real token past this length is a
      ``DataError`` here, never cut silently.
    - ``char_dim``, ``char_filters``, ``char_width``, ``max_word_length``: character feature
      (official 8, 100, 5, 16).
    - ``exact_match``: append the binary exact-match feature; ``exact_match_stem``: compare
      Snowball stems instead of lower-cased tokens (needs the ``snowballstemmer`` package).
    - ``highway_layers``; ``share_highway``: one highway network for both sentences (official
      code) or one per sentence (then its weights join the difference penalty).
    - ``scale_down`` (η), ``first_scale_down_kernel``, ``dense_blocks``, ``dense_layers`` (n),
      ``growth_rate`` (g), ``transition_rate`` (θ): the DenseNet (official 0.3, 1, 3, 8, 20, 0.5).
    - ``dropout``, ``dropout_decay_rate``, ``dropout_decay_steps``: drop probability
      ``1 − (1 − dropout)·rate^(step / steps)`` at training step ``step`` (the paper's keep rate
      starts at 1.0 and decays by 0.977 every 10,000 steps); ``dropout_decay_rate=1`` keeps it
      constant. ``step`` is the trainer's global step (``set_training_step``).
    - ``diff_penalty``: weight of ``Σ‖W_p − W_h‖²`` in ``regularization_loss()``.
    - ``train_embeddings``: fine-tune the word vectors (the paper does); ``None`` keeps the
      embedding layer as the backbone built it.

    Parameter count (default config, 300-d words, 3 classes, SNLI-size alphabet): about 3.7 M
    besides word vectors, vs. the paper's 4.4 M; the gap is the left-out 47-d POS feature, which
    widens every encoder matrix. See docs/models/diin.md for the arithmetic.
    """

    needs_vocab = True  # character ids and exact-match keys come from the words

    def __init__(
        self,
        embedding: nn.Embedding,
        num_classes: int,
        vocab: list[str],
        sequence_length: int,
        char_dim: int = 8,
        char_filters: int = 100,
        char_width: int = 5,
        max_word_length: int = 16,
        exact_match: bool = True,
        exact_match_stem: bool = False,
        highway_layers: int = 2,
        share_highway: bool = True,
        scale_down: float = 0.3,
        first_scale_down_kernel: int = 1,
        dense_blocks: int = 3,
        dense_layers: int = 8,
        growth_rate: int = 20,
        transition_rate: float = 0.5,
        dropout: float = 0.0,
        dropout_decay_rate: float = 0.977,
        dropout_decay_steps: int = 10_000,
        diff_penalty: float = 5e-4,
        train_embeddings: bool | None = True,
    ) -> None:
        super().__init__()
        self.validate_config(
            sequence_length=sequence_length,
            char_dim=char_dim,
            char_filters=char_filters,
            char_width=char_width,
            max_word_length=max_word_length,
            highway_layers=highway_layers,
            scale_down=scale_down,
            first_scale_down_kernel=first_scale_down_kernel,
            dense_blocks=dense_blocks,
            dense_layers=dense_layers,
            growth_rate=growth_rate,
            transition_rate=transition_rate,
            dropout=dropout,
            dropout_decay_rate=dropout_decay_rate,
            dropout_decay_steps=dropout_decay_steps,
            diff_penalty=diff_penalty,
        )
        if len(vocab) != embedding.num_embeddings:
            raise ConfigError(
                f"DIIN: vocab has {len(vocab)} entries but the embedding has "
                f"{embedding.num_embeddings} rows; the pipeline must pass the vocabulary the "
                "embedding was built from")
        if num_classes < 2:
            raise ConfigError(f"DIIN: num_classes={num_classes} must be >= 2")
        if int((embedding.embedding_dim + char_filters) * scale_down) < 1:
            raise ConfigError(
                f"DIIN: model.net.scale_down={scale_down} leaves no channels of the "
                f"{embedding.embedding_dim + char_filters}-d encoding")
        self.sequence_length = sequence_length
        self.use_exact_match = exact_match
        self.dropout = dropout
        self.dropout_decay_rate = dropout_decay_rate
        self.dropout_decay_steps = dropout_decay_steps
        self.diff_penalty = diff_penalty

        # --- Embedding layer -----------------------------------------------------------------
        self.embedding = embedding
        if train_embeddings is not None:
            # The paper fine-tunes GloVe with the task; the padding row stays zero through
            # nn.Embedding's padding_idx (set by the backbone) and is masked anyway.
            self.embedding.weight.requires_grad_(train_embeddings)
        char_ids, alphabet = build_char_ids(vocab, max_word_length)
        # Derived from `vocab` (passed again on every construction), so not saved in checkpoints.
        self.register_buffer("char_ids", char_ids, persistent=False)  # (V, max_word_length)
        self.register_buffer(
            "match_keys", build_match_keys(vocab, stem=exact_match_stem), persistent=False
        )  # (V,)
        self.char_features = CharFeatures(len(alphabet) + 1, char_dim, char_filters, char_width)
        d = embedding.embedding_dim + char_filters + int(exact_match)
        self.hidden_size = d

        # --- Encoding layer ------------------------------------------------------------------
        self.highway_p = Highway(d, highway_layers)
        self.highway_h = None if share_highway else Highway(d, highway_layers)
        self.encoder_p = SelfAttentionEncoder(d)
        self.encoder_h = SelfAttentionEncoder(d)

        # --- Feature extraction and output layers -------------------------------------------
        self.densenet = DenseNetExtractor(
            in_channels=d,
            image_size=sequence_length,
            scale_down=scale_down,
            first_kernel=first_scale_down_kernel,
            blocks=dense_blocks,
            layers=dense_layers,
            growth=growth_rate,
            transition_rate=transition_rate,
        )
        self.output = nn.Linear(self.densenet.out_features, num_classes)

        self.step = 0  # the trainer's global step, for the dropout schedule (set_training_step)
        self._reset_parameters()

    @classmethod
    def validate_config(
        cls,
        *,
        sequence_length: int,
        char_dim: int,
        char_filters: int,
        char_width: int,
        max_word_length: int,
        highway_layers: int,
        scale_down: float,
        first_scale_down_kernel: int,
        dense_blocks: int,
        dense_layers: int,
        growth_rate: int,
        transition_rate: float,
        dropout: float,
        dropout_decay_rate: float,
        dropout_decay_steps: int,
        diff_penalty: float,
        **_: Any,
    ) -> None:
        """Reject inconsistent knobs up front with a message that names the knob (model.net.*)."""

        def fail(message: str) -> None:
            raise ConfigError(f"DIIN: {message}")

        for name, value in [
            ("char_dim", char_dim),
            ("char_filters", char_filters),
            ("char_width", char_width),
            ("highway_layers", highway_layers),
            ("first_scale_down_kernel", first_scale_down_kernel),
            ("dense_blocks", dense_blocks),
            ("dense_layers", dense_layers),
            ("growth_rate", growth_rate),
            ("dropout_decay_steps", dropout_decay_steps),
        ]:
            if value < 1:
                fail(f"model.net.{name}={value} must be >= 1")
        if max_word_length < char_width:
            fail(
                f"model.net.max_word_length={max_word_length} must be >= "
                f"model.net.char_width={char_width} (the character convolution is 'valid')"
            )
        if sequence_length < 2**dense_blocks:
            fail(
                f"data.max_length={sequence_length} (the sentence length, "
                f"model.net.sequence_length) is too small for dense_blocks={dense_blocks}: each "
                f"transition halves the interaction map, so it must be >= {2**dense_blocks}"
            )
        if not 0 < scale_down <= 1:
            fail(f"model.net.scale_down={scale_down} must be in (0, 1]")
        if not 0 < transition_rate <= 1:
            fail(f"model.net.transition_rate={transition_rate} must be in (0, 1]")
        if not 0 <= dropout < 1:
            fail(f"model.net.dropout={dropout} must be in [0, 1)")
        if not 0 < dropout_decay_rate <= 1:
            fail(f"model.net.dropout_decay_rate={dropout_decay_rate} must be in (0, 1]")
        if diff_penalty < 0:
            fail(f"model.net.diff_penalty={diff_penalty} must be >= 0")

    def _reset_parameters(self) -> None:
        """The official code's initialisation, variable by variable.

        TensorFlow's default for a variable is Glorot-uniform over *its own* shape; layers get
        zero biases. Two places where that is not PyTorch's Glorot over our modules' shapes:
        the fuse gates (``SelfAttentionEncoder.reset_parameters``), and the character conv's
        bias, a plain ``tf.get_variable`` (not a layer), so Glorot-uniform over its shape
        (filters,) too, bound √(6/2·filters), not zero.
        """
        for module in self.modules():
            if module is self.embedding:
                continue
            if isinstance(module, (nn.Linear, nn.Conv1d, nn.Conv2d)):
                nn.init.xavier_uniform_(module.weight)
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):  # the character embedding
                nn.init.xavier_uniform_(module.weight)
                with torch.no_grad():
                    module.weight[0].zero_()
        self.encoder_p.reset_parameters()
        self.encoder_h.reset_parameters()
        conv_bias = self.char_features.conv.bias  # (filters,)
        bound = (6 / (2 * conv_bias.numel())) ** 0.5
        nn.init.uniform_(conv_bias, -bound, bound)

    # ------------------------------------------------------------------------------------------

    def set_training_step(self, step: int) -> None:
        self.step = step

    def current_dropout(self) -> float:
        """Drop probability at the current training step (paper: keep rate decays 0.977/10k)."""
        decay = self.dropout_decay_rate ** (self.step / self.dropout_decay_steps)
        return 1.0 - (1.0 - self.dropout) * decay

    @staticmethod
    def real_extent(mask: torch.Tensor) -> int:
        """1 + the last position that is real in some sentence of ``mask`` (batch, L); ≥ 1."""
        positions = mask.any(dim=0).nonzero()
        return int(positions.max()) + 1 if positions.numel() else 1

    def embed(
        self,
        ids: torch.Tensor,
        mask: torch.Tensor,
        other_ids: torch.Tensor,
        other_mask: torch.Tensor,
        dropout: float,
        length: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Embedding layer for one sentence, fit to ``length`` (default L = ``sequence_length``)
        positions: (B, length, d), (B, length).

        Exact match is computed on the sentences as given, then everything is cut or padded to
        ``length``. Truncation is the DataModule's (``data.max_length``): a real token past
        ``L`` is an error.
        """
        limit = self.sequence_length
        if mask.size(1) > limit and bool(mask[:, limit:].any()):
            raise DataError(
                f"DIIN: a sentence has more than {limit} tokens, the length the model was built "
                f"for (data.max_length); truncate it to {limit} tokens"
            )
        length = limit if length is None else length
        parts = []
        if self.use_exact_match:
            keys, other_keys = self.match_keys[ids], self.match_keys[other_ids]
            em = exact_match_feature(keys, mask, other_keys, other_mask)  # (batch, len, 1)
            parts.append(fit_length(em, length))
        ids, mask = fit_length(ids, length), fit_length(mask, length)
        words = F.dropout(self.embedding(ids), dropout, self.training)  # (batch, L, d_emb)
        chars = self.char_features(self.char_ids[ids], dropout)  # (batch, L, char_filters)
        x = torch.cat([words, chars, *parts], dim=-1)  # (batch, L, d)
        return x * mask.unsqueeze(-1), mask

    def forward(
        self,
        premise: torch.Tensor,
        premise_mask: torch.Tensor,
        hypothesis: torch.Tensor,
        hypothesis_mask: torch.Tensor,
        return_details: bool = False,
    ) -> dict[str, torch.Tensor]:
        """Logits ``(batch, num_classes)`` for token ids ``(batch, len)`` and bool masks.

        With ``return_details``: ``interaction_norm`` ‖I_ij‖ (batch, p, h), the self-attention
        maps ``premise_attention`` (batch, p, p) / ``hypothesis_attention`` (batch, h, h), and the
        exact-match features (batch, p) / (batch, h); p and h are the input lengths capped at
        ``sequence_length``. Columns past ``sequence_length`` may hold padding only.
        """
        dropout = self.current_dropout() if self.training else 0.0
        len_p = min(premise.size(1), self.sequence_length)
        len_h = min(hypothesis.size(1), self.sequence_length)
        # Every layer up to the interaction image is position-wise or masked (self-attention
        # reads real words only; p̃ is zeroed at padding), so positions past the batch's last
        # real word hold zeros: the layers run on the first a (premise) and b (hypothesis)
        # positions only, the same function as on all L (docs/models/diin.md, "Speed").
        a = min(self.real_extent(premise_mask), self.sequence_length)
        b = min(self.real_extent(hypothesis_mask), self.sequence_length)

        # Embedding layer: x = [word; char; exact match] (batch, a, d) and (batch, b, d)
        p, p_mask = self.embed(premise, premise_mask, hypothesis, hypothesis_mask, dropout, a)
        h, h_mask = self.embed(hypothesis, hypothesis_mask, premise, premise_mask, dropout, b)

        # Encoding layer: highway → p̂, ĥ; self-attention + fuse gate → p̃, h̃
        highway_h = self.highway_h if self.highway_h is not None else self.highway_p
        p_hat = self.highway_p(p, dropout)  # (batch, a, d)
        h_hat = highway_h(h, dropout)  # (batch, b, d)
        p_tilde, p_attention = self.encoder_p(p_hat, p_mask, dropout)  # (B, a, d), (B, a, a)
        h_tilde, h_attention = self.encoder_h(h_hat, h_mask, dropout)  # (B, b, d), (B, b, b)

        # Interaction layer: I_ij = p̃_i ∘ h̃_j as a d-channel image, channels first for the
        # convs. p̃, h̃ are zero at padding, so I is zero outside its top-left a×b box of the
        # L×L image, and only that box is built: (batch, d, a, b).
        image = p_tilde.transpose(1, 2).unsqueeze(3) * h_tilde.transpose(1, 2).unsqueeze(2)
        image_in = F.dropout(image, dropout, self.training)  # official: dropout on I

        # Feature extraction (DenseNet over the L×L image, zero outside the box) and output
        features = self.densenet(image_in)  # (batch, out_features)
        logits = self.output(F.dropout(features, dropout, self.training))  # (batch, classes)

        result = {"logits": logits}
        if return_details:  # zero past the box, as on the L×L image
            def grow(x: torch.Tensor, rows: int, cols: int = 0) -> torch.Tensor:
                return F.pad(x, (0, cols - x.size(2), 0, rows - x.size(1))) if cols else \
                    F.pad(x, (0, rows - x.size(1)))
            norm = (p_tilde.unsqueeze(2) * h_tilde.unsqueeze(1)).norm(dim=-1)  # (batch, a, b)
            result["interaction_norm"] = grow(norm, len_p, len_h)  # (batch, p, h)
            result["premise_attention"] = grow(p_attention, len_p, len_p)
            result["hypothesis_attention"] = grow(h_attention, len_h, len_h)
            if self.use_exact_match:
                result["premise_exact_match"] = grow(p[..., -1], len_p)  # (batch, p)
                result["hypothesis_exact_match"] = grow(h[..., -1], len_h)  # (batch, h)
        return result

    def heatmaps(self, details: Mapping[str, torch.Tensor], premise: Sequence[str],
                 hypothesis: Sequence[str], index: int = 0) -> dict[str, HeatMap]:
        """‖I_ij‖ of the interaction image, hypothesis × premise, scaled by its maximum."""
        lp, lh = len(premise), len(hypothesis)
        norms = details["interaction_norm"][index, :lp, :lh].detach().float().cpu().T
        norms = norms / norms.max().clamp_min(1e-12)
        return {"interaction": HeatMap(norms, list(hypothesis), list(premise),
                                       "Interaction ‖I_ij‖", "premise word i",
                                       "hypothesis word j", "norm / max norm")}

    def regularization_loss(self) -> torch.Tensor:
        """``diff_penalty · Σ‖W_p − W_h‖²`` over corresponding encoder weight matrices.

        Covers the tri-linear ``w`` and the fuse-gate ``W1, W2, W3`` (and the highway weights
        when they are not shared), not the biases, like the official code (which uses
        ``tf.nn.l2_loss``, i.e. half the squared norm; ``diff_penalty`` multiplies the full one).
        """
        modules = [(self.encoder_p, self.encoder_h)]
        if self.highway_h is not None:
            modules.append((self.highway_p, self.highway_h))
        pairs = [
            pair
            for side_p, side_h in modules
            for pair in zip(side_p.named_parameters(), side_h.named_parameters(), strict=True)
        ]
        total = self.encoder_p.w.new_zeros(())
        for (name, w_p), (_, w_h) in pairs:
            if name == "w" or name.endswith("weight"):
                total = total + (w_p - w_h).pow(2).sum()
        return self.diff_penalty * total

    def paper_parameter_count(self) -> int:
        """Trainable parameters under the official script's convention.

        The official code counts only ``weights``/``biases``/``kernel``/``bias`` variables, so
        neither the word vectors nor the character embedding table; this makes the count
        independent of the vocabulary's alphabet. Its printout also skips the character
        convolution's kernel (named ``filter``; counted here) and counts its layout's redundant
        biases (docs/models/diin.md, "Parameter count").
        """
        char_table = self.char_features.embedding.weight
        return count_trainable_parameters(self, exclude=self.embedding) - (
            char_table.numel() if char_table.requires_grad else 0
        )

