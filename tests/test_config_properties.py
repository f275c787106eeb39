"""Every knob of a command's config set to a hostile value (the ``hypothesis`` library): the
command-line check (``precheck.checked_command``, what every entry point runs first) either
accepts the command or ends in one ``ConfigError`` line; never another exception (a
traceback), never a run folder, never a data read.

The knobs are every leaf of the composed config of a few base commands (the demo corpus with
four model families), the values what a typo or a wrong guess gives Hydra: a word, null, a
negative number, zero, a list, a mapping, an empty string, ``flase``. The draws are fixed
(``derandomize``) so that CI sees the same 25 every time; ``CONFIG_SWEEP=1 pytest
tests/test_config_properties.py`` tries every knob with every value (5,310 commands, about
17 minutes on one core). Such sweeps found what tests/test_precheck.py now pins down: a
``_target_`` that is a module or cannot be imported (a traceback), ``flase`` for a Lightning
boolean (true), a callback entry the run would skip, a misspelt ``optimized_metric``, a
scalar ``extra_tests``.
"""

from __future__ import annotations

import os
import uuid
from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from entailment_lab.errors import ConfigError
from entailment_lab.precheck import checked_command, hydra_context
from tests.conftest import REPO

CONF = REPO / "conf"
BASES = ("experiment=demo", "experiment=demo model=din1 dim=16",
         "experiment=demo model=decatt_intra optimizer=adagrad", "experiment=demo model=diin")
HOSTILE = ("abc", "null", "-1", "0", "[1,2]", "{a:1}", "''", "1e9", "flase")


@cache
def leaves(base: str) -> tuple[str, ...]:
    """Every leaf key of ``base``'s composed config, Hydra's own left out."""
    from hydra import compose

    with hydra_context(CONF, "train"):
        cfg = compose("train", overrides=base.split())
    found: list[str] = []

    def walk(node: object, prefix: str) -> None:
        if isinstance(node, dict) and node:
            for key, value in node.items():
                walk(value, f"{prefix}{key}.")
        else:
            found.append(prefix[:-1])

    walk(OmegaConf.to_container(cfg, resolve=False), "")
    return tuple(found)


@st.composite
def commands(draw: st.DrawFn) -> list[str]:
    base = draw(st.sampled_from(BASES))
    key = draw(st.sampled_from(leaves(base)))
    return [*base.split(), f"{key}={draw(st.sampled_from(HOSTILE))}"]


def hostile_value_problem(args: list[str], tmp_path) -> str | None:
    """What is wrong with how the check answered ``args``; ``None`` when it accepted them or
    refused them in one line, without a run folder."""
    run = tmp_path / uuid.uuid4().hex
    try:
        checked_command("train", [*args, f"hydra.run.dir={run}", "logger=csv"], CONF)
    except ConfigError as err:
        if "\n" in str(err) or not str(err):
            return f"{args}: not one line: {err!r}"
    except Exception as err:  # any other exception is the finding
        return f"{args}: {type(err).__name__}: {err}"
    return f"{args}: made {run}" if run.exists() else None


@pytest.mark.slow
@pytest.mark.usefixtures("no_data_read")
@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=commands())
def test_a_hostile_value_is_accepted_or_one_line(args, tmp_path):
    assert hostile_value_problem(args, tmp_path) is None


@pytest.mark.skipif(not os.environ.get("CONFIG_SWEEP"), reason="CONFIG_SWEEP=1: ~25 minutes")
@pytest.mark.usefixtures("no_data_read")
def test_every_knob_with_every_hostile_value(tmp_path):
    problems = [p for base in BASES for key in leaves(base) for value in HOSTILE
                if (p := hostile_value_problem([*base.split(), f"{key}={value}"], tmp_path))]
    assert not problems, "\n".join(problems)
