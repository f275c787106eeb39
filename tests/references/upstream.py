"""The third-party code a fixture generator runs: a pinned commit of a public repository, with
the stored compatibility edits of ``patches/`` applied (tests/references/README.md).

A generator never runs a checkout as it finds it: ``Upstream.prepare`` exports the pinned
commit's files (``git archive``, so local edits and other commits of the checkout do not
matter) into a scratch folder and applies the repository's patch there. Plain Python (no
torch, no project import): the generators' other interpreters (Python 3.7 / 3.8 for the
TensorFlow 1 and Theano halves) import it too.
"""

from __future__ import annotations

import argparse
import io
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

PATCHES = Path(__file__).resolve().with_name("patches")


class Upstream:
    """``repository`` (owner/name on GitHub) at ``commit`` (40 hex digits); ``patch``: the file
    of ``patches/`` applied to it (None: used unmodified); ``paths``: the files or folders the
    generator needs (default: the whole tree; a mirror may lack a large data file)."""

    def __init__(self, repository: str, commit: str, patch: str | None = None,
                 paths: tuple[str, ...] = ()) -> None:
        self.repository, self.commit, self.patch, self.paths = repository, commit, patch, paths

    def __str__(self) -> str:
        return f"{self.repository}@{self.commit[:7]}" + (f" + patches/{self.patch}"
                                                        if self.patch else "")

    def main(self, make: Callable[[Path, Path], None], out: Path, doc: str) -> None:
        """A generator's command line: ``CHECKOUT [--out FILE]``; exports and patches the pinned
        commit into a scratch folder and calls ``make(prepared tree, out file)``."""
        parser = argparse.ArgumentParser(description=doc.splitlines()[0])
        patched = " and patched" if self.patch else ""
        parser.add_argument("checkout", type=Path, help=f"a git clone of {self.repository} "
                            f"(its pinned commit is exported{patched})")
        parser.add_argument("--out", type=Path, default=out)
        args = parser.parse_args()
        with tempfile.TemporaryDirectory() as tmp:
            make(self.prepare(args.checkout, Path(tmp)), args.out)

    def prepare(self, checkout: Path, into: Path) -> Path:
        """The pinned commit's files from the git clone ``checkout``, patched, in ``into``."""
        checkout = Path(checkout)
        found = subprocess.run(["git", "-C", str(checkout), "cat-file", "-e",
                                f"{self.commit}^{{commit}}"], capture_output=True, check=False)
        if found.returncode != 0:
            raise SystemExit(
                f"{checkout}: not a git clone holding commit {self.commit} of {self.repository};"
                f" make one with: git clone https://github.com/{self.repository} {checkout}")
        tar = subprocess.run(["git", "-C", str(checkout), "archive", "--format=tar",
                              self.commit, *self.paths], capture_output=True, check=True).stdout
        into.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
            archive.extractall(into, filter="data")
        if self.patch:
            subprocess.run(["git", "apply", "--whitespace=nowarn", str(PATCHES / self.patch)],
                           cwd=into, check=True)
        return into
