"""The ``--engine`` options of ``run`` and ``sweep`` (docs/SCALE.md).

``--engine local`` (the default) is today's path (``--workers N`` processes
on this machine); ``--engine ray`` runs the units on a Ray actor pool
(``guardrepro.run.engine_ray``) with ``--workers`` actors, ``--units``
units (default: the worker count, which gives the records of ``--workers
N``), ``--ray-address`` (default: a local Ray started for the run) and
``--cpus-per-worker`` / ``--gpus-per-worker``. The options are only parsed
here: ``guardrepro.run.engine`` checks them and chooses the engine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from guardrepro.cli.options import POSITIVE
from guardrepro.run.engine import ENGINES


def engine_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--engine``, ``--ray-address``, ``--units``, ``--cpus-per-worker`` and
    ``--gpus-per-worker`` to a command."""
    options = [
        click.option("--engine", type=click.Choice(ENGINES), default="local", show_default=True,
                     help="local: worker processes on this machine; ray: the units on a Ray "
                     "actor pool (docs/SCALE.md; needs guardrepro[ray])."),
        click.option("--ray-address", default=None, metavar="ADDR",
                     help="--engine ray: the cluster to join (ray.init(address=...)); "
                     "default: a local Ray started and stopped by the run."),
        click.option("--units", type=POSITIVE, default=None,
                     help="--engine ray: units the rows are split into, balanced on their "
                     "sizes as --workers splits them (default: the worker count, which "
                     "reproduces --workers N bit for bit)."),
        click.option("--cpus-per-worker", type=click.FloatRange(min=0, min_open=True),
                     default=None, help="--engine ray: CPUs per actor (hf threads "
                     "\"auto\" becomes this); default: physical cores / workers."),
        click.option("--gpus-per-worker", type=click.FloatRange(min=0), default=0.0,
                     show_default=True, help="--engine ray: GPUs per actor."),
    ]
    for option in reversed(options):
        command = option(command)
    return command
