"""``guardrepro doctor``: print what a run's determinism depends on.

Input: optional ``--profile`` (a run profile), ``--require-batch-invariance``
(as if the profile demanded it), ``--json``. Output on stdout: the facts
(backend, versions, device, compute capability, dtype, batch-invariance mode,
multiprocessing, max concurrent sequences, threads, environment) and, with a
profile, the batch-invariance verdict. Exit code 2 when the profile requires
batch invariance and the backend/device cannot give it (``guardrepro.run.doctor``).
"""

from __future__ import annotations

from pathlib import Path

import click

from guardrepro.cli.options import JSON_OPTION, SpecFile, emit


@click.command("doctor", short_help="Preflight: what a run's determinism depends on.")
@click.option(
    "--profile",
    "profile_path",
    type=SpecFile("runners"),
    default=None,
    help="Run profile to check (without it: a machine-wide report).",
)
@click.option(
    "--require-batch-invariance",
    is_flag=True,
    default=False,
    help="Refuse unless the profile's setup is batch invariant (as the profile key does).",
)
@JSON_OPTION
def doctor(profile_path: Path | None, require_batch_invariance: bool, as_json: bool) -> None:
    """Preflight: versions, device, dtype and batching settings that decide
    whether a run's outputs are reproducible and batch invariant."""
    from guardrepro.run.doctor import BatchInvarianceRefused, diagnose, format_report

    profile = None
    if profile_path is not None:
        from guardrepro.run.profile import RunProfile

        profile = RunProfile.load(profile_path)
    report = diagnose(profile, require=True if require_batch_invariance else None)
    emit(as_json, report.to_dict(), format_report(report))
    if report.refused:
        assert report.verdict is not None
        raise BatchInvarianceRefused(
            f"batch invariance required but {report.verdict.verdict}: {report.verdict.reason}",
            file=report.profile,
            field="require_batch_invariance",
        )
