"""Report jobs from the runs of a W&B project (``--wandb ENTITY/PROJECT``).

The reachability check (``online.unreachable``) runs before ``wandb.Api`` (which asks for an
API key before it touches the network); every failure is one ``UserError`` line.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlparse

from entailment_lab.errors import UserError
from entailment_lab.online import unreachable
from entailment_lab.report.breakdowns import from_record
from entailment_lab.report.job import COMPLETED, FAILED, RUNNING, Job, first_line, percent
from entailment_lab.report.match import limit_overrides, match_row

_WANDB_STATES = {"finished": COMPLETED, "running": RUNNING, "pending": RUNNING,
                 "crashed": FAILED, "failed": FAILED, "killed": FAILED, "preempted": FAILED}


def check_wandb_reachable(timeout: float = 3.0, option: str = "--wandb",
                          instead: str = "report from the local job folders (python "
                                         "src/report.py multirun/...)") -> None:
    """Fail in seconds, with one line, when the W&B API cannot be reached (or W&B is off);
    ``option`` is what needs it, ``instead`` what the user can do without it."""
    mode = os.environ.get("WANDB_MODE", "")
    if mode in ("offline", "disabled", "dryrun"):
        raise UserError(f"{option} needs the W&B API but WANDB_MODE={mode}; unset WANDB_MODE, "
                        f"or {instead}")
    url = os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai"
    reason = unreachable(url, timeout)
    if reason is None:
        return
    parsed = urlparse(url)
    host = parsed.hostname or "api.wandb.ai"
    port = parsed.port or (80 if parsed.scheme == "http" else 443)
    raise UserError(f"cannot reach the W&B API at {host}:{port} within {timeout:g} s: {reason}; "
                    f"check the network, or {instead.split(' (')[0]}")


def _lookup_config(config: dict[str, Any], key: str) -> Any:
    """A config value whether W&B stored it nested (``model: {name}``), flat (``model.name``)
    or in the raw API form (``{"value": ..., "desc": ...}``)."""
    def unwrap(value: Any) -> Any:
        raw = isinstance(value, dict) and "value" in value and set(value) <= {"value", "desc"}
        return value["value"] if raw else value

    node: Any = config
    for part in key.split("."):
        node = unwrap(node)
        if not isinstance(node, dict) or part not in node:
            node = config.get(key, config.get(key.replace(".", "/")))
            break
        node = node[part]
    return unwrap(node)


def jobs_from_wandb_runs(runs: Iterable[Any], project: str) -> list[Job]:
    """Turn W&B API runs (``config``, ``summary_metrics``, ``state``, ``tags``) into report
    jobs. ``summary_metrics`` is the public API's summary as the plain dict the server sent
    (``run.summary`` decodes each value on access)."""
    jobs = []
    for run in runs:
        config = dict(run.config or {})
        summary = dict(run.summary_metrics or {})
        state = str(getattr(run, "state", "unknown"))
        status = _WANDB_STATES.get(state, state)
        job = Job(
            folder=getattr(run, "url", None) or f"wandb:{project}/{run.id}", status=status,
            task=_lookup_config(config, "task_name") or "train",
            model=_lookup_config(config, "model.name"), dim=_lookup_config(config, "dim"),
            seed=_lookup_config(config, "seed"), data=_lookup_config(config, "data.name"),
            tags=list(getattr(run, "tags", None) or _lookup_config(config, "tags") or []),
            params=summary.get("params/trainable") or config.get("params/trainable"),
            params_paper=summary.get("params/paper_convention")
            or config.get("params/paper_convention"),
            train=percent(summary.get("train/acc_at_best")),
            train_eval=percent(summary.get("train/acc_eval")),
            val=percent(summary.get("val/acc_best")), test=percent(summary.get("test/acc")),
            error=f"W&B state: {state}" if status == FAILED else None, wandb_id=run.id,
            overrides=limit_overrides(functools.partial(_lookup_config, config)),
            max_epochs=_lookup_config(config, "trainer.max_epochs"),
            epochs=summary.get("epochs"), stopped_by=summary.get("stopped_by"),
        )
        job.diagnostics = from_record({"hypothesis_only": _lookup_config(
            config, "data.hypothesis_only")})
        job.row, job.note = match_row(job)
        jobs.append(job)
    return jobs


def load_wandb_jobs(project: str, group: str | None) -> list[Job]:
    """The runs of ``ENTITY/PROJECT`` (one ``group``, e.g. a sweep folder name) as jobs."""
    if project.count("/") != 1:
        raise UserError(f"--wandb wants ENTITY/PROJECT, got {project!r}")
    check_wandb_reachable()
    try:
        import wandb

        api = wandb.Api(timeout=30)  # W&B's own per-request timeout: a slow server fails too
        eager = {"lazy": False} if "lazy" in inspect.signature(api.runs).parameters else {}
        runs = list(api.runs(project, filters={"group": group} if group else {}, **eager))
    except Exception as err:  # no API key, auth, unknown project, HTTP errors: all one line
        raise UserError(f"W&B: cannot list the runs of {project}: "
                        f"{first_line(str(err)) or type(err).__name__}") from err
    if not runs:
        raise UserError(f"W&B: no runs in {project}" + (f" with group {group!r}" if group else ""))
    return jobs_from_wandb_runs(runs, project)
