"""docs/CONTRIBUTING.md's recipes followed literally in a copy of the tree:
each extension touches the files its recipe lists, and no other, and then
works end to end in a fresh interpreter that imports the copy.

The copy holds ``guardrepro/``, ``docs/``, ``tests/`` and the spec folders;
an edit is made as a contributor would make it (text inserted into the
files the recipe names), the set of changed files is compared with the
recipe's, and the copy's own checks (the new test, the docs table check)
run in a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from recipe_tree import changed_files, copy_tree

ROOT = Path(__file__).resolve().parents[1]
COPIED = ("guardrepro", "docs", "tests", "runners", "locks", "cohorts", "checks", "pyproject.toml")


def _python(tree: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{tree / 'tests'}"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return subprocess.run([sys.executable, *args], cwd=tree, env=env, capture_output=True,
                          text=True, timeout=600, check=False)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_tree(tmp_path_factory.mktemp("pristine"), COPIED)


# ------------------------------------------------------------------ a statistic

STATISTIC = '''    Statistic("delta_flagged", _every, lambda p: p.d_edit - p.d_orig, _one, BOTH,
              "every pair of the view", "[edited = 1] - [original = 1] / 1"),
'''

STATISTIC_TEST = '''"""delta_flagged: the edit's change in the share of rows flagged unsafe."""
import json
from pathlib import Path

from recordsets import grid, write_run

from guardrepro.checks.report.markdown import build_report, load_or_compute_stats
from guardrepro.checks.stats.types import StatsResult

BASES = [("b1", "banking", 0), ("b2", "banking", 1), ("b3", "slack", 0), ("b4", "slack", 1)]
SCORES = {"original": [0, 1, 0, 0], "marker_paraphrase": [1, 1, 0, 0]}


def test_delta_flagged(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", grid(BASES, SCORES))
    result = load_or_compute_stats(run, replicates=40)
    # decisions original 0 1 0 0 -> edited 1 1 0 0: b1 +1, others 0 -> 1/4
    fig = result.edits["marker_paraphrase"].views["all_pairs"].statistics["delta_flagged"]
    assert (fig.count, fig.denominator, fig.point, fig.clusters) == (1, 4, 0.25, 4)
    data = json.loads((run / "stats.json").read_text())
    assert data["edits"]["marker_paraphrase"]["valid_both_only"]["delta_flagged"]["count"] == 1
    assert StatsResult.from_dict(data) == result
    text = build_report(run).read_text(encoding="utf-8")
    assert "delta_flagged" in text
'''

OLDER_STATS = '''
import json, sys
from pathlib import Path
from recordsets import grid, write_run
from guardrepro.checks.report.markdown import load_or_compute_stats
run = write_run(Path(sys.argv[1]), grid(
    [("b1", "banking", 0), ("b2", "banking", 1), ("b3", "slack", 0), ("b4", "slack", 1)],
    {"original": [0, 1, 0, 0], "marker_paraphrase": [1, 1, 0, 0]}))
load_or_compute_stats(run, replicates=40)
'''

READ_BACK = '''
import json, sys
from pathlib import Path
from guardrepro.checks.report.markdown import load_or_compute_stats
result = load_or_compute_stats(Path(sys.argv[1]), replicates=40)
view = result.edits["marker_paraphrase"].views["all_pairs"]
print(json.dumps(sorted(view.statistics)))
'''


@pytest.mark.slow
def test_a_statistic_is_three_files(pristine: Path, tmp_path: Path) -> None:
    """CONTRIBUTING.md, "Adding a statistic": its declaration, its docs line and
    its test; the JSON, the read-back, the report, the cache fingerprint (a
    stats.json written before is recomputed) and the docs check follow."""
    tree = copy_tree(tmp_path / "tree", COPIED)
    older = tmp_path / "older-run"
    made = _python(tree, "-c", OLDER_STATS, str(older))
    assert made.returncode == 0, made.stderr

    definitions = tree / "guardrepro/checks/stats/definitions.py"
    text = definitions.read_text(encoding="utf-8")
    anchor = "\n)\n\nBY_NAME"
    assert text.count(anchor) == 1
    definitions.write_text(text.replace(anchor, "\n" + STATISTIC.rstrip("\n") + "\n)\n\nBY_NAME"),
                           encoding="utf-8")
    docs = tree / "docs/STATISTICS.md"
    table = _python(tree, "-c", "from guardrepro.checks.stats.definitions import docs_table; "
                    "print(docs_table(), end='')")
    assert table.returncode == 0, table.stderr
    rows = table.stdout.splitlines()
    assert rows[-1].startswith("| delta_flagged |")
    page = docs.read_text(encoding="utf-8")
    last = next(line for line in page.splitlines() if line.startswith("| delta_specificity |"))
    docs.write_text(page.replace(last + "\n", last + "\n" + rows[-1] + "\n"), encoding="utf-8")
    (tree / "tests/test_delta_flagged.py").write_text(STATISTIC_TEST, encoding="utf-8")

    assert changed_files(pristine, tree) == {"guardrepro/checks/stats/definitions.py",
                                             "docs/STATISTICS.md", "tests/test_delta_flagged.py"}
    checks = _python(tree, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                     "tests/test_delta_flagged.py",
                     "tests/test_docs.py::test_statistics_table_is_the_declared_one",
                     "tests/test_stats.py::test_contract_keys")
    assert checks.returncode == 0, checks.stdout + checks.stderr
    again = _python(tree, "-c", READ_BACK, str(older))  # the older stats.json is recomputed
    assert again.returncode == 0, again.stderr
    assert "delta_flagged" in json.loads(again.stdout.strip().splitlines()[-1])
