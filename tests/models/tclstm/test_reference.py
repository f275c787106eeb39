"""TC-LSTMs against an independent reference of the paper's equations (float64).

Liu, Qiu & Huang, "Modelling Interaction of Sentence Pair with Coupled-LSTMs" (EMNLP 2016):
the TC-LSTM unit (§3.2), four directional coupled-LSTMs summed by the aggregation layer, stacked
blocks, dynamic pooling, a fully connected layer and the output layer (§4). The reference below
shares no module, helper or index arithmetic with ``models/tclstm.py``: it walks one unpadded pair
cell by cell with plain Python loops, one gate matrix per gate, each direction from its own
corner with its own neighbours, and takes its weights from the model's ``state_dict`` through the
explicit name mapping of ``paper_weights``. Every reading it makes is listed in
``docs/models/tclstm.md`` ("Checked against the paper's equations"); the paper's text beyond its
abstract was not readable where this was written, so it checks our model against that stated
reading, not against a re-read PDF.
"""

from __future__ import annotations

import pytest
import torch

from entailment_lab.models.tclstm import TightlyCoupledLSTM
from tests.models.float64 import training_gap

VOCAB, EMB, D = 30, 5, 4
GATES = ("c", "o", "i", "f1", "f2")  # the order of T_{A,b}'s five output blocks (§3.2)
# The four directional coupled-LSTMs (§4), as (premise step, hypothesis step): direction 1 reads
# (i−1, j) and (i, j−1); 2 reads (i−1, j) and (i, j+1); 3 (i+1, j) and (i, j+1); 4 (i+1, j) and
# (i, j−1). The model keeps its per-direction units in this order.
DIRECTIONS = ((1, 1), (1, -1), (-1, -1), (-1, 1))

Weights = dict[str, torch.Tensor]


def paper_weights(state: dict[str, torch.Tensor], layers: int, d: int, mlp: bool) -> Weights:
    """The paper's matrices, by name, from our model's state_dict (the explicit mapping).

    ``blocks.{l}.weight`` (U, in + 2d, 5d) is T_A of block l for each of its U units (U = 1: one
    unit shared by the four directions); its rows act on [z_{i,j}; h_{i,j−1}; h_{i−1,j}] and its
    columns are the gate blocks [c̃; o; i; f¹; f²], so W_g^{(l,u)} = weight[u][:, g·d:(g+1)·d]ᵀ.
    ``blocks.{l}.bias`` (U, 1, 5d) is b. ``classifier.0`` is the fully connected layer,
    ``classifier.3`` the output layer (``classifier.0`` is the output layer when ``mlp`` is
    false); ``embedding.weight`` holds the word vectors.
    """
    weights: Weights = {"E": state["embedding.weight"]}
    for layer in range(layers):
        T = state[f"blocks.{layer}.weight"]  # (U, in + 2d, 5d)
        b = state[f"blocks.{layer}.bias"]  # (U, 1, 5d)
        for unit in range(T.size(0)):
            for g, gate in enumerate(GATES):
                weights[f"W_{gate}^{layer},{unit}"] = T[unit, :, g * d:(g + 1) * d].T  # (d, ·)
                weights[f"b_{gate}^{layer},{unit}"] = b[unit, 0, g * d:(g + 1) * d]  # (d,)
    if mlp:
        weights["W_fc"], weights["b_fc"] = state["classifier.0.weight"], state["classifier.0.bias"]
        weights["W_out"], weights["b_out"] = (state["classifier.3.weight"],
                                              state["classifier.3.bias"])
    else:
        weights["W_out"], weights["b_out"] = (state["classifier.0.weight"],
                                              state["classifier.0.bias"])
    return weights


def sigmoid(v: torch.Tensor) -> torch.Tensor:
    return 1.0 / (1.0 + torch.exp(-v))


def directional_grid(z: list[list[torch.Tensor]], w: Weights, layer: int, unit: int,
                     step_p: int, step_h: int, d: int, swap_forgets: bool = False
                     ) -> list[list[torch.Tensor]]:
    """One directional TC-LSTM over an n × m grid (§3.2), from the corner its steps point away
    from. ``z[i][j]`` is the cell's input: [x_i; y_j] in block 1, ĥ_{i,j} of the block below
    otherwise. Outside the grid h = c = 0."""
    n, m = len(z), len(z[0])
    zero = torch.zeros(d, dtype=torch.float64)
    h: dict[tuple[int, int], torch.Tensor] = {}
    c: dict[tuple[int, int], torch.Tensor] = {}
    rows = range(n) if step_p == 1 else range(n - 1, -1, -1)
    cols = range(m) if step_h == 1 else range(m - 1, -1, -1)
    for i in rows:
        for j in cols:
            along_h, along_p = (i, j - step_h), (i - step_p, j)  # "(i, j−1)" and "(i−1, j)"
            u = torch.cat([z[i][j], h.get(along_h, zero), h.get(along_p, zero)])
            gate = {g: w[f"W_{g}^{layer},{unit}"] @ u + w[f"b_{g}^{layer},{unit}"]
                    for g in GATES}
            c_tilde = torch.tanh(gate["c"])
            o, i_gate = sigmoid(gate["o"]), sigmoid(gate["i"])
            f1, f2 = sigmoid(gate["f1"]), sigmoid(gate["f2"])
            if swap_forgets:  # a misreading, to show the check can fail
                f1, f2 = f2, f1
            # c_{i,j} = c̃ ⊙ i + [f¹, f²]ᵀ [c_{i,j−1}; c_{i−1,j}];  h_{i,j} = o ⊙ tanh(c_{i,j})
            c[i, j] = c_tilde * i_gate + f1 * c.get(along_h, zero) + f2 * c.get(along_p, zero)
            h[i, j] = o * torch.tanh(c[i, j])
    return [[h[i, j] for j in range(m)] for i in range(n)]


def pool_region(k: int, parts: int, length: int) -> list[int]:
    """Dynamic pooling (§4, after Socher et al. 2011): part k of ``parts`` roughly equal parts of
    a sentence of ``length`` words; a sentence shorter than ``parts`` repeats its words."""
    start = (k * length) // parts
    end = (k + 1) * length // parts
    return list(range(start, end)) if end > start else [start]


def reference_logits(premise: list[int], hypothesis: list[int], w: Weights, *, layers: int,
                     d: int, shared: bool, pool: tuple[int, int], mlp: bool,
                     misreading: str = "") -> torch.Tensor:
    """The equations of §3.2 and §4 on one unpadded pair: logits (classes,)."""
    x = [w["E"][t] for t in premise]  # word vectors x_i
    y = [w["E"][t] for t in hypothesis]  # word vectors y_j
    n, m = len(x), len(y)
    z = [[torch.cat([x[i], y[j]]) for j in range(m)] for i in range(n)]  # block 1: [x_i; y_j]
    directions = DIRECTIONS if misreading != "one corner" else ((1, 1),) * 4
    for layer in range(layers):
        summed = [[torch.zeros(d, dtype=torch.float64) for _ in range(m)] for _ in range(n)]
        for k, (step_p, step_h) in enumerate(directions):
            grid = directional_grid(z, w, layer, 0 if shared else k, step_p, step_h, d,
                                    swap_forgets=misreading == "swapped forget gates")
            for i in range(n):
                for j in range(m):
                    summed[i][j] = summed[i][j] + grid[i][j]  # aggregation layer: the sum
        z = summed  # a stacked block reads ĥ_{i,j} of the block below
    p, q = pool
    v = []  # the pooled p × q × d features, flattened region by region
    for a in range(p):
        for b in range(q):
            cells = [z[i][j] for i in pool_region(a, p, n) for j in pool_region(b, q, m)]
            for unit in range(d):
                v.append(torch.stack([cell[unit] for cell in cells]).max())
    features = torch.stack(v)
    if mlp:
        features = torch.tanh(w["W_fc"] @ features + w["b_fc"])  # fully connected layer
    return w["W_out"] @ features + w["b_out"]  # output layer (softmax in the loss)


PAIRS = [([3, 7, 1, 9, 2], [4, 4, 8]), ([5], [6, 2, 11, 7]), ([12, 3, 3], [9]),
         ([2, 8, 14, 5, 6, 1], [13, 2]), ([7, 7], [1, 5, 9, 10, 3])]


def padded(sentences: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids (padding slots hold a real id, so only the mask hides them) and mask."""
    length = max(len(s) for s in sentences)
    ids = torch.full((len(sentences), length), 17, dtype=torch.long)
    mask = torch.zeros(len(sentences), length, dtype=torch.bool)
    for row, sentence in enumerate(sentences):
        ids[row, :len(sentence)] = torch.tensor(sentence)
        mask[row, :len(sentence)] = True
    return ids, mask


def build(**kwargs: object) -> TightlyCoupledLSTM:
    """The model under test, float64, in eval mode; weights U[−0.5, 0.5], word vectors N(0, 1)."""
    torch.manual_seed(7)
    embedding = torch.nn.Embedding(VOCAB, EMB, padding_idx=0)
    torch.nn.init.normal_(embedding.weight)
    model = TightlyCoupledLSTM(embedding, num_classes=3, dim=D, init_range=0.5, **kwargs)
    return model.double().eval()


CONFIGS = {
    "row 4's layout (shared unit, 2 x 1 pooling, FC)": {"num_layers": 2},
    "a unit per direction, 3 x 2 pooling, no FC": {"num_layers": 2, "share_directions": False,
                                                   "pool_rows": 3, "pool_cols": 2,
                                                   "mlp_size": 0},
    "one block, 2 x 2 pooling": {"num_layers": 1, "pool_rows": 2, "pool_cols": 2,
                                 "mlp_size": 3},
}


def run_both(kwargs: dict, misreading: str = "") -> tuple[torch.Tensor, torch.Tensor]:
    model = build(**kwargs)
    layers, mlp = kwargs.get("num_layers", 4), kwargs.get("mlp_size", 50) != 0
    w = paper_weights(model.state_dict(), layers, D, mlp)
    p_ids, p_mask = padded([p for p, _ in PAIRS])
    h_ids, h_mask = padded([h for _, h in PAIRS])
    with torch.no_grad():
        ours = model(p_ids, p_mask, h_ids, h_mask)["logits"]
        theirs = torch.stack([
            reference_logits(p, h, w, layers=layers, d=D,
                             shared=kwargs.get("share_directions", True),
                             pool=(kwargs.get("pool_rows", 2), kwargs.get("pool_cols", 1)),
                             mlp=mlp, misreading=misreading)
            for p, h in PAIRS])
    return ours, theirs


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_model_equals_the_equation_reference(name):
    """Five pairs of lengths 1-6 in one padded batch (shorter than the pooling grid too)."""
    ours, theirs = run_both(CONFIGS[name])
    assert ours.dtype == torch.float64 and ours.abs().max() > 0.1  # not a degenerate check
    torch.testing.assert_close(ours, theirs, rtol=0.0, atol=1e-12)


@pytest.mark.parametrize("misreading", ["swapped forget gates", "one corner"])
def test_the_reference_tells_a_misreading_apart(misreading):
    """The comparison can fail: the same weights under another reading give other logits."""
    ours, theirs = run_both(CONFIGS["row 4's layout (shared unit, 2 x 1 pooling, FC)"],
                            misreading)
    assert (ours - theirs).abs().max() > 1e-3


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_training_forward_and_gradients_equal_the_equation_reference(name):
    """Training mode (dropout 0, the default): the logits and every weight's gradient of the
    cross-entropy against the reference's autograd (``float64.training_gap``)."""
    kwargs = CONFIGS[name]
    model = build(dropout=0.0, **kwargs)
    layers, mlp = kwargs.get("num_layers", 4), kwargs.get("mlp_size", 50) != 0
    p_ids, p_mask = padded([p for p, _ in PAIRS])
    h_ids, h_mask = padded([h for _, h in PAIRS])

    def expected(state: dict[str, torch.Tensor]) -> torch.Tensor:
        w = paper_weights(state, layers, D, mlp)
        return torch.stack([
            reference_logits(p, h, w, layers=layers, d=D,
                             shared=kwargs.get("share_directions", True),
                             pool=(kwargs.get("pool_rows", 2), kwargs.get("pool_cols", 1)),
                             mlp=mlp) for p, h in PAIRS])

    inputs = {"premise": p_ids, "premise_mask": p_mask, "hypothesis": h_ids,
              "hypothesis_mask": h_mask}
    logit, grad = training_gap(model, inputs, torch.tensor([0, 1, 2, 1, 0]), expected)
    assert logit < 1e-12 and grad < 1e-10, (logit, grad)
