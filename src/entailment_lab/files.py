"""Atomic file writers: the one way results, heat maps and reports reach the disk.

Each writer fills a temporary file beside the target and renames it over the target, so a
reader (or a crash, or a failed render) never sees half a file, and no temporary is left behind.
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder, then rename it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """``write_bytes_atomic`` of UTF-8 text."""
    write_bytes_atomic(path, text.encode("utf-8"))


def figure_bytes(fig: Any, fmt: str = "png", dpi: float | None = None) -> bytes:
    """A Matplotlib figure rendered in memory (render first, write after: nothing half-done)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format=fmt, dpi=dpi or "figure")
    return buffer.getvalue()


def write_figure_atomic(path: str | os.PathLike, fig: Any, dpi: float | None = None) -> None:
    """Render ``fig`` in the format its file name says (``.png``) and write it atomically."""
    fmt = Path(path).suffix.lstrip(".") or "png"
    write_bytes_atomic(path, figure_bytes(fig, fmt, dpi))


def save_figures(figures: Mapping[str, Any], folder: str | os.PathLike, prefix: str = "",
                 dpi: float | None = None) -> list[Path]:
    """Write each figure as ``<folder>/<prefix><name>.png`` (atomically) and close it."""
    import matplotlib.pyplot as plt

    paths = []
    for name, fig in figures.items():
        path = Path(folder) / f"{prefix}{name}.png"
        write_figure_atomic(path, fig, dpi=dpi)
        plt.close(fig)
        paths.append(path)
    return paths
