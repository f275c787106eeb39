"""How a training step's cost grows with sentence length and batch size (issue 50, item 4).

For DIN-1 20×20 (``din1``, d = 400), DIIN (``diin``) and Decomposable Attention (``decatt``),
each built from its real config (``conf/``, composed with ``model=NAME``: the network, its
recipe's optimiser, clipping and regulariser), with 300-d random word vectors (frozen for DIN-1
and DecAtt, fine-tuned for DIIN, as their recipes do). Inputs are synthetic: random word ids of
exactly the given length in both sentences, no padding, over a generated vocabulary of
``--vocab`` pseudo-words (DIIN reads their characters). Two axes: length at batch
``--base-batch``, batch at length ``--base-length``. Each point runs in its own forked process
(nothing measured before it shares its heap). Per point:

- **ms/step**: median wall-clock time of ``--repeats`` training steps (forward, cross-entropy
  plus the network's regulariser, backward, the recipe's clipping and optimiser step) after one
  untimed step; **CPU ms**: the median CPU time of the same steps (``time.process_time``). With
  one thread on a busy machine the CPU time is close to what the step takes on an idle core;
  the wall time also holds the time the process waited for a core;
- **peak MiB**: the step's peak resident memory above what the process held before it (model,
  optimiser state, inputs): Linux's high-water mark ``VmHWM`` reset through
  ``/proc/self/clear_refs`` before the step, minus ``VmRSS`` then. Each point's process fixes
  glibc's mmap threshold at 64 KiB (``mallopt``) and trims the heap before the step, so freed
  tensors leave the resident set and the figure tracks the step's own tensors.
  ``tracemalloc`` cannot see torch's allocations; this can, on Linux only (elsewhere: n/a);
- **aten ops**: the torch profiler's ``aten::`` events in one forward + backward (no optimiser
  step), all of them, and the **kernel ops** among them: the leaves (no ``aten::`` child) that
  are not views or metadata (``view``, ``reshape``, ``transpose``, ``empty`` ...), roughly the
  kernels a GPU would launch. On a GPU that count, not FLOPs, sets the pace of the recurrent
  models.

DIIN zero-pads every sentence to ``model.net.sequence_length`` (its recipe: 48, so real SNLI
batches cost the 48-token point at most); a longer point raises it to that length.

    python benchmarks/cost_growth.py --out cost_growth          # all three, default grid
    python benchmarks/cost_growth.py --models din1 --lengths 8 16 32 64 --batches 16 32 64 128
    python benchmarks/cost_growth.py --quick                    # one small point per model
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import multiprocessing
import random
import statistics
import string
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from profile_step import compose_config, cpu_name

from entailment_lab.config import instantiate
from entailment_lab.data.text import PAD, UNK, Vocabulary
from entailment_lab.pipeline import build_module, build_net

MODELS = {"din1": ["dim=400", "embeddings.freeze=true"],
          "diin": [],  # its recipe fine-tunes the word vectors
          "decatt": ["embeddings.freeze=true"]}
LABELS = ["entailment", "neutral", "contradiction"]
# Leaf ops that only make a new view or allocate: no GPU kernel.
NO_KERNEL = {"aten::" + n for n in (
    "view", "reshape", "_reshape_alias", "_unsafe_view", "as_strided", "t", "transpose",
    "permute", "expand", "expand_as", "unsqueeze", "squeeze", "select", "slice", "narrow",
    "unbind", "split", "split_with_sizes", "chunk", "detach", "alias", "empty", "empty_like",
    "empty_strided", "resolve_conj", "resolve_neg", "lift_fresh", "numpy_T", "contiguous",
    "result_type", "size", "stride", "is_nonzero", "item", "_local_scalar_dense", "flatten",
    "unflatten", "view_as", "movedim", "diagonal", "_has_compatible_shallow_copy_type")}


def vocabulary(size: int, seed: int = 0) -> Vocabulary:
    """``size`` distinct lower-case pseudo-words of 3-10 letters after ``<pad>``, ``<unk>``."""
    rng, words = random.Random(seed), set()
    while len(words) < size:
        words.add("".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 10))))
    return Vocabulary([PAD, UNK, *sorted(words)])


# --- memory (Linux) ----------------------------------------------------------------------
def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter


def fixed_mmap_threshold(size: int = 65536) -> None:
    """Blocks of ``size`` bytes and more straight from mmap and back to the system on free
    (glibc's threshold otherwise grows after frees, and freed tensors stay resident)."""
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6").mallopt(M_MMAP_THRESHOLD, size)


def reset_peak() -> int | None:
    """Trim the heap, reset the resident high-water mark; the resident KiB now (None: not
    measurable here)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        Path("/proc/self/clear_refs").write_text("5")
        return _status_kib("VmRSS")
    except (OSError, KeyError):
        return None


def peak_since(start_kib: int | None) -> float | None:
    """MiB of the resident high-water mark above ``start_kib``."""
    return None if start_kib is None else (_status_kib("VmHWM") - start_kib) / 1024


# --- one model at one point --------------------------------------------------------------
class Point:
    """One model, built from its config, at one sentence length and batch size."""

    def __init__(self, model: str, length: int, batch: int, vocab: Vocabulary,
                 work: Path) -> None:
        overrides = [f"model={model}", "embeddings=random", "embeddings.dim=300", "logger=none",
                     *MODELS[model]]
        if model == "diin":  # DIIN pads to its sequence length; the recipe's 48, or longer
            overrides.append(f"data.max_length={max(48, length)}")
        cfg = compose_config(overrides, work)
        torch.manual_seed(0)
        embedding = instantiate(cfg.embeddings, "embeddings")(vocab=vocab)
        self.net = build_net(cfg.model.net, embedding, len(LABELS), vocab)
        module = build_module(cfg, self.net, embedding, LABELS, metadata={})
        configured = module.configure_optimizers()
        self.optimizer = configured["optimizer"] if isinstance(configured, dict) else configured
        self.clip = cfg.trainer.get("gradient_clip_val")
        self.params = [p for p in self.net.parameters() if p.requires_grad]
        ids = lambda: torch.randint(2, len(vocab.itos), (batch, length))  # noqa: E731
        mask = torch.ones(batch, length, dtype=torch.bool)
        self.inputs = {"premise": ids(), "premise_mask": mask, "hypothesis": ids(),
                       "hypothesis_mask": mask}
        self.labels = torch.randint(0, len(LABELS), (batch,))

    def forward_backward(self) -> None:
        self.net.train()
        logits = self.net(**self.inputs)["logits"]
        loss = F.cross_entropy(logits, self.labels)
        reg = self.net.regularization_loss()
        (loss if reg is None else loss + reg).backward()

    def step(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        self.forward_backward()
        if self.clip:
            torch.nn.utils.clip_grad_norm_(self.params, float(self.clip))
        self.optimizer.step()


def op_counts(point: Point) -> tuple[int, int]:
    """(all ``aten::`` events, kernel ops) of one forward + backward (torch profiler)."""
    point.optimizer.zero_grad(set_to_none=True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        point.forward_backward()
    aten = [e for e in prof.events() if e.name.startswith("aten::")]
    leaves = [e for e in aten if not any(c.name.startswith("aten::") for c in e.cpu_children)]
    return len(aten), sum(e.name not in NO_KERNEL for e in leaves)


def measure(model: str, length: int, batch: int, vocab: Vocabulary, repeats: int,
            work: Path, threads: int) -> dict[str, float | int | str | None]:
    """One point's figures, measured in this process."""
    torch.set_num_threads(threads)
    fixed_mmap_threshold()
    point = Point(model, length, batch, vocab, work)
    point.step()  # untimed: creates the optimiser state, warms the allocator
    point.optimizer.zero_grad(set_to_none=True)
    start = reset_peak()
    point.step()
    peak = peak_since(start)
    wall, cpu = [], []
    for _ in range(repeats):
        begin, begin_cpu = time.perf_counter(), time.process_time()
        point.step()
        wall.append(time.perf_counter() - begin)
        cpu.append(time.process_time() - begin_cpu)
    ops, kernels = op_counts(point)
    return {"model": model, "length": length, "batch": batch,
            "ms_step": 1000 * statistics.median(wall), "cpu_ms_step": 1000 * statistics.median(cpu),
            "peak_mib": peak, "aten_ops": ops,
            "kernel_ops": kernels}


def measure_apart(*args: object) -> dict[str, float | int | str | None]:
    """``measure`` in a process forked for this point alone, so no point inherits another's
    heap (the peak memory of a point measured after bigger ones came out up to 70 % higher)."""
    context = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else None)
    with ProcessPoolExecutor(1, mp_context=context) as pool:
        return pool.submit(measure, *args).result()


def grid(args: argparse.Namespace) -> list[tuple[int, int]]:
    """(length, batch) points: the length axis at ``base_batch``, the batch axis at
    ``base_length``, each point once."""
    points = [(n, args.base_batch) for n in args.lengths]
    points += [(args.base_length, b) for b in args.batches]
    return list(dict.fromkeys(points))


def print_row(row: dict) -> None:
    peak = "n/a" if row["peak_mib"] is None else f"{row['peak_mib']:.1f}"
    print(f"{row['model']:7s} {row['length']:6d} {row['batch']:6d} {row['ms_step']:9.1f} "
          f"{row['cpu_ms_step']:9.1f} {peak:>9s} {row['aten_ops']:9d} "
          f"{row['kernel_ops']:10d}", flush=True)


def plot(rows: list[dict], model: str, args: argparse.Namespace, out: Path) -> Path:
    """Step time and peak memory against length and batch size: one PNG for ``model``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(9, 6.5))
    axes_of = {"length": (args.base_batch, "batch", "sentence length (tokens, both sentences)"),
               "batch": (args.base_length, "length", "batch size (pairs)")}
    for col, (axis, (fixed, other, label)) in enumerate(axes_of.items()):
        sel = sorted((r for r in rows if r["model"] == model and r[other] == fixed),
                     key=lambda r: r[axis])
        xs = [r[axis] for r in sel]
        axes[0, col].plot(xs, [r["ms_step"] for r in sel], "o-", label="wall")
        axes[0, col].plot(xs, [r["cpu_ms_step"] for r in sel], "s--", label="CPU")
        axes[0, col].legend(fontsize=8)
        axes[0, col].set_ylabel("ms per training step")
        axes[1, col].plot(xs, [r["peak_mib"] or 0 for r in sel], "o-", color="tab:red")
        axes[1, col].set_ylabel("peak step memory (MiB)")
        for row, ax in enumerate(axes[:, col]):
            ax.set_xscale("log", base=2)
            ax.set_xticks(xs, [str(x) for x in xs])
            ax.grid(alpha=0.3)
            if row == 1:
                ax.set_xlabel(label)
        axes[0, col].set_title(f"{other} {fixed}; kernel ops: "
                               + ", ".join(str(r["kernel_ops"]) for r in sel), fontsize=8)
    fig.suptitle(f"{model}: training-step cost, {torch.get_num_threads()} thread(s), "
                 f"{cpu_name()}", fontsize=10)
    fig.tight_layout()
    path = out / f"cost_growth_{model}.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--lengths", nargs="+", type=int, default=[8, 16, 32, 64])
    parser.add_argument("--batches", nargs="+", type=int, default=[16, 32, 64, 128])
    parser.add_argument("--base-batch", type=int, default=32, help="batch of the length axis")
    parser.add_argument("--base-length", type=int, default=16, help="length of the batch axis")
    parser.add_argument("--repeats", type=int, default=3, help="timed steps per point")
    parser.add_argument("--vocab", type=int, default=2000, help="generated vocabulary size")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="folder for the PNGs")
    parser.add_argument("--quick", action="store_true",
                        help="one point per model: length 8, batch 8, one timed step")
    args = parser.parse_args(argv)
    if args.quick:
        args.lengths, args.batches, args.base_batch, args.base_length = [8], [8], 8, 8
        args.repeats = 1
    return args


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    vocab = vocabulary(args.vocab)
    work = Path(tempfile.mkdtemp(prefix="cost_growth_"))
    print(f"# {cpu_name()}, {torch.get_num_threads()} thread(s), torch {torch.__version__}; "
          f"synthetic ids of exact length, {args.repeats} timed step(s) per point (median)")
    print(f"{'model':7s} {'length':>6s} {'batch':>6s} {'ms/step':>9s} {'CPU ms':>9s} "
          f"{'peak MiB':>9s} {'aten ops':>9s} {'kernel ops':>10s}")
    rows = []
    for model in args.models:
        for length, batch in grid(args):
            rows.append(measure_apart(model, length, batch, vocab, args.repeats, work,
                                      args.threads))
            print_row(rows[-1])
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        for model in args.models:
            print(f"plot: {plot(rows, model, args, args.out)}")


if __name__ == "__main__":
    main()
