"""No accuracy in the documentation is typed by hand without saying where it comes from.

Every figure in a results context in README.md and docs/ is one of (docs/RESULTS.md, "Where a
figure comes from"):

1. generated from the committed per-run records, between ``<!-- results:NAME -->`` markers
   (``make results``; ``tests/test_results_tables.py`` checks they are current);
2. quoted, with its source on the same line (for a table: in the row, or in the header of the
   figure's column): a word of ``SOURCE`` — the paper, its Table N, a README, what an author
   "reports", "et al.";
3. measured here without records, and said so: its paragraph (for a table: the table's header
   row or the paragraph right above it) says "no per-run records", as the generator says in a
   cell whose row has none.

Definitions, so that the test is exact:

- a *figure* is a percentage (``88.0 %``, ``45%``) or a score on the 0–100 scale with one or two
  decimals (``88.0``, ``43.57``), standing alone (not part of a version, a date, an id or a
  longer number) and not followed by a unit (``ms``, ``min``, ``×``, ``k``, ``M``, ``points``,
  ...): differences in points, speeds and sizes are not accuracies;
- it is in a *results context* when its line, or for a table row the table's header row, has a
  word starting with ``acc``, ``test``, ``val`` or ``dev``;
- text inside code (fenced blocks, inline code spans) is a command or its output, not a claim;
- ``docs/notes/`` is the dated lab notebook: each entry records what was measured when, with
  the command and commit, and is read as that (its header says so); it is exempt, and a page
  that takes a figure from it must mark the figure as above. ``docs/results/`` holds the
  records themselves and the reports generated from them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO

FIGURE = re.compile(
    r"(?<![\w.,/@#+−-])(\d{1,3}(?:\.\d{1,2})?\s?%|[1-9]\d\.\d{1,2})(?![\w.,]*\d)"
    r"(?!\s?(?:ms|s\b|min|h\b|×|x\b|k\b|M\b|[KMG]i?B|[GT]FLOP|epoch|step|pair|word|token|"
    r"sentence|question|point|pt|°|faster|slower))")
CONTEXT = re.compile(r"\b(acc|test|val|dev)", re.I)
SOURCE = re.compile(r"\bpapers?\b|\bpaper's|\bTable \d|\bREADME\b|\breport(?:s|ed)\b|"
                    r"\bet al\.", re.I)
NO_RECORDS = "no per-run records"
EXEMPT = ("docs/notes/", "docs/results/")


def documents() -> list[Path]:
    return [REPO / "README.md", *sorted(p for p in (REPO / "docs").rglob("*.md")
                                        if not str(p.relative_to(REPO)).startswith(EXEMPT))]


def _cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip().strip("|").split("|")]


def unaccounted(text: str) -> list[tuple[int, str, str]]:
    """(line number, figure, line) of every figure in a results context that is neither
    generated, nor quoted with its source, nor marked as having no per-run records."""
    lines = text.splitlines()
    out = []
    fenced = generated = False
    paragraph: list[str] = []  # the current paragraph's lines (prose)
    previous = ""  # the paragraph before it
    table: list[str] = []  # the current table's lines, header first
    caption = ""  # the paragraph right above the current table
    for number, raw in enumerate(lines, start=1):
        if raw.startswith("```"):
            fenced = not fenced
            continue
        marker = re.match(r"<!-- (/?)results:", raw)
        if marker:
            generated = not marker.group(1)
            continue
        if fenced or generated:
            continue
        line = re.sub(r"`[^`]*`", "``", raw)  # inline code
        if line.startswith("|"):
            if not table:
                caption = " ".join(paragraph) or previous
            table.append(line)
            paragraph = []
        else:
            table = []
            if not line.strip() or line.startswith("#") or re.match(r"\s*([-*]|\d+\.)\s", line):
                previous = " ".join(paragraph) if line.strip() == "" and paragraph else ""
                paragraph = []
            if line.strip() and not line.startswith("#"):
                paragraph.append(line)
        figures = FIGURE.findall(line)
        if not figures:
            continue
        if table:
            header = table[0]
            if not (CONTEXT.search(line) or CONTEXT.search(header)):
                continue
            if NO_RECORDS in header.lower() or NO_RECORDS in caption.lower():
                continue
            if SOURCE.search(line):  # the row names its source
                continue
            heads, cells = _cells(header), _cells(line)
            for i, cell in enumerate(cells):
                if not SOURCE.search(heads[i] if i < len(heads) else ""):
                    out += [(number, f, raw) for f in FIGURE.findall(cell)]
            continue
        if not CONTEXT.search(line) or SOURCE.search(line):
            continue
        if NO_RECORDS in " ".join(paragraph).lower() or _paragraph_says(lines, number):
            continue
        out += [(number, f, raw) for f in figures]
    return out


def _paragraph_says(lines: list[str], number: int) -> bool:
    """Whether the rest of the paragraph holding line ``number`` (1-based) says it."""
    for line in lines[number:]:
        if not line.strip() or line.startswith(("#", "|", "```")) or \
                re.match(r"\s*([-*]|\d+\.)\s", line):
            return False
        if NO_RECORDS in line.lower():
            return True
    return False


@pytest.mark.parametrize("document", documents(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_figure_is_typed_by_hand_without_its_source(document):
    found = unaccounted(document.read_text(encoding="utf-8"))
    assert not found, f"{document.relative_to(REPO)}: figures with no source, no record and no " \
        "'no per-run records' mark (tests/test_docs_figures.py says how to mark them):\n" + \
        "\n".join(f"  line {n}: {f!r} in {line.strip()[:120]}" for n, f, line in found)


def test_the_check_catches_a_typed_figure_and_accepts_the_three_forms():
    typed = "Our model reaches 61.2 % test accuracy.\n"
    assert [f for _, f, _ in unaccounted(typed)] == ["61.2 %"]
    assert unaccounted("The paper reports 88.0 % test accuracy.\n") == []
    assert unaccounted("Run by hand (no per-run records):\ntest 61.2 %, val 60.1 %.\n") == []
    assert unaccounted("<!-- results:x -->\n| test % |\n|---|\n| 61.2 |\n<!-- /results:x -->\n"
                       ) == []
    table = "| run | test % | paper |\n|---|---|---|\n| ours | 61.2 | 88.0 |\n"
    assert [f for _, f, _ in unaccounted(table)] == ["61.2"]  # the paper's column is quoted
    assert unaccounted("Measured, no per-run records:\n\n" + table) == []
    assert unaccounted("`python src/train.py` printed test 61.2 %\n") != []  # prose, not code
    assert unaccounted("```\ntest 61.2 %\n```\n") == []
    assert unaccounted("Trained for 12.5 min; test took 61.25 ms.\n") == []  # units
