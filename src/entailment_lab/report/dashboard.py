"""The project's W&B dashboard as code: ``python src/report.py --wandb-workspace ENTITY/PROJECT``.

Builds one W&B workspace with ``wandb-workspaces`` and saves it to the project; ``--dry-run
OUT.json`` writes its spec instead (no network). It is a view over the report's rows
(``rows``): W&B groups the runs by the config keys of a row (``rows.ROW_CONFIG_KEYS``: data
set, model, dim, training-set size, hypothesis-only; rows 10 and 12 of Table 2 are one
setting). What it shows, from the keys a run logs (``callbacks.ResultsRecorder``,
``explain.HeatmapLogger``; ``tests/test_dashboard.py`` checks every key against a real offline
run):

- the runs table: every training run (config ``task_name`` = ``train``, which every run of
  ``src/train.py`` records, whatever its tags: a Table 2 row, a protocol run, a plain sweep such
  as the README's ``-m model=din1,din2 dim=256,324,400``), grouped by row, with the summary
  columns below; a MultiNLI run (``data=mnli``) fills the columns of its two dev sets
  (``test_matched/acc``, ``test_mismatched/acc``), which stay empty for the others;
- "Mean ± std per row": one bar chart a metric, mean ± std over a row's runs (seeds);
- "Accuracy vs parameters": test accuracy against the trainable parameters of every model
  (``params/trainable``, log scale), against the count in the paper's convention for the models
  that define one (``params/paper_convention``), and the paper's points beside them as a
  Markdown table (a workspace panel plots runs only, so the published points cannot be drawn
  in the same chart);
- "Validation curves": ``val/acc`` by epoch, mean ± std per row;
- "Heat maps": the media panel of ``test/heatmaps``.
"""

from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path
from typing import Any

from entailment_lab.errors import UserError
from entailment_lab.paper_tables import TABLE2
from entailment_lab.report.rows import ROW_CONFIG_KEYS
from entailment_lab.report.wandb_runs import check_wandb_reachable

NAME = "Runs by row (entailment-lab)"
# The runs shown: what every run of src/train.py records in its config (conf/train.yaml), so
# that no tag decides (a plain sweep has none, a protocol run has its own).
RUNS_KEY, RUNS_VALUES = "task_name", ("train",)
# Summary columns of the runs table, and the metrics shown as mean ± std per row.
MNLI_COLUMNS = ("test_matched/acc", "test_mismatched/acc")  # data=mnli runs only (conf/data/)
COLUMNS = ("test/acc", *MNLI_COLUMNS, "val/acc_best", "train/acc_eval", "params/trainable",
           "params/paper_convention", "epochs", "stopped_by")
MEAN_STD = ("test/acc", "val/acc_best", "params/trainable", "params/paper_convention")
# The scatters' y and x: every model has a trainable count; the models whose paper counts
# otherwise (``Network.paper_parameter_count``) also one in their paper's convention, the one
# of the paper's points beside them.
ACCURACY = "test/acc"
PARAMS = {"params/trainable": "every model", "params/paper_convention": "the paper's convention"}
CURVE_X, CURVE_Y = "epoch", "val/acc"  # history keys of the validation curves
HEATMAPS = "test/heatmaps"  # explain.HeatmapLogger's image key
MAX_RUNS = 100  # runs (or groups) a panel draws; W&B's default, 10, hides most of Table 2


def paper_points_markdown() -> str:
    """The paper's Table 2 points (test accuracy, parameters) as a Markdown table, by size."""
    lines = ["**The paper's Table 2** (SNLI test accuracy; parameters without word "
             "embeddings, the convention of `params/paper_convention`)", "",
             "| row | model | parameters | test % | test/acc | our config |",
             "| ---: | --- | ---: | ---: | ---: | --- |"]
    for row in sorted(TABLE2, key=lambda r: (r.para_count or 0, r.row)):
        ours = (f"{row.model}" + (f", dim {row.dim}" if row.dim else "")) if row.model \
            else "not implemented"
        if row.not_comparable:
            ours += " (not comparable)"
        lines.append(f"| {row.row} | {row.description} | {row.para} ({row.para_count:,}) | "
                     f"{row.test:.1f} | {row.test / 100:.3f} | {ours} |")
    return "\n".join(lines)


def build_workspace(entity: str, project: str) -> Any:
    """The workspace (a ``wandb_workspaces.workspaces.Workspace``); builds offline."""
    import wandb_workspaces.reports.v2 as wr
    import wandb_workspaces.workspaces as ws
    from wandb_workspaces import expr

    grouped = {"groupby_aggfunc": "mean", "groupby_rangefunc": "stddev"}  # over a row's runs
    sections = [
        ws.Section(name="Mean ± std per row", is_open=True, panels=[
            wr.BarPlot(title=f"{key}: mean ± std per row", metrics=[key], **grouped)
            for key in MEAN_STD]),
        ws.Section(name="Accuracy vs parameters", is_open=True, panels=[
            *(wr.ScatterPlot(title=f"{ACCURACY} vs {params} (our runs: {which})",
                             x=wr.SummaryMetric(params), y=wr.SummaryMetric(ACCURACY),
                             log_x=True) for params, which in PARAMS.items()),
            wr.MarkdownPanel(markdown=paper_points_markdown())]),
        ws.Section(name="Validation curves", is_open=True, panels=[
            wr.LinePlot(title=f"{CURVE_Y} by {CURVE_X}: mean ± std per row", x=CURVE_X,
                        y=[CURVE_Y], **grouped)]),
        ws.Section(name="Heat maps", is_open=True, panels=[
            wr.MediaBrowser(title="test pairs: heat maps (Fig. 2, Fig. 3)",
                            media_keys=[HEATMAPS])]),
    ]
    runset = ws.RunsetSettings(
        filters=[expr.Config(_stored(RUNS_KEY)).isin(list(RUNS_VALUES))],
        groupby=[expr.Config(key) for key in ROW_CONFIG_KEYS],
        pinned_columns=[*(f"config:{_stored(key)}" for key in ROW_CONFIG_KEYS),
                        *(f"summary:{key}" for key in COLUMNS)])
    return ws.Workspace(entity=entity, project=project, name=NAME, sections=sections,
                        settings=ws.WorkspaceSettings(max_runs=MAX_RUNS),
                        runset_settings=runset)


def workspace_spec(workspace: Any) -> dict[str, Any]:
    """The workspace as JSON-ready data: its public fields (pydantic's dump; no panel ids),
    each panel with its ``type``, and the library's version."""
    from pydantic import TypeAdapter

    spec = _public(TypeAdapter(type(workspace)).dump_python(workspace, mode="json",
                                                            exclude_none=True))
    for section, dumped in zip(workspace.sections, spec["sections"], strict=True):
        dumped["panels"] = [{"type": type(panel).__name__, **data}
                            for panel, data in zip(section.panels, dumped["panels"],
                                                   strict=True)]
    return {"wandb_workspaces": version("wandb-workspaces"), **spec}


def write_spec(project: str, out: str | Path) -> Path:
    """``--dry-run``: the spec of ``ENTITY/PROJECT``'s workspace as JSON in ``out``."""
    entity, name = _split(project)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    spec = workspace_spec(build_workspace(entity, name))
    out.write_text(json.dumps(spec, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return out


def save_workspace(project: str) -> str:
    """Build the workspace and save it to ``ENTITY/PROJECT`` as a new view; its URL."""
    entity, name = _split(project)
    _check_reachable()
    workspace = build_workspace(entity, name)
    try:
        return str(workspace.save().url)
    except Exception as err:  # no API key, auth, unknown project, HTTP errors: all one line
        first = next(iter(str(err).strip().splitlines()), "") or type(err).__name__
        raise UserError(f"W&B: cannot save the workspace to {project}: {first}") from err


def _split(project: str) -> tuple[str, str]:
    entity, _, name = project.partition("/")
    if not entity or not name or "/" in name:
        raise UserError(f"--wandb-workspace wants ENTITY/PROJECT, got {project!r}")
    return entity, name


def _check_reachable(timeout: float = 3.0) -> None:
    """Fail in seconds, with one line, when the W&B API cannot be reached (or W&B is off)."""
    check_wandb_reachable(timeout, option="--wandb-workspace",
                          instead="write the spec only: --dry-run dashboard.json")


def _stored(key: str) -> str:
    """A (nested) config key as W&B stores it, for a column or a filter: ``model.name`` ->
    ``model.value.name``, ``task_name`` -> ``task_name.value`` (each top-level config value
    sits under ``value``; the groupby keys are converted so by the library itself)."""
    top, _, rest = key.partition(".")
    return f"{top}.value" + (f".{rest}" if rest else "")


def _public(data: Any) -> Any:
    """``data`` without the library's internal fields (names starting with ``_``)."""
    if isinstance(data, dict):
        return {k: _public(v) for k, v in data.items() if not str(k).startswith("_")}
    if isinstance(data, list):
        return [_public(v) for v in data]
    return data
