"""Length-bucketed batching and padding collation."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import torch
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import Sampler

from entailment_lab.data.text import PAD_ID


class BucketBatchSampler(Sampler[list[int]]):
    """Batches of similar length: less padding, so recurrent models do less wasted work.

    Training: shuffle all indices, cut them into pools of ``batch_size * pool_batches``, sort
    each pool by length, cut it into batches and shuffle the batches. Evaluation: sort
    everything by length (deterministic). ``lengths`` may be a (n, k) array (premise and
    hypothesis length); rows are then ordered lexicographically.

    Distributed training: Lightning's sampler replacement is off (``use_distributed_sampler:
    false``); this sampler gives rank ``r`` every ``num_replicas``-th batch. Training
    (``shuffle``) pads the batch list by repetition so all ranks run the same number of steps
    (gradient all-reduce needs it); evaluation does not pad, so every example is counted exactly
    once when the metrics are reduced across ranks.
    """

    def __init__(
        self,
        lengths: np.ndarray,
        batch_size: int,
        shuffle: bool,
        seed: int = 0,
        pool_batches: int = 50,
        drop_last: bool = False,
        num_replicas: int = 1,
        rank: int = 0,
    ) -> None:
        lengths = np.asarray(lengths)
        self.keys = lengths if lengths.ndim == 1 else lengths.reshape(len(lengths), -1)
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.pool_batches = pool_batches
        self.drop_last = drop_last
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Called by Lightning at each epoch start: a new shuffle per epoch, same on every rank."""
        self.epoch = epoch

    def _order(self, indices: np.ndarray) -> np.ndarray:
        keys = self.keys[indices]
        if keys.ndim == 1:
            return indices[np.argsort(keys, kind="stable")]
        return indices[np.lexsort(keys.T[::-1])]

    def _batch_size(self) -> int:
        """Evaluation over several ranks: small enough that every rank gets a batch."""
        if self.shuffle or self.num_replicas == 1:
            return self.batch_size
        return max(1, min(self.batch_size, math.ceil(len(self.keys) / self.num_replicas)))

    def _batches(self) -> list[np.ndarray]:
        n = len(self.keys)
        if self.shuffle:
            rng = np.random.default_rng(self.seed + self.epoch)
            indices = rng.permutation(n)
            pool = self.batch_size * self.pool_batches
            indices = np.concatenate(
                [self._order(indices[i : i + pool]) for i in range(0, n, pool)] or [indices]
            )
        else:
            indices = self._order(np.arange(n))
        size = self._batch_size()
        batches = [indices[i : i + size] for i in range(0, n, size)]
        if self.drop_last and batches and len(batches[-1]) < self.batch_size:
            batches.pop()
        if self.shuffle:
            rng.shuffle(batches)
        if self.num_replicas > 1:
            if self.shuffle:
                total = math.ceil(len(batches) / self.num_replicas) * self.num_replicas
                batches += batches[: total - len(batches)]
            batches = batches[self.rank :: self.num_replicas]
        return batches

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self._batches():
            yield batch.tolist()

    def __len__(self) -> int:
        size = self._batch_size()
        n = len(self.keys) // size if self.drop_last else math.ceil(len(self.keys) / size)
        if self.shuffle:
            return math.ceil(n / self.num_replicas)
        return len(range(self.rank, n, self.num_replicas))


def pad_ids(sequences: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad id lists with ``PAD_ID``: ids (batch, max_len), long, and mask, bool."""
    rows = [torch.as_tensor(seq, dtype=torch.long) for seq in sequences]
    ids = pad_sequence(rows, batch_first=True, padding_value=PAD_ID)
    lengths = torch.tensor([len(row) for row in rows])
    mask = torch.arange(ids.size(1)).unsqueeze(0) < lengths.unsqueeze(1)
    return ids, mask


#: Batch keys that name an example's group for the evaluation breakdowns (``group/overlap``):
#: read by the LightningModule, never passed to the network.
GROUP_PREFIX = "group/"
#: Batch key (and evaluation-split column) of each example's row in its split: batches are
#: bucketed by length, and the test loop puts each prediction back in file order with it.
ROW_KEY = "row"


def network_inputs(batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A batch less what no network reads: the labels, the rows and the ``group/`` ids."""
    return {k: v for k, v in batch.items()
            if k not in ("label", ROW_KEY) and not k.startswith(GROUP_PREFIX)}


class PadCollator:
    """Collate examples into ``{key: ids, key_mask: mask, ..., "label": labels}``, plus
    ``group/<name>`` (int ids) for each of ``groups`` (columns ``group_<name>``) and the
    examples' rows (``ROW_KEY``) where they carry them (evaluation splits).

    ``keys`` are the text keys (``premise``, ``hypothesis`` or ``sentence``); examples hold
    ``<key>_ids`` lists. A picklable class (not a closure) so DataLoader workers can use it.
    """

    def __init__(self, keys: Sequence[str], groups: Sequence[str] = ()) -> None:
        self.keys = list(keys)
        self.groups = list(groups)

    def __call__(self, examples: Sequence[dict]) -> dict[str, torch.Tensor]:
        batch: dict[str, torch.Tensor] = {}
        for key in self.keys:
            batch[key], batch[f"{key}_mask"] = pad_ids([ex[f"{key}_ids"] for ex in examples])
        batch["label"] = torch.tensor([ex["label"] for ex in examples], dtype=torch.long)
        for group in self.groups:  # evaluation breakdowns, not network inputs
            batch[f"{GROUP_PREFIX}{group}"] = torch.tensor([ex[f"group_{group}"]
                                                            for ex in examples])
        if examples and ROW_KEY in examples[0]:
            batch[ROW_KEY] = torch.tensor([ex[ROW_KEY] for ex in examples], dtype=torch.long)
        return batch
