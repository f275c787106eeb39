"""Regenerate every weight-transfer fixture (``tests/models/NAME/NAME.pt``) from the third-party
checkouts, bit for bit: ``make references CHECKOUTS=DIR`` (tests/references/README.md).

DIR holds one git clone per repository, named as ``git clone`` names it (``DIR/InferSent``
for facebookresearch/InferSent). Each generator (``tests/models/NAME/make_fixture.py``, beside
its fixture) exports its pinned commit from the clone, applies its stored patch (``patches/``
here) and writes its fixture. The numerics are pinned: one
thread, MKL's conditional numerical reproducibility (``MKL_CBWR=COMPATIBLE``) and ATen's
portable kernels (``ATEN_CPU_CAPABILITY=default``), so that the bytes do not depend on the
thread count or on the processor's vector extensions.

``--check`` writes nothing: it regenerates into a scratch folder and compares each file with
the committed one byte for byte (exit 1 if one differs; for a difference it also prints the
largest difference between the two files' tensors). A fixture whose interpreter is not given
(DCNN's Theano, DIIN's TensorFlow 1.15) or whose checkout is missing is skipped with a line
saying why, and counts as not regenerated.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MODELS = ROOT / "tests" / "models"
PINNED = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MKL_CBWR": "COMPATIBLE",
          "ATEN_CPU_CAPABILITY": "default", "PYTHONHASHSEED": "0"}
#: fixture -> (its generator under tests/models/, the clone's folder name, the option naming a
#: second interpreter); fixture and generator share the model's folder, tests/models/NAME/
FIXTURES = {
    "decatt.pt": ("decatt/make_fixture.py", "SNLI-decomposable-attention", None),
    "lstm.pt": ("lstm/make_fixture.py", "InferSent", None),
    "mlstm.pt": ("mlstm/make_fixture.py", "match-lstm", None),
    "wbw_attention.pt": ("wbw_attention/make_fixture.py", "Recognizing-Textual-Entailment", None),
    "hyperlstm.pt": ("hyperlstm/make_fixture.py", "supercell", "--tf2-python"),
    "dcnn.pt": ("dcnn/make_fixture.py", "DynamicCNN", "--port-python"),
    "diin.pt": ("diin/make_fixture.py", "Densely-Interactive-Inference-Network", "--tf-python"),
}


def committed(fixture: str) -> Path:
    """Where the committed fixture lies: beside its generator (``tests/models/NAME/NAME.pt``).
    Its file name is kept on regeneration: ``torch.save`` names the archive's records after it."""
    return (MODELS / FIXTURES[fixture][0]).with_name(fixture)


def largest_difference(a: Path, b: Path) -> str:
    """The largest |difference| between the tensors of two fixture files (same structure)."""
    import torch

    def walk(x: object, y: object) -> float:
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.shape != y.shape:
                return float("inf")
            return float((x.double() - y.double()).abs().max()) if x.numel() else 0.0
        if isinstance(x, dict) and isinstance(y, dict):
            if set(x) != set(y):
                return float("inf")
            return max((walk(x[k], y[k]) for k in x), default=0.0)
        if isinstance(x, list | tuple) and isinstance(y, list | tuple):
            return max((walk(u, v) for u, v in zip(x, y, strict=True)), default=0.0)
        return 0.0 if x == y else float("inf")

    return f"{walk(torch.load(a), torch.load(b)):.3g}"


def run(fixture: str, checkouts: Path, out: Path, interpreters: dict[str, str | None]) -> str:
    """Regenerate one fixture into ``out``; returns why it was skipped, or ''."""
    generator, folder, option = FIXTURES[fixture]
    checkout = checkouts / folder
    if not checkout.is_dir():
        return f"no checkout {checkout}"
    command = [sys.executable, str(MODELS / generator), str(checkout), "--out", str(out)]
    if option == "--tf2-python":  # the whole generator runs under a Python with TensorFlow 2
        python = interpreters[option] or sys.executable
        probe = subprocess.run([python, "-c", "import tensorflow, torch"], capture_output=True,
                               check=False)
        if probe.returncode != 0:
            return f"{python} has no tensorflow (2.x) and torch: give --tf2-python PYTHON"
        command[0] = python
    elif option:  # a second interpreter for the upstream half
        if not interpreters[option]:
            return f"needs {option} PYTHON (see {generator}'s docstring)"
        command += [option, interpreters[option]]
    env = {**os.environ, **PINNED,
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    subprocess.run(command, check=True, env=env)
    return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkouts", type=Path, required=True, metavar="DIR",
                        help="the folder of the git clones (one per repository)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; compare the regenerated files with the committed ones")
    parser.add_argument("--only", nargs="+", choices=sorted(FIXTURES), default=sorted(FIXTURES),
                        metavar="FIXTURE", help="these fixtures only (e.g. lstm.pt)")
    parser.add_argument("--tf2-python", help="a Python with tensorflow 2 and torch (hyperlstm; "
                        "default: this one)")
    parser.add_argument("--port-python", help="Python 3.8 with Theano 1.0.5 and Lasagne (dcnn)")
    parser.add_argument("--tf-python", help="Python 3.7 with tensorflow-cpu 1.15.0 (diin)")
    args = parser.parse_args(argv)
    interpreters = {"--tf2-python": args.tf2_python, "--port-python": args.port_python,
                    "--tf-python": args.tf_python}
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        for fixture in args.only:
            out = Path(tmp) / fixture
            skipped = run(fixture, args.checkouts, out, interpreters)
            stored = committed(fixture)
            if skipped:
                print(f"{fixture}: not regenerated ({skipped})")
                failed = failed or args.check
            elif args.check:
                same = stored.read_bytes() == out.read_bytes()
                print(f"{fixture}: " + ("identical, bit for bit" if same else "DIFFERS (largest "
                                       f"|Δ| {largest_difference(stored, out)})"))
                failed = failed or not same
            else:
                same = stored.is_file() and stored.read_bytes() == out.read_bytes()
                shutil.copyfile(out, stored)
                print(f"{fixture}: " + ("unchanged" if same else "rewritten"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
