"""The published numbers that the platform reproduces, as data (read by ``report.py``).

Table 2 of Huo & Liu (DIN, SNLI test accuracy %, "Para" without word embeddings), DIIN's SNLI
result (Gong et al. 2018) and DCNN's sentence-classification results (Kalchbrenner et al. 2014),
copied as printed. ``model`` / ``dim`` name our implementation of a row (``None``: not
implemented here), so a finished job can be matched to the row it reproduces.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PaperRow:
    """One printed row: what the paper reports and which of our configs reproduces it."""

    table: str  # "table2", "diin", "dcnn"
    row: int  # the paper's numbering (Table 2: 1-19)
    description: str  # the model as printed
    data: str  # our data config name of the paper's data set
    test: float  # test accuracy % as printed
    train: float | None = None  # train accuracy % as printed (Table 2 only)
    para: str | None = None  # parameter count as printed ("1.4M", "498k")
    model: str | None = None  # our ``model`` config name; None = not implemented
    dim: int | None = None  # our ``dim``; None = the model has no ``dim`` knob
    # True: the figure is the model's authors' own, and another row holds the DIN paper's
    # re-implementation of the same model (rLSTM: rows 10 and 12); a run that declares no row
    # counts under the re-implementation's row.
    authors_figure: bool = False

    @property
    def para_count(self) -> int | None:
        """``para`` as a number ("1.4M" -> 1_400_000, "498k" -> 498_000)."""
        return parse_count(self.para)

    @property
    def label(self) -> str:
        """Short label for tables and plots: the row number in Table 2, else the table name."""
        return str(self.row) if self.table == "table2" else self.table.upper()

    @property
    def implemented(self) -> bool:
        return self.model is not None


def parse_count(text: str | None) -> int | None:
    """A printed parameter count ("1.4M", "498k", "382k") as an integer."""
    if not text:
        return None
    scale = {"k": 1_000, "M": 1_000_000}.get(text[-1], 1)
    return round(float(text.rstrip("kM")) * scale)


def _t2(row: int, description: str, para: str, train: float, test: float,
        model: str | None = None, dim: int | None = None, authors_figure: bool = False
        ) -> PaperRow:
    return PaperRow("table2", row, description, "snli", test, train, para, model, dim,
                    authors_figure)


TABLE2: tuple[PaperRow, ...] = (
    _t2(1, "128D LSTM encoder", "1.4M", 83.9, 81.8, "lstm", 128),
    _t2(2, "100D word-by-word attention (Rocktäschel et al.)", "250k", 85.3, 83.5,
        "wbw_attention", 100),
    _t2(3, "600D DF-LSTM", "2.8M", 85.9, 85.0, "dflstm", 600),
    _t2(4, "50D stacked TC-LSTMs", "190k", 86.7, 85.1, "tclstm", 50),
    _t2(5, "300D mLSTM (Wang & Jiang)", "1.9M", 92.0, 86.1, "mlstm", 300),
    _t2(6, "300D LSTMN with deep attention fusion", "1.7M", 87.3, 85.7, "lstmn", 300),
    _t2(7, "450D LSTMN with deep attention fusion", "3.4M", 88.5, 86.3, "lstmn", 450),
    _t2(8, "200D decomposable attention", "382k", 89.5, 86.3, "decatt"),
    _t2(9, "– with intra-sentence attention", "582k", 90.5, 86.8, "decatt_intra"),
    _t2(10, "300D rLSTM (Sha et al.; the authors' figure)", "2.0M", 90.7, 87.5, "rlstm", 300,
        authors_figure=True),
    _t2(11, "128D HyperLSTM (paper's implementation)", "3.4M", 88.1, 83.2, "hyperlstm", 128),
    _t2(12, "300D rLSTM (paper's implementation)", "2.0M", 88.9, 86.6, "rlstm", 300),
    _t2(13, "16×16D DIN-1", "498k", 89.5, 86.7, "din1", 256),
    _t2(14, "16×16D DIN-2", "889k", 88.9, 86.0, "din2", 256),
    _t2(15, "18×18D DIN-1", "718k", 90.2, 87.4, "din1", 324),
    _t2(16, "18×18D DIN-2", "1.3M", 89.6, 86.8, "din2", 324),
    _t2(17, "20×20D DIN-1", "1.0M", 90.5, 88.0, "din1", 400),
    _t2(18, "– without dynamic generated weights", "1.9M", 89.8, 86.2, "din1_static", 400),
    _t2(19, "20×20D DIN-2", "1.9M", 90.1, 87.2, "din2", 400),
)

DIIN: tuple[PaperRow, ...] = (
    PaperRow("diin", 1, "DIIN (Gong et al. 2018)", "snli", 88.0, para="4.4M", model="diin"),
)

# Twitter sentiment (87.4) is left out: the platform has no Twitter data config.
DCNN: tuple[PaperRow, ...] = (
    PaperRow("dcnn", 1, "DCNN, SST fine-grained", "sst5", 48.5, model="dcnn_sentence"),
    PaperRow("dcnn", 2, "DCNN, SST binary", "sst2", 86.8, model="dcnn_sentence"),
    PaperRow("dcnn", 3, "DCNN, TREC 6-way", "trec", 93.0, model="dcnn_sentence"),
)

#: Rows of sentence-pair tasks (Table 2 layout) and of single-sentence tasks (DCNN layout).
PAIR_ROWS: tuple[PaperRow, ...] = TABLE2 + DIIN
SENTENCE_ROWS: tuple[PaperRow, ...] = DCNN
ALL_ROWS: tuple[PaperRow, ...] = PAIR_ROWS + SENTENCE_ROWS
SENTENCE_DATA: frozenset[str] = frozenset(r.data for r in SENTENCE_ROWS)
