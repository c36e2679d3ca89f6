"""A missing optional dependency is reported in one wording that names what
needed it, the package and the extra to install."""

from __future__ import annotations

import sys

import pytest

from guardrepro.errors import DependencyMissingError, missing_extra


def test_wording_names_the_need_the_package_and_the_extra() -> None:
    err = missing_extra("figures", "matplotlib", "report")
    assert isinstance(err, ImportError)
    assert str(err) == ("figures needs the Python package 'matplotlib', which is not "
                        "installed: pip install 'guardrepro[report]'")
    assert str(missing_extra("the HTML report", "jinja2", None)).endswith("pip install jinja2")


def test_figures_without_matplotlib_name_the_report_extra(monkeypatch) -> None:
    from guardrepro.checks.report.figures import pyplot

    # None in sys.modules makes the import fail exactly as when it is not installed.
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(DependencyMissingError, match=r"'matplotlib'.*guardrepro\[report\]"):
        pyplot()


def test_a_sweep_without_mlx_names_the_mlx_extra(monkeypatch) -> None:
    from guardrepro.experiments.sweep import mlx_device

    monkeypatch.setitem(sys.modules, "mlx", None)
    monkeypatch.setitem(sys.modules, "mlx.core", None)
    with pytest.raises(DependencyMissingError, match=r"'mlx'.*guardrepro\[mlx\]"):
        mlx_device()


def test_the_ray_engine_without_ray_names_the_ray_extra(monkeypatch, tmp_path) -> None:
    from guardrepro.run.engine_ray import RayOptions, ray_session

    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(DependencyMissingError, match=r"'ray'.*guardrepro\[ray\]"), \
            ray_session(RayOptions(workers=1).checked(), tmp_path):
        pass
