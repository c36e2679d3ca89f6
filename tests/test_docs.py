"""README.md and docs/*.md against the tree: the quick start is the two
commands, every relative link (and its anchor) resolves, every verb has one
line in the README's verb table and an entry in docs/CLI.md, the package
docstring of ``checks`` names every module, and the Python examples print what
the docs say they print.

Anchors follow GitHub's rule (lower case, punctuation but ``-`` and ``_``
dropped, spaces to ``-``, ``-1``, ``-2`` for repeats), written out here rather
than taken from a Markdown library.
"""

from __future__ import annotations

import csv
import json
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import guardrepro.checks
from guardrepro.cli import COMMANDS

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")


def prose(text: str) -> str:
    """The text outside fenced code blocks (links in code are not links)."""
    keep, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            keep.append(line)
    return "\n".join(keep)


def anchors(path: Path) -> set[str]:
    """GitHub's anchors for the headings of a Markdown file."""
    seen: dict[str, int] = {}
    out = set()
    for line in prose(path.read_text(encoding="utf-8")).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def section(text: str, heading: str) -> str:
    """The body of the ``## heading`` section (up to the next ``## ``)."""
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def blocks(text: str, lang: str = "") -> list[str]:
    """Bodies of the fenced code blocks of ``text`` opened with ```lang (exactly)."""
    out: list[str] = []
    body: list[str] | None = None
    opened = ""
    for line in text.splitlines(keepends=True):
        if body is None and line.startswith("```"):
            body, opened = [], line[3:].strip()
        elif body is not None and line.rstrip("\n") == "```":
            if opened == lang:
                out.append("".join(body))
            body = None
        elif body is not None:
            body.append(line)
    return out


def test_slug_rule() -> None:
    page = ROOT / "docs" / "PROTOCOL.md"
    assert "21-scoring-a-whole-split-toolsafes-tables" in anchors(page)
    assert "audit-the-audit-ladder" in anchors(ROOT / "docs" / "CLI.md")


def test_quick_start_is_the_two_commands() -> None:
    quick = section(README.read_text(encoding="utf-8"), "Quick start")
    commands = [line.split("#")[0].strip() for line in blocks(quick, "bash")[0].splitlines()]
    assert [c for c in commands if c] == ["bash scripts/demo.sh", "bash scripts/test.sh"]
    assert (ROOT / "scripts" / "demo.sh").is_file() and (ROOT / "scripts" / "test.sh").is_file()


def test_readme_keeps_its_sections() -> None:
    text = README.read_text(encoding="utf-8")
    for heading in ("Quick start", "Installing from a wheel", "Reproduce TS-Guard",
                    "Reproduce ToolSafe's table", "The verbs", "Python API", "Layout"):
        assert f"\n## {heading}\n" in text, heading
    assert "docs/SCALE.md" in text and "docs/THROUGHPUT.md" in text


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: p.name)
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in LINK.findall(prose(page.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z]+:", target):  # https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            broken.append(f"{target}: no file {dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with anchor #{anchor} in {dest.name}")
    assert not broken, f"{page.name}: " + "; ".join(broken)


def verb_rows() -> dict[str, str]:
    """The README's verb table: verb -> the row's link target."""
    rows = {}
    for line in section(README.read_text(encoding="utf-8"), "The verbs").splitlines():
        m = re.match(r"^\| `([\w-]+)[^|]*\|[^|]*\| \[[^\]]*\]\(([^)]+)\) \|$", line)
        if m:
            assert m.group(1) not in rows, f"two rows for {m.group(1)}"
            rows[m.group(1)] = m.group(2)
    return rows


def test_every_verb_has_one_row_linking_to_docs() -> None:
    rows = verb_rows()
    assert sorted(rows) == sorted(COMMANDS)
    assert all(target.startswith("docs/") for target in rows.values()), rows


def test_every_verb_is_in_the_cli_tour() -> None:
    tour = section((ROOT / "docs" / "CLI.md").read_text(encoding="utf-8"),
                   "Every verb, with an example")
    headings = " ".join(re.findall(r"^### (.*)$", tour, re.M))
    missing = [v for v in COMMANDS
               if not re.search(rf"(?<![\w-]){re.escape(v)}(?![\w-])", headings)
               and f"guardrepro {v}" not in tour]
    assert not missing, missing


def test_checks_docstring_names_every_module() -> None:
    doc = guardrepro.checks.__doc__ or ""
    names = [m.name for m in pkgutil.iter_modules(guardrepro.checks.__path__)]
    assert names
    assert [n for n in names if not re.search(rf"\b{n}\b", doc)] == []


def run_example(code: str, cwd: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True,
                         text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_records_example_prints_what_explain_says() -> None:
    text = (ROOT / "docs" / "EXPLAIN.md").read_text(encoding="utf-8")
    records = text[text.index("\n### Records\n"):]
    code, printed = blocks(records, "python")[0], blocks(records)[0]
    assert run_example(code, ROOT) == printed


@pytest.mark.slow
def test_readme_python_example_prints_what_it_says(tmp_path: Path,
                                                   demo: tuple[Path, str]) -> None:
    """The README's snippet on a real toy-hf run of the toy cohort (the run of
    docs/CLI.md's ``run`` example), executed as written. The run's 256 rows are
    the session demo's transformers run (same profile, same cohort): its run
    files are copied in and ``guardrepro run`` resumes them, which it does only
    when their provenance is the one it would write, and generates nothing."""
    from guardrepro.cli import main

    home = str(tmp_path / "home")
    for lock in ("toy-bench", "toy-guard"):
        assert main(["fetch", str(ROOT / "locks" / f"{lock}.toml"), "--home", home,
                     "--no-progress"]) == 0
    cohort = tmp_path / "toy.jsonl"
    assert main(["cohort", "build", str(ROOT / "cohorts" / "toy-64.toml"), "--out", str(cohort),
                 "--home", home, "--no-progress"]) == 0
    demo_out, _ = demo
    assert cohort.read_bytes() == (demo_out / "cohort.jsonl").read_bytes()
    run_dir = tmp_path / "runs" / "toy-hf"
    run_dir.mkdir(parents=True)
    for name in ("manifest.json", "records.jsonl", "merge.json", "run.log"):  # what run writes
        (run_dir / name).write_bytes((demo_out / "hf-fp32" / name).read_bytes())
    records = (run_dir / "records.jsonl").read_bytes()
    assert main(["run", "--profile", str(ROOT / "runners" / "toy-hf.toml"), "--cohort",
                 str(cohort), "--out", str(run_dir), "--home", home, "--no-progress"]) == 0
    assert (run_dir / "records.jsonl").read_bytes() == records
    (tmp_path / "checks").mkdir()
    (tmp_path / "checks" / "toy-guard.toml").write_bytes(
        (ROOT / "checks" / "toy-guard.toml").read_bytes())
    api = section(README.read_text(encoding="utf-8"), "Python API")
    code, printed = blocks(api, "python")[0], blocks(api)[0]
    assert run_example(code, tmp_path) == printed
    with (tmp_path / "toy-hf.csv").open(encoding="utf-8", newline="") as f:
        exported = list(csv.DictReader(f))
    cohort_ids = [json.loads(line)["sample"]["sample_id"] for line in cohort.open()]
    assert [row["row_id"] for row in exported] == cohort_ids and len(cohort_ids) == 256


def test_statistics_table_is_the_declared_one() -> None:
    """docs/STATISTICS.md's table of paired statistics is the one the code declares."""
    from guardrepro.checks.stats.definitions import STATISTICS, docs_table

    text = (ROOT / "docs" / "STATISTICS.md").read_text(encoding="utf-8")
    assert docs_table() in text
    assert len(docs_table().splitlines()) == 2 + len(STATISTICS)
