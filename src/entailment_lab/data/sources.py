"""Reading raw splits from the Hugging Face hub or from local files in the hub's schema,
with validation that turns bad input into one-line errors naming the file, line and field.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.compute as pc

from entailment_lab.errors import DataError
from entailment_lab.online import unreachable

log = logging.getLogger(__name__)

_BUILDERS = {".jsonl": "json", ".json": "json", ".jsonl.gz": "json", ".json.gz": "json",
             ".parquet": "parquet"}


def _builder_for(path: Path) -> str:
    name = path.name.lower()
    for suffix, builder in _BUILDERS.items():
        if name.endswith(suffix):
            return builder
    raise DataError(
        f"{path}: unsupported file type; use .jsonl, .jsonl.gz or .parquet files in the "
        "Hugging Face hub's schema"
    )


def _open_text(path: Path):
    return gzip.open(path, "rt", encoding="utf-8") if path.name.endswith(".gz") else path.open(
        encoding="utf-8"
    )


def _json_line_of_row(path: Path, row: int) -> int:
    """1-based line number of the ``row``-th JSON object (blank lines are skipped by the loader)."""
    seen = -1
    with _open_text(path) as f:
        for lineno, line in enumerate(f, start=1):
            if line.strip():
                seen += 1
                if seen == row:
                    return lineno
    return row + 1


def _find_bad_json_line(path: Path) -> str | None:
    """The first line of a JSON Lines file that is not a JSON object, as 'line N: why'."""
    try:
        with _open_text(path) as f:
            for lineno, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as err:
                    return f"line {lineno}: not valid JSON ({err.msg} at column {err.colno})"
                if not isinstance(obj, dict):
                    return f"line {lineno}: expected a JSON object, found {type(obj).__name__}"
    except (OSError, UnicodeDecodeError, EOFError) as err:
        return f"cannot be read ({err})"
    return None


def load_local_split(path: str | os.PathLike, split: str, cache_dir: str | None = None
                     ) -> datasets.Dataset:
    """One split from a local ``.jsonl`` / ``.jsonl.gz`` / ``.parquet`` file."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise DataError(f"data.files.{split}: no such file '{file}'")
    builder = _builder_for(file)
    try:
        return datasets.load_dataset(builder, data_files=str(file), split="train",
                                     cache_dir=cache_dir)
    except Exception as err:  # the loaders raise many types; we re-diagnose below
        where = _find_bad_json_line(file) if builder == "json" else None
        detail = where or f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        raise DataError(f"{file}: {detail}") from err


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face hub answers (one request, not a 20-second retry loop)."""
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "") or os.environ.get(
        "HF_DATASETS_OFFLINE", "0"
    ) not in ("0", ""):
        return False
    return unreachable(os.environ.get("HF_ENDPOINT", "https://huggingface.co"), timeout) is None


def _load_hub_dataset(name: str, config: str | None, cache_dir: str | None, online: bool,
                      state: str) -> datasets.DatasetDict:
    """``datasets.load_dataset`` from the hub (``online``) or from the local cache only; a
    failure is one ``DataError`` line that says ``state`` and how to use local files."""
    how_local = (
        "use local files in the hub's schema instead: data.files.train=PATH "
        "data.files.validation=PATH data.files.test=PATH (.jsonl, .jsonl.gz or .parquet)"
    )
    try:
        if online:
            return datasets.load_dataset(name, config, cache_dir=cache_dir)
        # Offline: read the cached copy without the hub client's retry loop.
        with _HubOffline():
            return datasets.load_dataset(name, config, cache_dir=cache_dir)
    except Exception as err:
        raise DataError(
            f"cannot load '{name}' from the Hugging Face hub ({state}; "
            f"{type(err).__name__}); {how_local}"
        ) from err


def download_hub_dataset(name: str, config: str | None, cache_dir: str | None = None) -> None:
    """Download a hub dataset into the local cache (``prepare_data``).

    Offline (the hub unreachable), only check that the cache has it, failing fast otherwise.
    """
    online = hub_reachable()
    state = "online" if online else "offline (the hub is unreachable)"
    _load_hub_dataset(name, config, cache_dir, online, state)


def load_hub_splits(name: str, config: str | None, splits: list[str], cache_dir: str | None = None
                    ) -> dict[str, datasets.Dataset]:
    """Splits of a hub dataset from the local cache (``download_hub_dataset`` fills it)."""
    ds = _load_hub_dataset(name, config, cache_dir, online=False,
                           state="from the local cache, which prepare_data() fills")
    missing = [s for s in splits if s not in ds]
    if missing:
        raise DataError(f"hub dataset '{name}' has no split(s) {missing} (has {list(ds)})")
    return {s: ds[s] for s in splits}


class _HubOffline:
    """Temporarily switch the hub client and ``datasets`` to offline mode."""

    def __enter__(self) -> None:
        import huggingface_hub.constants as hub_constants

        self._saved = (datasets.config.HF_HUB_OFFLINE, hub_constants.HF_HUB_OFFLINE)
        datasets.config.HF_HUB_OFFLINE = True
        hub_constants.HF_HUB_OFFLINE = True

    def __exit__(self, *exc: object) -> None:
        import huggingface_hub.constants as hub_constants

        datasets.config.HF_HUB_OFFLINE, hub_constants.HF_HUB_OFFLINE = self._saved


def resolve_columns(
    column_names: Sequence[str], candidates: Mapping[str, Sequence[str]], where: str
) -> dict[str, str]:
    """For each batch key, the first of its candidate columns that the data has.

    Candidates let one config read both the hub's and a local file's naming (SST-5 on the hub
    calls the text ``text``, the SentEval-derived files ``sentence``).
    """
    resolved = {}
    for key, options in candidates.items():
        column = next((c for c in options if c in column_names), None)
        if column is None:
            knob = "data.label_field" if key == "label" else f"data.fields.{key}"
            names = " or ".join(f"'{c}'" for c in options)
            raise DataError(
                f"{where}: no field {names} (fields found: {', '.join(sorted(column_names))}); "
                f"set {knob} to the column that holds it"
            )
        resolved[key] = column
    return resolved


def validate_split(
    ds: datasets.Dataset,
    split: str,
    columns: Mapping[str, str],
    valid_labels: set[int],
    source: str | None,
) -> None:
    """Check text columns hold non-null strings and the ``label`` column known integer ids.

    ``columns`` maps batch keys (and ``"label"``) to dataset columns. ``source`` is the local
    file (for line numbers) or ``None`` for hub data (row numbers).
    """
    where = source or f"split '{split}'"
    label_field = columns["label"]
    text_columns = [c for k, c in columns.items() if k != "label"]

    def position(row: int) -> str:
        if source and source.endswith((".jsonl", ".jsonl.gz", ".json", ".json.gz")):
            return f"line {_json_line_of_row(Path(source), row)}"
        return f"row {row}"

    table = ds.data.table if hasattr(ds.data, "table") else ds.data
    for column in text_columns:
        values = table.column(column)
        if not pa.types.is_string(values.type) and not pa.types.is_large_string(values.type):
            if values.null_count == len(values):
                raise DataError(f"{where}: field '{column}' is empty in every row")
            raise DataError(f"{where}: field '{column}' must hold text, found {values.type}")
        if values.null_count:
            row = pc.index(pc.is_null(values), True).as_py()
            raise DataError(f"{where}: {position(row)}: field '{column}' is missing or null")
    labels = table.column(label_field)
    if labels.null_count:
        row = pc.index(pc.is_null(labels), True).as_py()
        raise DataError(f"{where}: {position(row)}: field '{label_field}' is missing or null")
    if not pa.types.is_integer(labels.type):
        first = labels[0].as_py() if len(labels) else None
        raise DataError(
            f"{where}: field '{label_field}' must be an integer class id as in the hub's schema "
            f"(found {labels.type}, e.g. {first!r}); map label names to ids first"
        )
    bad = pc.invert(pc.is_in(labels, value_set=pa.array(sorted(valid_labels), labels.type)))
    if pc.any(bad).as_py():
        row = pc.index(bad, True).as_py()
        raise DataError(
            f"{where}: {position(row)}: unknown {label_field} value {labels[row].as_py()} "
            f"(expected one of {sorted(valid_labels)})"
        )
