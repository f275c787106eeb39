"""The published numbers that the platform reproduces, as data: the one declaration of each
paper row.

Table 2 of Huo & Liu (DIN, SNLI test accuracy %, "Para" without word embeddings), DIIN's SNLI
result (Gong et al. 2018) and DCNN's sentence-classification results (Kalchbrenner et al. 2014),
copied as printed. ``model`` / ``dim`` name our implementation of a row (``None``: not
implemented here), so a finished job can be matched to the row it reproduces (``report.py``).
The experiment file of each Table 2 row (``conf/experiment/table2/rowNN.yaml``) and of DIIN's
row is generated from its row here (``python -m entailment_lab.paper_tables --write``);
``tests/test_paper_tables.py`` fails when a committed file differs from its row.
"""

from __future__ import annotations

import argparse
import textwrap
from dataclasses import dataclass
from pathlib import Path


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
    # Why the printed figure is not this model's, where it is not (row 3): shown, never compared.
    not_comparable: str | None = None
    # The row's experiment file (``experiment_file``): its title where the description leans on
    # the row above ("– with ..."), its comment, extra example commands, why it lower-cases the
    # text where it does, and its whole YAML where the standard one does not fit (row 4).
    title: str | None = None
    note: str = ""
    commands: str = ""
    lowercase: str | None = None
    body: str | None = None

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
        model: str | None = None, dim: int | None = None, *, recipe: str, note: str = "",
        **kwargs: object) -> PaperRow:
    note = f"{note}\n{recipe}" if note else recipe
    return PaperRow("table2", row, description, "snli", test, train, para, model, dim,
                    note=note, **kwargs)  # type: ignore[arg-type]


_DIN_RECIPE = "Training recipe: the DIN paper's, selected by the model (conf/recipe/din.yaml)."
_RLSTM_RECONSTRUCTION = (
    "Ours is a reconstruction: the rLSTM paper's text could not be read here, so its equations\n"
    "come from the DIN paper's description and a public re-implementation\n"
    "(docs/models/rlstm.md), and its recipe is borrowed from DIN.")

# Row 4's experiment file: 100-d GloVe 6B vectors, the size its authors' papers name.
_ROW04_BODY = """\
# With the platform's 300-d GloVe 840B vectors instead (293,703 parameters):
#   python src/train.py experiment=table2/row04 embeddings=glove840b data.lowercase=false
# Offline (no hub, no GloVe file): the GloVe 6B 50-d package and local files in the hub's schema:
#   python src/train.py experiment=table2/row04 embeddings=glove6b50d \\
#     data.files.train=PATH data.files.validation=PATH data.files.test=PATH
defaults:
  - override /data: snli
  - override /model: tclstm
  - override /embeddings: glove6b100d   # 100-d GloVe 6B, the papers' size (conf/embeddings/)
dim: 50
data:
  lowercase: true         # GloVe 6B is lower-cased
tags: [table2, row04, tclstm, d50]
"""

TABLE2: tuple[PaperRow, ...] = (
    _t2(1, "128D LSTM encoder", "1.4M", 83.9, 81.8, "lstm", 128,
        recipe="Training recipe: no paper recipe for this baseline, trained like DIN "
               "(conf/recipe/din.yaml)."),
    _t2(2, "100D word-by-word attention (Rocktäschel et al.)", "250k", 85.3, 83.5,
        "wbw_attention", 100, note="The paper's own Table 1 prints 252k parameters.",
        recipe="Training recipe: the paper's, selected by the model "
               "(conf/recipe/wbw_attention.yaml).",
        commands="The paper's grid search (§3; the winning configuration is not reported), "
                 "best on dev:\n  python src/train.py -m experiment=table2/row02 "
                 "optimizer.lr=1e-4,3e-4,1e-3 \\\n    model.net.dropout=0.0,0.1,0.2 "
                 "optimizer.weight_decay=0.0,1e-4,3e-4,1e-3"),
    _t2(3, "600D DF-LSTM", "2.8M", 85.9, 85.0, "dflstm", 600,
        not_comparable="the printed 2.8M / 85.9 / 85.0 are those of another \"Liu et al. "
                       "2016\" (Yang Liu et al., BiLSTM encoders with intra-attention)",
        note="Our build: 300 + 300 units, 2,434,503 parameters. The printed Para and accuracies"
             " are those of\nanother \"Liu et al. 2016\" (Yang Liu et al., a BiLSTM encoder "
             "with inner attention), so\nthe report does not compare with them; the DF-LSTM "
             "paper itself reports 85.2 / 84.6 at 100\nunits per LSTM (docs/models/dflstm.md).",
        recipe="Training recipe: the paper's, selected by the model (conf/recipe/dflstm.yaml)."),
    _t2(4, "50D stacked TC-LSTMs", "190k", 86.7, 85.1, "tclstm", 50,
        note="Our build: d = 50, 4 blocks of four directions sharing one unit, 2 x 1 dynamic "
             "pooling, a 50-unit\nfully connected layer, 100-d word vectors: 193,703 "
             "parameters, the count nearest 190k of the\nreadings we could justify (1.9 % "
             "above; docs/models/tclstm.md has the gap; tests pin it).\nWord vectors: 100-d "
             "GloVe, the size the C-LSTMs and DF-LSTM papers name (DF-LSTM §5.4: \"100d\n"
             "GloVe vectors\"; 840B comes in 300-d only, so the 100-d release is GloVe 6B, "
             "lower-cased;\nconf/embeddings/glove6b100d.yaml says where to get it).",
        recipe="Training recipe: selected by the model (conf/recipe/tclstm.yaml).",
        body=_ROW04_BODY),
    _t2(5, "300D mLSTM (Wang & Jiang)", "1.9M", 92.0, 86.1, "mlstm", 300,
        recipe="Training recipe: the paper's, selected by the model (conf/recipe/mlstm.yaml).",
        lowercase="the authors' code lower-cases both sentences (util/loadFiles.lua)"),
    _t2(6, "300D LSTMN with deep attention fusion", "1.7M", 87.3, 85.7, "lstmn", 300,
        recipe="Training recipe: the paper's, selected by the model (conf/recipe/lstmn.yaml).",
        lowercase="the paper lower-cased SNLI (Cheng et al. §5.3); GloVe 840B has lower-case "
                  "entries"),
    _t2(7, "450D LSTMN with deep attention fusion", "3.4M", 88.5, 86.3, "lstmn", 450,
        recipe="Training recipe: the paper's, selected by the model (conf/recipe/lstmn.yaml).",
        lowercase="the paper lower-cased SNLI (Cheng et al. §5.3); GloVe 840B has lower-case "
                  "entries"),
    _t2(8, "200D decomposable attention", "382k", 89.5, 86.3, "decatt", 200,
        recipe="Training recipe: the paper's, selected by the model (conf/recipe/decatt.yaml)."),
    _t2(9, "– with intra-sentence attention", "582k", 90.5, 86.8, "decatt_intra", 200,
        title="200D decomposable attention with intra-sentence attention",
        recipe="Training recipe: the paper's, selected by the model "
               "(conf/recipe/decatt_intra.yaml)."),
    _t2(10, "300D rLSTM (Sha et al.; the authors' figure; ours a reconstruction)", "2.0M",
        90.7, 87.5, "rlstm", 300, authors_figure=True,
        note="The paper's row 10 is the figure Sha et al. report for their own model; row 12 "
             "is the DIN\nauthors' re-implementation of the same model. Both are our one rlstm "
             "model with one config:\nthis file and row12.yaml are the same setting, so one run "
             "of either reproduces both rows.\n" + _RLSTM_RECONSTRUCTION,
        recipe="Training recipe: borrowed, trained like DIN (conf/recipe/din.yaml)."),
    _t2(11, "128D HyperLSTM (paper's implementation)", "3.4M", 88.1, 83.2, "hyperlstm", 128,
        note="Ours has 3.0M parameters (docs/models/hyperlstm.md).",
        recipe="Training recipe: the DIN paper's (its own implementations were trained like "
               "DIN), selected by\nthe model (conf/recipe/din.yaml)."),
    _t2(12, "300D rLSTM (paper's implementation; ours a reconstruction)", "2.0M", 88.9, 86.6,
        "rlstm", 300,
        note="Row 12 is the DIN authors' re-implementation of Sha et al.'s rLSTM; row 10 is the"
             " figure Sha\net al. report for it. Both are our one rlstm model with one config: "
             "this file and row10.yaml\nare the same setting, so one run of either reproduces "
             "both rows.\n" + _RLSTM_RECONSTRUCTION,
        recipe="Training recipe: borrowed, trained like DIN (conf/recipe/din.yaml)."),
    _t2(13, "16×16D DIN-1", "498k", 89.5, 86.7, "din1", 256, recipe=_DIN_RECIPE),
    _t2(14, "16×16D DIN-2", "889k", 88.9, 86.0, "din2", 256, recipe=_DIN_RECIPE),
    _t2(15, "18×18D DIN-1", "718k", 90.2, 87.4, "din1", 324, recipe=_DIN_RECIPE),
    _t2(16, "18×18D DIN-2", "1.3M", 89.6, 86.8, "din2", 324, recipe=_DIN_RECIPE),
    _t2(17, "20×20D DIN-1", "1.0M", 90.5, 88.0, "din1", 400, recipe=_DIN_RECIPE),
    _t2(18, "– without dynamic generated weights", "1.9M", 89.8, 86.2, "din1_static", 400,
        title="20×20D DIN-1 without dynamic generated weights",
        recipe=_DIN_RECIPE),
    _t2(19, "20×20D DIN-2", "1.9M", 90.1, 87.2, "din2", 400, recipe=_DIN_RECIPE),
)

DIIN: tuple[PaperRow, ...] = (
    PaperRow("diin", 1, "DIIN (Gong et al. 2018)", "snli", 88.0, para="4.4M", model="diin",
             note="DIIN (Gong et al. 2018, \"Natural Language Inference over Interaction "
                  "Space\"), its own paper's\nSNLI row: 88.0 % test, 4.4M parameters. Not a row"
                  " of the DIN paper's Table 2.\nTraining recipe: the paper's, selected by the "
                  "model (conf/recipe/diin.yaml), which sets\ndata.max_length=48 (the sentence "
                  "length of DIIN's interaction map)."),
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


# --- the experiment files, generated from the rows ----------------------------------------------
def experiment_name(row: PaperRow) -> str | None:
    """The experiment a row is run with (``experiment=table2/row17``); None for rows with none
    generated here (DCNN's: conf/experiment/dcnn/, written by hand around their data folders)."""
    if row.table == "table2" and row.model:
        return f"table2/row{row.row:02d}"
    if row.table == "diin":
        return "table2/diin"
    return None


def experiment_file(row: PaperRow) -> str:
    """The text of ``conf/experiment/<experiment_name(row)>.yaml``."""
    name = experiment_name(row)
    if name is None:
        raise ValueError(f"row {row.label} of {row.table} has no generated experiment file")
    if row.table == "table2":
        title = (f"Table 2 row {row.row}: {row.title or row.description} ({row.para} "
                 f"parameters; paper: "
                 f"{row.train} train / {row.test} test % on SNLI).")
        tags = [row.table, f"row{row.row:02d}", row.model] + ([f"d{row.dim}"] if row.dim else [])
    else:
        title, tags = None, ["diin_paper", row.model]
    lines = ["# @package _global_",
             *(textwrap.wrap(title, 97, initial_indent="# ", subsequent_indent="# ")
               if title else []),
             *(f"# {line}".rstrip() for line in row.note.splitlines()),
             f"#   python src/train.py experiment={name}",
             f"#   python src/train.py -m experiment={name} seed=1,2,3",
             *(f"# {line}".rstrip() for line in row.commands.splitlines())]
    if row.body is not None:
        return "\n".join(lines) + "\n" + row.body
    lines += [
        "# Offline (no hub, no GloVe 840B): the GloVe 6B 50-d package and local files in the "
        "hub's schema:",
        f"#   python src/train.py experiment={name} embeddings=glove6b50d"
        f"{'' if row.lowercase else ' data.lowercase=true'} \\",
        "#     data.files.train=PATH data.files.validation=PATH data.files.test=PATH",
        "defaults:",
        "  - override /data: snli",
        f"  - override /model: {row.model}",
        "  - override /embeddings: glove840b",
        *([f"dim: {row.dim}"] if row.dim else []),
        "data:",
        f"  lowercase: true         # {row.lowercase}" if row.lowercase else
        "  lowercase: false        # GloVe 840B is cased (look-up falls back to lower case)",
        f"tags: [{', '.join(tags)}]"]
    return "\n".join(lines) + "\n"


def write_experiment_files(conf_dir: str | Path) -> list[Path]:
    """Write every generated experiment file under ``conf_dir/experiment``; returns them."""
    written = []
    for row in PAIR_ROWS:
        name = experiment_name(row)
        if name is None:
            continue
        path = Path(conf_dir) / "experiment" / f"{name}.yaml"
        path.write_text(experiment_file(row), encoding="utf-8")
        written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description="Write conf/experiment/table2/*.yaml from the "
                                     "paper rows declared in this module.")
    parser.add_argument("--write", metavar="CONF", nargs="?", const="conf",
                        help="the config folder to write into (default: conf)")
    args = parser.parse_args()
    if args.write is None:
        parser.error("nothing to do: give --write [CONF]")
    for path in write_experiment_files(args.write):
        print(path)


if __name__ == "__main__":
    main()
