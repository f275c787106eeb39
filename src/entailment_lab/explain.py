"""Heat maps of what a model looked at (e.g. the DIN paper's Fig. 2 and Fig. 3).

Each network says which maps it has (``Network.heatmaps``: DIN's interaction norms and gate
changes, Decomposable Attention's soft alignment, DIIN's interaction image); this module only
draws them. Used by ``src/explain.py`` (one pair -> PNG files) and by ``HeatmapLogger`` (a few
test pairs -> W&B images at the end of testing).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import lightning as L
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from entailment_lab.config import explain_dir  # noqa: F401  (where explain.py writes; light)
from entailment_lab.data.transform import InputTransform
from entailment_lab.errors import UserError
from entailment_lab.models.base import HeatMap, Network

log = logging.getLogger(__name__)


def _title(label: str, probs: Sequence[float], names: Sequence[str]) -> str:
    shown = ", ".join(f"{n} {p:.2f}" for n, p in zip(names, probs, strict=True))
    return f"predicted: {label}  ({shown})"


def plot_heatmap(heatmap: HeatMap, caption: str = "") -> Figure:
    """A labelled heat map, sized to its words so every label stays readable; ``caption``
    (the prediction) goes under the map's title."""
    title = f"{heatmap.title}\n{caption}" if caption else heatmap.title
    rows, cols = heatmap.rows, heatmap.cols
    longest = max(len(line) for line in title.splitlines())
    height = max(2.5, 0.42 * len(rows) + 0.25 * title.count("\n") + 1.6)
    width = max(5.0, 0.5 * len(cols) + 2.6, 0.085 * longest)  # the title must fit too
    fig, ax = plt.subplots(figsize=(width, height), dpi=120)
    image = ax.imshow(heatmap.values.numpy(), cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(cols)), labels=cols, rotation=45, ha="right", fontsize=10)
    ax.set_yticks(range(len(rows)), labels=rows, fontsize=10)
    ax.set_xlabel(heatmap.xlabel)
    ax.set_ylabel(heatmap.ylabel)
    ax.set_title(title, fontsize=10)
    fig.colorbar(image, ax=ax, fraction=0.04, pad=0.02, label=heatmap.colorbar)
    fig.tight_layout()
    return fig


def figures_for(net: Network, details: Mapping[str, torch.Tensor], premise: Sequence[str],
                hypothesis: Sequence[str], caption: str, index: int = 0) -> dict[str, Figure]:
    """The network's heat maps of pair ``index`` of the batch, drawn."""
    maps = net.heatmaps(details, premise, hypothesis, index)
    return {name: plot_heatmap(heatmap, caption) for name, heatmap in maps.items()}


@torch.no_grad()
def explain_pair(module: L.LightningModule, premise: str, hypothesis: str) -> dict[str, Any]:
    """Predict one pair and return its tokens, probabilities and heat-map figures.

    The pair is read by the checkpoint's input transform (``module.metadata``), as training
    read its pairs: a hypothesis-only model sees one ``<unk>`` for the premise, and its maps
    say so."""
    if module.net.inputs != "pair":
        raise UserError(f"explain reads a premise and a hypothesis; this checkpoint's "
                        f"{type(module.net).__name__} reads single sentences")
    transform = InputTransform.of_checkpoint(module.metadata)
    transform.announce()
    tokens = transform.tokens({"premise": [premise], "hypothesis": [hypothesis]})
    words = {key: tokens[f"{key}_tokens"][0] for key in transform.keys}
    if not words["hypothesis"] or not (words["premise"] or transform.hypothesis_only):
        raise UserError("premise and hypothesis must each contain at least one word")
    p_tokens, h_tokens = (transform.seen(words[key]) for key in ("premise", "hypothesis"))
    module.eval()
    out = module(transform.tensors(transform.ids(tokens)), return_details=True)
    probs = torch.softmax(out["logits"][0], dim=-1).tolist()
    names = module.label_names
    label = names[max(range(len(probs)), key=probs.__getitem__)]
    title = _title(label, probs, names)
    return {"premise_tokens": p_tokens, "hypothesis_tokens": h_tokens, "probabilities":
            dict(zip(names, probs, strict=True)), "prediction": label,
            "figures": figures_for(module.net, out, p_tokens, h_tokens, title)}


class HeatmapLogger(L.Callback):
    """At the end of testing, log heat maps of the first ``num_examples`` test pairs to W&B.

    Does nothing unless a W&B logger is attached and the network returns analysis maps.
    """

    def __init__(self, num_examples: int = 3) -> None:
        self.num_examples = num_examples
        self.batch: dict[str, torch.Tensor] | None = None

    def on_test_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule,
                            batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        testing = getattr(pl_module, "eval_split", "test") == "test"  # not train/acc_eval
        if batch_idx == 0 and "premise" in batch and testing:
            self.batch = {k: v[: self.num_examples] for k, v in batch.items()}

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        from lightning.pytorch.loggers import WandbLogger

        wandb_loggers = [lg for lg in trainer.loggers if isinstance(lg, WandbLogger)]
        vocab = getattr(pl_module, "metadata", {}).get("vocab")
        if not wandb_loggers or self.batch is None or vocab is None:
            return
        batch = {k: v.to(pl_module.device) for k, v in self.batch.items()}
        with torch.no_grad():
            out = pl_module(batch, return_details=True)
        probs = torch.softmax(out["logits"], dim=-1).cpu()
        images, captions = [], []
        for i in range(len(batch["label"])):
            premise = [vocab[j] for j in batch["premise"][i][batch["premise_mask"][i]].tolist()]
            hyp = [vocab[j] for j in batch["hypothesis"][i][batch["hypothesis_mask"][i]].tolist()]
            pred = pl_module.label_names[int(probs[i].argmax())]
            gold = pl_module.label_names[int(batch["label"][i])]
            title = _title(pred, probs[i].tolist(), pl_module.label_names) + f"\ngold: {gold}"
            for name, fig in figures_for(pl_module.net, out, premise, hyp, title, i).items():
                images.append(fig)
                captions.append(f"example {i}: {name}")
        if images:
            for lg in wandb_loggers:
                lg.log_image(key="test/heatmaps", images=images, caption=captions)
        for fig in images:
            plt.close(fig)
        self.batch = None
