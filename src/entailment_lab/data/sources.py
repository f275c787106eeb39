"""Reading raw splits from the Hugging Face hub or from local files, with validation that turns
bad input into one-line errors naming the file, line and field, what is wrong and how to fix it.

Local files are read by the ``datasets`` builders: JSON Lines (``.jsonl``, also Stanford's
``snli_1.0_*.jsonl`` / MultiNLI's ``multinli_1.0_*.jsonl``), Parquet, and delimited text with a
header row (``.txt`` / ``.tsv`` tab-separated as in ``snli_1.0_*.txt``, ``.csv``); any of the
text formats may be gzip-compressed. Labels may be integer ids (the hub's schema) or label names
(``gold_label``: ``entailment`` ...; ``-`` means no gold label and becomes -1).
"""

from __future__ import annotations

import csv
import gzip
import itertools
import json
import logging
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import datasets
import pyarrow as pa
import pyarrow.compute as pc

from entailment_lab.errors import DataError
from entailment_lab.online import hub_unreachable

log = logging.getLogger(__name__)

NO_GOLD = "-"  # SNLI's / MultiNLI's gold_label when the annotators did not agree


@dataclass(frozen=True)
class FileFormat:
    """One kind of local file: its name, the ``datasets`` builder that loads a whole split, and
    the options both readers (``load_local_split`` and the streaming ``read_rows``) share."""

    name: str  # jsonl, parquet, tsv, csv
    builder: str
    delimiter: str | None = None  # delimited text: the first line is a header row
    options: dict[str, Any] = field(default_factory=dict)


# Tab-separated files as Stanford distributes them are not CSV-quoted ('"Hello" said ...'), so
# quotes are text; empty cells stay empty strings ("n/a" and "NA" are text, not missing).
_TSV = FileFormat("tsv", "csv", "\t", {"quoting": csv.QUOTE_NONE, "na_filter": False})
_FORMATS = {
    ".jsonl": FileFormat("jsonl", "json"), ".json": FileFormat("jsonl", "json"),
    ".parquet": FileFormat("parquet", "parquet"), ".txt": _TSV, ".tsv": _TSV,
    ".csv": FileFormat("csv", "csv", ",", {"na_filter": False}),
}
_SUPPORTED = ".jsonl, .txt / .tsv (tab-separated, header row), .csv (each also .gz) or .parquet"


def file_format(path: str | os.PathLike, what: str = "") -> FileFormat:
    """The format of a local file from its name (``.gz`` allowed after a text suffix); a
    ``DataError`` (naming ``what``, e.g. ``input``) for any other name."""
    path = Path(path)
    name = path.name.lower().removesuffix(".gz")
    fmt = _FORMATS.get(Path(name).suffix)
    if fmt is None or (fmt.builder == "parquet" and path.name.lower().endswith(".gz")):
        where = f"{what}: '{path}'" if what else str(path)
        raise DataError(f"{where}: unsupported file type; use {_SUPPORTED} files")
    return fmt


def open_text(path: Path, mode: str = "r") -> IO[str]:
    """A local text file, gzip-compressed if named ``.gz``; a byte-order mark is skipped."""
    encoding = "utf-8-sig" if mode == "r" else "utf-8"  # a spreadsheet's byte-order mark
    if path.name.lower().endswith(".gz"):
        return gzip.open(path, f"{mode}t", encoding=encoding, newline="")
    return path.open(mode, encoding=encoding, newline="")


def _unreadable(path: Path, err: Exception) -> str:
    """Why ``path`` cannot be read as UTF-8 text, as 'line N: why; fix' where possible."""
    if isinstance(err, UnicodeDecodeError):
        with gzip.open(path) if path.name.endswith(".gz") else path.open("rb") as f:
            for lineno, line in enumerate(f, start=1):
                try:
                    line.decode("utf-8")
                except UnicodeDecodeError as bad:
                    return (f"line {lineno}, column {bad.start + 1}: not UTF-8 text (byte "
                            f"{line[bad.start]:#04x}); save the file as UTF-8")
    return f"cannot be read ({err}); give a UTF-8 text file (gzip-compressed if named .gz)"


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(1-based line number, line) of every line that the loaders do not skip as blank."""
    with open_text(path) as f:
        for lineno, line in enumerate(f, start=1):
            if line.strip():
                yield lineno, line


def _line_of_row(path: Path, row: int, header: bool) -> int:
    """1-based line number of data row ``row`` (blank lines and the header row skipped)."""
    for seen, (lineno, _) in enumerate(_lines(path)):
        if seen == row + header:
            return lineno
    return row + 1 + header


def _head(path: Path) -> list[str]:
    """The first two non-blank lines of a text file (fewer for a short one); ``DataError`` if
    it cannot be read."""
    try:
        lines = _lines(path)
        try:
            return [line for _, line in itertools.islice(lines, 2)]
        finally:
            lines.close()  # closes the file
    except (OSError, UnicodeDecodeError, EOFError) as err:
        raise DataError(f"{path}: {_unreadable(path, err)}") from err


def _header_features(path: Path, line: str, delimiter: str) -> datasets.Features:
    """Every column of a delimited file read as text (labels are mapped afterwards), so a
    column never changes type between chunks."""
    quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
    names = next(csv.reader([line.rstrip("\r\n")], delimiter=delimiter, quoting=quoting))
    repeated = sorted({n for n in names if names.count(n) > 1 or not n.strip()})
    if repeated:
        raise DataError(
            f"{path}: line 1: the header row must name every column once (repeated or empty: "
            f"{', '.join(repr(n) for n in repeated)}); fix the first line of the file"
        )
    return datasets.Features({name: datasets.Value("string") for name in names})


@contextmanager
def _quiet_loaders() -> Iterator[None]:
    """Silence the builders' own ``[ERROR]`` lines: they name a row of an internal block, not a
    line of the file, and our one-line ``DataError`` follows anyway."""
    loggers = [logging.getLogger(f"datasets.packaged_modules.{b}.{b}") for b in ("json", "csv")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def _find_bad_json_line(file: Path) -> str | None:
    """The first line of a JSON Lines file that is not a JSON object, as 'line N: why; fix'."""
    try:
        for lineno, line in _lines(file):
            try:
                obj = json.loads(line.rstrip("\r\n"))  # a cut line: "Unterminated ..."
            except json.JSONDecodeError as err:
                what = err.msg.removesuffix(" at")  # "Unterminated string starting at"
                return (f"line {lineno}, column {err.colno}: not valid JSON ({what}); each line "
                        "must be one JSON object")
            if not isinstance(obj, dict):
                return (f"line {lineno}: expected a JSON object, found {type(obj).__name__}; "
                        "each line must be one JSON object such as {\"premise\": ...}")
    except (OSError, UnicodeDecodeError, EOFError) as err:
        return _unreadable(file, err)
    return None


def _explain_load_error(file: Path, fmt: FileFormat, err: BaseException) -> str:
    """What went wrong while a builder read ``file``, as 'line N: why; fix' where possible."""
    if fmt.builder == "json":
        found = _find_bad_json_line(file)
        if found:
            return found
    chain = [err]
    while chain[-1].__cause__ or chain[-1].__context__:
        chain.append(chain[-1].__cause__ or chain[-1].__context__)
    for cause in chain:
        fields = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", str(cause))
        if fields:
            expected, line, saw = fields.groups()
            sep = "tab" if fmt.delimiter == "\t" else "comma"
            return (f"line {line}: {saw} {sep}-separated fields where the header row has "
                    f"{expected}; every row needs one field per header column")
        if isinstance(cause, UnicodeDecodeError):
            return _unreadable(file, cause)
    text = str(chain[-1]).strip().splitlines()
    return f"cannot be read as {_SUPPORTED} ({type(chain[-1]).__name__}: " \
           f"{text[0] if text else ''})"


def load_local_split(path: str | os.PathLike, split: str, cache_dir: str | None = None,
                     key: str | None = None) -> datasets.Dataset:
    """One split from a local file (formats: the module docstring), through ``datasets``;
    errors name the config ``key`` that gave the file (default ``data.files.<split>``)."""
    key = key or f"data.files.{split}"
    file = Path(path).expanduser()
    if not file.is_file():
        raise DataError(f"{key}: no such file '{file}'")
    fmt = file_format(file)
    head = [file.name] * bool(file.stat().st_size) if fmt.builder == "parquet" else _head(file)
    one_per_line = f"{key} must name a file with one example per line"
    if not head:
        raise DataError(f"{file}: the file is empty; {one_per_line}")
    options = dict(fmt.options)
    if fmt.delimiter:
        if len(head) < 2:
            raise DataError(f"{file}: no rows below the header row; {one_per_line}")
        options.update(delimiter=fmt.delimiter,
                       features=_header_features(file, head[0], fmt.delimiter))
    try:
        with _quiet_loaders():
            ds = datasets.load_dataset(fmt.builder, data_files=str(file), split="train",
                                       cache_dir=cache_dir, **options)
    except Exception as err:  # the builders raise many types; re-diagnosed from the file
        raise DataError(f"{file}: {_explain_load_error(file, fmt, err)}") from err
    if len(ds) == 0:
        raise DataError(f"{file}: no rows; {one_per_line}")
    return ds


Row = tuple[int, dict[str, Any]]  # (line number, the row's fields)


def read_rows(path: str | os.PathLike) -> Iterator[Row]:
    """The rows of a local file, one at a time, with their line numbers: the streaming reader
    (``predict.py`` reads files of any size through it); ``load_local_split`` loads a whole
    split through ``datasets``. Both take the formats of ``file_format``.

    Blank lines are skipped; a malformed line raises a ``DataError`` naming the file and line.
    """
    path = Path(path).expanduser()
    fmt = file_format(path, "input")
    if fmt.builder == "parquet":
        import pyarrow.parquet as pq

        for lineno, row in enumerate(pq.read_table(path).to_pylist(), start=1):
            yield lineno, row
        return
    lineno = 0
    try:
        with open_text(path) as f:
            if fmt.delimiter is None:
                for lineno, line in enumerate(f, start=1):
                    if line.strip():
                        yield lineno, _json_object(line, path, lineno)
            else:
                quoting = fmt.options.get("quoting", csv.QUOTE_MINIMAL)
                yield from _delimited_rows(csv.reader(f, delimiter=fmt.delimiter,
                                                      quoting=quoting), path)
    except (UnicodeDecodeError, OSError, EOFError) as err:
        raise DataError(f"{path}: cannot be read after line {lineno} ({err})") from None


def _json_object(line: str, path: Path, lineno: int) -> dict[str, Any]:
    try:  # without its line break, so an error at the line's end is in this line's columns
        row = json.loads(line.rstrip("\r\n"))
    except json.JSONDecodeError as err:
        raise DataError(f"{path} line {lineno}: not valid JSON ({err.msg} at column "
                        f"{err.colno})") from None
    if not isinstance(row, dict):
        raise DataError(f"{path} line {lineno}: expected a JSON object, found "
                        f"{type(row).__name__}")
    return row


def _delimited_rows(reader: Iterator[list[str]], path: Path) -> Iterator[Row]:
    """Rows of a CSV/TSV reader whose first row is the header."""
    try:
        header = next(reader, None)
        if header is None:
            return
        if len(set(header)) != len(header):
            raise DataError(f"{path} line 1: the header names a column twice ({header})")
        start = reader.line_num + 1
        for values in reader:
            lineno, start = start, reader.line_num + 1  # a quoted value may span lines
            if not values:
                continue
            if len(values) != len(header):
                raise DataError(f"{path} line {lineno}: {len(values)} values for "
                                f"{len(header)} columns ({', '.join(header)})")
            yield lineno, dict(zip(header, values, strict=True))
    except csv.Error as err:
        raise DataError(f"{path} line {reader.line_num}: not valid CSV ({err})") from None


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face hub answers (one request, not a 20-second retry loop)."""
    return hub_unreachable(timeout) is None


def _load_hub_dataset(name: str, config: str | None, cache_dir: str | None, online: bool,
                      state: str, splits: Sequence[str] = ("train", "validation", "test")
                      ) -> datasets.DatasetDict:
    """``datasets.load_dataset`` from the hub (``online``) or from the local cache only; a
    failure is one ``DataError`` line that says ``state`` and how to use local files (one
    ``data.files.<split>=PATH`` for each of ``splits``)."""
    how_local = (
        "use local files in the hub's schema instead: "
        f"{' '.join(f'data.files.{s}=PATH' for s in splits)} ({_SUPPORTED})"
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


def download_hub_dataset(name: str, config: str | None, cache_dir: str | None = None,
                         local_splits: Sequence[str] = ("train", "validation", "test")) -> None:
    """Download a hub dataset into the local cache (``prepare_data``).

    Offline (the hub unreachable), only check that the cache has it, failing fast otherwise;
    the error names the ``data.files.<split>`` keys of ``local_splits`` that replace the hub.
    """
    online = hub_reachable()
    state = "online" if online else "offline (the hub is unreachable)"
    _load_hub_dataset(name, config, cache_dir, online, state, local_splits)


def load_hub_splits(name: str, config: str | None, splits: list[str], cache_dir: str | None = None,
                    local_splits: Sequence[str] = ("train", "validation", "test")
                    ) -> dict[str, datasets.Dataset]:
    """Splits of a hub dataset from the local cache (``download_hub_dataset`` fills it)."""
    ds = _load_hub_dataset(name, config, cache_dir, online=False,
                           state="from the local cache, which prepare_data() fills",
                           splits=local_splits)
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


def knob(key: str) -> str:
    """The config key that maps batch key ``key`` to a column of the data."""
    return "data.label_field" if key == "label" else f"data.fields.{key}"


def resolve_columns(
    column_names: Sequence[str], candidates: Mapping[str, Sequence[str]], where: str
) -> dict[str, str]:
    """For each batch key, the first of its candidate columns that the data has.

    Candidates let one config read several layouts: the hub's ``premise`` / ``label`` and
    Stanford's ``sentence1`` / ``gold_label``; SST-5's ``text`` (hub) and ``sentence`` (files).
    """
    resolved = {}
    for key, options in candidates.items():
        column = next((c for c in options if c in column_names), None)
        if column is None:
            names = " or ".join(f"'{c}'" for c in options)
            suffix = Path(where.lower().removesuffix(".gz")).suffix
            delimited = suffix in _FORMATS and _FORMATS[suffix].delimiter
            header = " (a delimited file's first line must be its header row)" if delimited else ""
            raise DataError(
                f"{where}: no field {names} (fields found: {', '.join(sorted(column_names))}); "
                f"set {knob(key)} to the column that holds it{header}"
            )
        resolved[key] = column
    return resolved


def label_lookup(label_names: Sequence[str], drop_labels: Sequence[int]) -> dict[str, int]:
    """Label spellings (stripped, lower-case) -> id: each name, each id written as text, and
    ``-`` (no gold label) -> -1 when -1 is dropped. ``ClassLabel.str2int`` without its
    case-sensitivity, so SICK's ``ENTAILMENT`` reads as well."""
    lookup = {str(i): i for i in range(len(label_names))} | {str(d): d for d in drop_labels}
    if -1 in drop_labels:
        lookup[NO_GOLD] = -1
    return lookup | {name.strip().lower(): i for i, name in enumerate(label_names)}


def _normalized(labels: pa.ChunkedArray) -> pa.ChunkedArray:
    return pc.utf8_lower(pc.utf8_trim_whitespace(labels))


def _is_text(values: pa.ChunkedArray) -> bool:
    return pa.types.is_string(values.type) or pa.types.is_large_string(values.type)


def _encode_batch(labels: list[str], lookup: Mapping[str, int]) -> dict[str, list[int]]:
    return {"label": [lookup[value.strip().lower()] for value in labels]}


def _python_values(values: pa.ChunkedArray) -> list[Any]:
    """A column as Python values; a JSON-extension column (types mixed across rows) decoded."""
    if isinstance(values.type, pa.BaseExtensionType):
        storage = pa.chunked_array([c.storage for c in values.chunks], values.type.storage_type)
        return [None if s is None else json.loads(s) for s in storage.to_pylist()]
    return values.to_pylist()


def _written_values(values: pa.ChunkedArray, source: str | None, column: str) -> list[Any]:
    """A column's values as the file wrote them: a JSON Lines file is read again, row by row,
    because Arrow turns a column of ints with one ``1.0`` into floats throughout (which would
    blame the first row); other sources as Arrow holds them."""
    if source is not None and file_format(Path(source)).builder == "json":
        return [row.get(column) for _, row in read_rows(source)]
    return _python_values(values)


def _first_odd(values: list[Any], ok: type | tuple[type, ...]) -> tuple[int, str]:
    """The first non-null row whose value is not an ``ok`` (bools are not ids) or whose type
    differs from the first value's, and what is odd about it."""
    first = next((v for v in values if v is not None), None)
    for row, value in enumerate(values):
        if value is None:
            continue
        if not isinstance(value, ok) or isinstance(value, bool):
            return row, f"holds {value!r}"
        if type(value) is not type(first):
            return row, f"holds {value!r} where an earlier row holds {first!r}"
    return 0, f"holds {first!r}"


def prepare_split(
    ds: datasets.Dataset,
    split: str,
    candidates: Mapping[str, Sequence[str]],
    label_names: Sequence[str],
    drop_labels: Sequence[int],
    source: str | None,
    keep: Sequence[str] = (),
) -> datasets.Dataset:
    """Validate one raw split and return it with the batch keys as columns and integer labels.

    ``candidates`` maps batch keys (and ``"label"``) to the columns that may hold them;
    ``source`` is the local file (errors name its lines) or ``None`` for hub data (rows).
    Text columns must hold non-null strings; labels are ids or names (``label_lookup``),
    names mapped to ids through ``label_names`` (a ``ClassLabel`` feature afterwards).
    Columns named in ``keep`` (e.g. MultiNLI's ``genre``) stay as they are where the data has
    them; every other column is dropped.
    """
    where = source or f"split '{split}'"
    columns = resolve_columns(ds.column_names, candidates, where)
    fmt = file_format(Path(source)) if source else None
    lookup = label_lookup(label_names, drop_labels)
    valid_ids = sorted(set(range(len(label_names))) | set(drop_labels))
    accepted = (f"use the ids 0 to {len(label_names) - 1} or the names {', '.join(label_names)} "
                "(data.label_names)")
    if -1 in drop_labels:
        accepted += f", or -1 / '{NO_GOLD}' for no gold label (such rows are dropped)"

    def fail(row: int | None, key: str, what: str, fix: str) -> DataError:
        at = "" if row is None else f"row {row}: "
        if row is not None and fmt is not None and fmt.builder != "parquet":
            at = f"line {_line_of_row(Path(source), row, bool(fmt.delimiter))}: "
        return DataError(f"{where}: {at}field '{columns[key]}' ({knob(key)}) {what}; {fix}")

    table = ds.data.table if hasattr(ds.data, "table") else ds.data
    for key in candidates:
        values = table.column(columns[key])
        if key != "label" and not _is_text(values):
            if values.null_count == len(values):
                raise fail(None, key, "is empty in every row",
                           f"set {knob(key)} to the column that holds the text")
            row, what = _first_odd(_written_values(values, source, columns[key]), str)
            raise fail(row, key, f"{what}, not text", "write every sentence as a string")
        if values.null_count:
            row = pc.index(pc.is_null(values), True).as_py()
            raise fail(row, key, "is missing or null", "give every row a value or remove the row")
    labels = table.column(columns["label"])
    if pa.types.is_integer(labels.type):
        bad = pc.invert(pc.is_in(labels, value_set=pa.array(valid_ids, labels.type)))
    elif _is_text(labels):
        spellings = pa.array(list(lookup), labels.type)
        bad = pc.invert(pc.is_in(_normalized(labels), value_set=spellings))
    else:  # floats, lists, or ids and names mixed (a JSON-extension column)
        row, what = _first_odd(_written_values(labels, source, columns["label"]), (int, str))
        raise fail(row, "label", what, f"{accepted}, one kind throughout the file")
    if pc.any(bad).as_py():
        row = pc.index(bad, True).as_py()
        raise fail(row, "label", f"has the unknown label {labels[row].as_py()!r}", accepted)

    kept = [c for c in keep if c in ds.column_names and c not in {*columns, *columns.values()}]
    ds = ds.select_columns(list(dict.fromkeys([*columns.values(), *kept])))
    ds = ds.rename_columns({c: k for k, c in columns.items() if c != k})
    if not pa.types.is_integer(labels.type):
        features = ds.features.copy()
        features["label"] = datasets.ClassLabel(names=list(label_names))
        ds = ds.map(_encode_batch, batched=True, batch_size=10_000, input_columns="label",
                    fn_kwargs={"lookup": lookup}, features=features,
                    desc=f"label names -> ids ({split})")
    return ds
