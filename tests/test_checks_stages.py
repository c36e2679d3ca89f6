"""The stages inside ``guardrepro/checks/``: a lower stage never imports a higher one.

The order is core < io < stats < parity < audits < report (docs/ARCHITECTURE.md, "Stages
inside checks/"). Imports are read with ``ast`` from the source, nothing is imported: every
import counts (module level, inside a function, under ``TYPE_CHECKING``), and relative
imports are resolved against the module's package.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "guardrepro"
STAGES = ("core", "io", "stats", "parity", "audits", "report")
ABOVE_CHECKS = ("api", "experiments", "cli", "demo")
BELOW_CHECKS = ("artifacts", "bench", "guards", "rundir", "run", "serde", "errors", "limits",
                "schema", "spec", "versions", "progress", "logs", "spec_dirs")


def sources(top: Path = PACKAGE) -> dict[str, tuple[str, bool]]:
    """Dotted module name -> (source, is a package ``__init__``) for every module under ``top``."""
    found = {}
    for path in sorted(top.rglob("*.py")):
        parts = list(path.relative_to(top.parent).with_suffix("").parts)
        is_init = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_init else parts)
        found[name] = (path.read_text(encoding="utf-8"), is_init)
    return found


def imported(name: str, source: str, is_init: bool) -> list[tuple[int, str]]:
    """(line, dotted target) of every import in one module; ``from M import a`` gives M and
    M.a (``a`` may be a submodule)."""
    package = name.split(".") if is_init else name.split(".")[:-1]
    targets = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) + 1 - node.level] + ([base] if base else []))
            targets.append((node.lineno, base))
            targets += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return targets


def stage_of(dotted: str) -> str | None:
    parts = dotted.split(".")
    return parts[2] if parts[:2] == ["guardrepro", "checks"] and len(parts) > 2 else None


def violations(modules: dict[str, tuple[str, bool]]) -> list[str]:
    """Imports in ``guardrepro.checks`` that go up the stage order or out above checks."""
    found = []
    for name, (source, is_init) in modules.items():
        here = stage_of(name)
        if here not in STAGES:
            continue
        for line, target in imported(name, source, is_init):
            there = stage_of(target)
            if there in STAGES and STAGES.index(there) > STAGES.index(here):
                found.append(f"{name}:{line} imports {target} ({there} is above {here})")
            if target.split(".")[:2] in (["guardrepro", top] for top in ABOVE_CHECKS):
                found.append(f"{name}:{line} imports {target} (above checks)")
    return sorted(set(found))


def test_no_checks_module_imports_a_higher_stage() -> None:
    assert violations(sources()) == []


def test_the_check_sees_deferred_relative_and_outward_imports() -> None:
    modules = {
        "guardrepro.checks.core.a": (
            "def f():\n    from guardrepro.checks.report import markdown\n", False),
        "guardrepro.checks.io.b": ("from ..stats.compute import compute_stats\n", False),
        "guardrepro.checks.stats": ("from .parity import gate\n", True),
        "guardrepro.checks.parity.c": ("import guardrepro.api\n", False),
        "guardrepro.checks.report.d": ("from guardrepro.checks.core import metrics\n"
                                       "from ..audits.types import Ladder\n", False),
        "guardrepro.checks.audits.e": (
            "from . import types\nfrom guardrepro.schema import Record\n", False),
    }
    assert violations(modules) == [
        "guardrepro.checks.core.a:2 imports guardrepro.checks.report (report is above core)",
        "guardrepro.checks.core.a:2 imports guardrepro.checks.report.markdown "
        "(report is above core)",
        "guardrepro.checks.io.b:1 imports guardrepro.checks.stats.compute (stats is above io)",
        "guardrepro.checks.io.b:1 imports guardrepro.checks.stats.compute.compute_stats "
        "(stats is above io)",
        "guardrepro.checks.parity.c:1 imports guardrepro.api (above checks)",
    ]
    # a stage's own __init__ belongs to that stage: stats/__init__ importing parity goes up
    assert violations({"guardrepro.checks.stats": ("from ..parity import gate\n", True)}) == [
        "guardrepro.checks.stats:1 imports guardrepro.checks.parity (parity is above stats)",
        "guardrepro.checks.stats:1 imports guardrepro.checks.parity.gate (parity is above stats)"]


def test_every_checks_module_sits_in_a_stage_package() -> None:
    checks = PACKAGE / "checks"
    assert sorted(p.name for p in checks.iterdir() if p.is_dir() and p.name != "__pycache__") \
        == sorted(STAGES)
    flat = [p.name for p in checks.glob("*.py") if p.name != "__init__.py"]
    assert flat == [], f"modules outside a stage package: {flat}"
    nested = [p for stage in STAGES for p in (checks / stage).iterdir()
              if p.is_dir() and p.name != "__pycache__"]
    assert nested == []


def test_lower_pipeline_stages_never_import_checks() -> None:
    upward = [f"{name}:{line} imports {target}"
              for name, (source, is_init) in sources().items()
              if name.split(".")[1:2] and name.split(".")[1] in BELOW_CHECKS
              for line, target in imported(name, source, is_init)
              if target.split(".")[:2] in (["guardrepro", top]
                                            for top in ("checks", *ABOVE_CHECKS))]
    assert upward == []


def test_stage_packages_are_a_docstring_listing_their_modules() -> None:
    for stage in STAGES:
        folder = PACKAGE / "checks" / stage
        tree = ast.parse((folder / "__init__.py").read_text(encoding="utf-8"))
        doc = ast.get_docstring(tree)
        assert doc and len(tree.body) == 1, f"{stage}/__init__.py: a docstring and no code"
        modules = sorted(p.stem for p in folder.glob("*.py") if p.name != "__init__.py")
        listed = [line.split("``")[1] for line in doc.splitlines() if line.startswith("- ``")]
        assert listed == modules, stage
    top = ast.get_docstring(ast.parse((PACKAGE / "checks" / "__init__.py").read_text()))
    assert top is not None
    assert [line.split("``")[1] for line in top.splitlines() if line.startswith("- ``")] \
        == list(STAGES)


PIPELINE = ("artifacts", "bench", "guards", "rundir", "run", "checks")


def test_lower_pipeline_stages_never_import_a_higher_one() -> None:
    """artifacts -> bench -> guards -> rundir -> run -> checks: a module of one stage imports
    none of a later stage, deferred imports included (docs/ARCHITECTURE.md)."""
    upward = []
    for name, (source, is_init) in sources().items():
        here = name.split(".")[1:2]
        if not here or here[0] not in PIPELINE:
            continue
        for line, target in imported(name, source, is_init):
            there = target.split(".")
            if there[0] == "guardrepro" and len(there) > 1 and there[1] in PIPELINE \
                    and PIPELINE.index(there[1]) > PIPELINE.index(here[0]):
                upward.append(f"{name}:{line} imports {target}")
    assert sorted(set(upward)) == []
