"""Which runtime serves a model: pure rules, no I/O (the serving activity lists the runtimes).

Upstream OME's runtime selector is the reference for every rule the seed leaves implicit; this module
keeps its semantics so an OME user's runtimes are chosen as they were, and adds what upstream keeps
in logs: every candidate's verdict, which the InferenceService condition names.

A runtime is compatible with a model when it is not disabled, offers every accelerator class the
InferenceService requires, has a supported format that matches the model, and (if both sides say)
holds the model's size within its range. A supported format matches when:
- the format names are equal, and the versions are either both absent or compare true under the
  runtime's operator (Equal, GreaterThan, GreaterThanOrEqual: "the runtime's version is greater than
  the model's"; a pre-release/build version on either side compares by equality only; versions of
  different precision or prefix never compare as greater);
- the frameworks likewise (both absent also matches);
- architecture and quantization are equal, or absent on both sides (one side only is a mismatch);
- the runtime's diffusion pipeline requirements (class name, components' library and type) hold.

Automatic selection considers only formats with `autoSelect: true`; a runtime named in the spec is
only checked for compatibility. Ranking: namespaced ServingRuntimes before ClusterServingRuntimes;
within each, the highest score (format weight x priority + framework weight x priority, best
format), then the size range closest to the model (sum of distances to min and max), then name.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from servingops.api_models.ome.models import (
    BaseModelSpec,
    DiffusionComponentSpec,
    DiffusionPipelineSpec,
    ModelFormat,
    ModelFrameworkSpec,
)
from servingops.api_models.ome.runtimes import ServingRuntimeSpec, SupportedModelFormat

DEFAULT_PRIORITY = 1


class RuntimeKind(StrEnum):
    NAMESPACED = "ServingRuntime"
    CLUSTER = "ClusterServingRuntime"


@dataclass(frozen=True)
class RuntimeCandidate:
    name: str
    kind: RuntimeKind
    spec: ServingRuntimeSpec
    namespace: str | None = None
    created: datetime | None = None


@dataclass
class Verdict:
    """One candidate as selection saw it: compatible with a score, or not with the reasons."""

    candidate: RuntimeCandidate
    compatible: bool = False
    score: int = 0
    reasons: list[str] = field(default_factory=list)
    format: SupportedModelFormat | None = None
    """The supported format that matched (the best-scoring one)."""

    def describe(self) -> str:
        where = f"{self.candidate.kind.value} {self.candidate.name}"
        if self.compatible:
            return f"{where}: compatible, score {self.score}"
        return f"{where}: {'; '.join(self.reasons)}"


@dataclass
class Selection:
    chosen: Verdict | None
    verdicts: list[Verdict]
    """Every candidate, in ranking order (compatible first), for the condition message."""

    def explain(self, limit: int = 8) -> str:
        """Why nothing (or this) was chosen, bounded so a condition message stays short."""
        shown = [v.describe() for v in self.verdicts[:limit]]
        more = len(self.verdicts) - limit
        if more > 0:
            shown.append(f"... and {more} more")
        return "; ".join(shown) if shown else "no ServingRuntime or ClusterServingRuntime exists"


# -- versions ------------------------------------------------------------------------------------

_VERSION = re.compile(r"^(?P<prefix>v?)(?P<major>\d+)(?:\.(?P<minor>\d+))?(?:\.(?P<patch>\d+)(?P<rest>[-+.].*)?)?$")


@dataclass(frozen=True)
class Version:
    prefix: str
    parts: tuple[int, int, int]
    precision: int
    unofficial: bool
    """A pre-release, build or dev suffix: compared by equality only."""
    rest: str


def parse_version(text: str) -> Version | None:
    match = _VERSION.match(text.strip())
    if match is None:
        return None
    minor, patch = match["minor"], match["patch"]
    precision = 1 + (minor is not None) + (patch is not None)
    rest = match["rest"] or ""
    return Version(
        prefix=match["prefix"],
        parts=(int(match["major"]), int(minor or 0), int(patch or 0)),
        precision=precision,
        unofficial=bool(rest),
        rest=rest,
    )


def versions_match(runtime_version: str, model_version: str, operator: str | None) -> bool:
    supported, wanted = parse_version(runtime_version), parse_version(model_version)
    if supported is None or wanted is None:
        return False  # an unparseable version never matches (as upstream)
    equal = supported.parts == wanted.parts and supported.rest == wanted.rest
    op = operator or "Equal"
    if supported.unofficial or wanted.unofficial or op == "Equal":
        return equal
    if supported.precision != wanted.precision or supported.prefix != wanted.prefix:
        return False
    if op == "GreaterThan":
        return supported.parts > wanted.parts
    if op == "GreaterThanOrEqual":
        return supported.parts >= wanted.parts
    return equal


# -- sizes ---------------------------------------------------------------------------------------

_SIZE_SUFFIX = {"T": 1e12, "B": 1e9, "M": 1e6}


def parse_size(text: str | None) -> float | None:
    """"7B" -> 7e9, "1.5T" -> 1.5e12, "350M" -> 3.5e8; None when unreadable."""
    if not text:
        return None
    value = text.strip()
    factor = _SIZE_SUFFIX.get(value[-1:].upper(), 1.0) if value[-1:].isalpha() else 1.0
    number = value[:-1] if value[-1:].isalpha() else value
    try:
        return float(number) * factor
    except ValueError:
        return None


def _size_problem(spec: ServingRuntimeSpec, model: BaseModelSpec) -> str | None:
    size_range = spec.model_size_range
    size = parse_size(model.model_parameter_size)
    if size is None or size_range is None:
        return None
    low, high = parse_size(size_range.min), parse_size(size_range.max)
    if (low is not None and size < low) or (high is not None and size > high):
        return (
            f"model size {model.model_parameter_size} is outside the runtime's range "
            f"[{size_range.min or '-'}, {size_range.max or '-'}]"
        )
    return None


def _size_distance(spec: ServingRuntimeSpec, model: BaseModelSpec) -> float:
    size = parse_size(model.model_parameter_size)
    size_range = spec.model_size_range
    if size is None or size_range is None:
        return math.inf
    low, high = parse_size(size_range.min), parse_size(size_range.max)
    if low is None or high is None:
        return math.inf
    return abs(low - size) + abs(high - size)


# -- one supported format --------------------------------------------------------------------------


def _pair(what: str, model: str | None, runtime: str | None) -> str | None:
    if model is not None and runtime is not None:
        return None if model == runtime else f"{what} {model!r} is not the runtime's {runtime!r}"
    if model is None and runtime is not None:
        return f"the runtime requires {what} {runtime!r} and the model states none"
    if model is not None and runtime is None:
        return f"the model's {what} {model!r} is not among the runtime's (it names none)"
    return None


def _named_versioned(
    what: str,
    model: ModelFormat | ModelFrameworkSpec | None,
    runtime: ModelFormat | ModelFrameworkSpec | None,
    *,
    versionless: bool = False,
) -> str | None:
    if model is None and runtime is None:
        return None
    if model is None or runtime is None:
        return _pair(what, model.name if model else None, runtime.name if runtime else None)
    if model.name != runtime.name:
        return f"{what} {model.name!r} is not the runtime's {runtime.name!r}"
    if model.version is None and runtime.version is None:
        return None
    if versionless and model.version is None:
        return None  # the model cannot know its version: the runtime's requirement is not applied
    if model.version is None or runtime.version is None:
        return _pair(f"{what} version", model.version, runtime.version)
    if not versions_match(runtime.version, model.version, runtime.operator):
        return (
            f"{what} version {model.version} does not satisfy the runtime's {runtime.operator or 'Equal'} "
            f"{runtime.version}"
        )
    return None


def _component_problem(name: str, model: DiffusionComponentSpec | None, runtime: DiffusionComponentSpec) -> str | None:
    if model is None:
        return f"the runtime's diffusion pipeline needs a {name} and the model has none"
    if runtime.library and runtime.library != model.library:
        return f"diffusion {name} library {model.library!r} is not the runtime's {runtime.library!r}"
    if runtime.type and runtime.type != model.type:
        return f"diffusion {name} type {model.type!r} is not the runtime's {runtime.type!r}"
    return None


def _pipeline_problem(model: DiffusionPipelineSpec | None, runtime: DiffusionPipelineSpec | None) -> str | None:
    if runtime is None:
        return None
    if model is None:
        return "the runtime serves a diffusion pipeline and the model declares none"
    if runtime.class_name and runtime.class_name != model.class_name:
        return f"pipeline class {model.class_name!r} is not the runtime's {runtime.class_name!r}"
    for name in ("scheduler", "text_encoder", "tokenizer", "transformer", "vae"):
        wanted = getattr(runtime, name)
        if wanted is not None and (problem := _component_problem(name, getattr(model, name), wanted)):
            return problem
    for name, wanted in (runtime.additional_components or {}).items():
        have = (model.additional_components or {}).get(name)
        if problem := _component_problem(name, have, wanted):
            return problem
    return None


def format_problems(model: BaseModelSpec, supported: SupportedModelFormat, *, versionless: bool = False) -> list[str]:
    """Why this supported format does not fit the model (empty: it fits). `versionless`: the model
    states no format / framework versions because its source has none (a Deckhouse Model)."""
    problems = [
        _pipeline_problem(model.diffusion_pipeline, supported.diffusion_pipeline),
        _pair("architecture", model.model_architecture, supported.model_architecture),
        _pair("quantization", model.quantization, supported.quantization),
        _named_versioned("format", model.model_format, supported.model_format, versionless=versionless),
        _named_versioned("framework", model.model_framework, supported.model_framework, versionless=versionless),
    ]
    return [p for p in problems if p]


def format_score(supported: SupportedModelFormat) -> int:
    """weight x priority of the format, plus of the framework when the runtime names one."""
    priority = supported.priority or DEFAULT_PRIORITY
    score = supported.model_format.weight * priority
    if supported.model_framework is not None:
        score += supported.model_framework.weight * priority
    return score


# -- a runtime -----------------------------------------------------------------------------------


def judge(
    candidate: RuntimeCandidate,
    model: BaseModelSpec,
    accelerator_classes: frozenset[str] = frozenset(),
    *,
    auto_select: bool,
    versionless: bool = False,
) -> Verdict:
    """The verdict on one runtime; `auto_select` limits it to formats with autoSelect: true."""
    spec = candidate.spec
    verdict = Verdict(candidate=candidate)
    if spec.disabled:
        verdict.reasons.append("disabled")
        return verdict
    offered = set((spec.accelerator_requirements.accelerator_classes or []) if spec.accelerator_requirements else [])
    missing = sorted(accelerator_classes - offered)
    if missing:
        verdict.reasons.append(f"does not offer accelerator class {', '.join(missing)}")
        return verdict
    formats = spec.supported_model_formats or []
    if auto_select:
        formats = [f for f in formats if f.auto_select]
        if not formats:
            verdict.reasons.append("no supported format has autoSelect: true")
            return verdict
    if not formats:
        verdict.reasons.append("declares no supported model formats")
        return verdict
    fitting: list[SupportedModelFormat] = []
    mismatches: list[str] = []
    for supported in formats:
        problems = format_problems(model, supported, versionless=versionless)
        if problems:
            label = supported.name or supported.model_format.name
            mismatches.append(f"{label}: {', '.join(problems)}")
        else:
            fitting.append(supported)
    if not fitting:
        verdict.reasons.append("no supported format fits (" + " | ".join(mismatches) + ")")
        return verdict
    if problem := _size_problem(spec, model):
        verdict.reasons.append(problem)
        return verdict
    best = max(fitting, key=format_score)
    verdict.compatible, verdict.score, verdict.format = True, format_score(best), best
    return verdict


def _rank(verdict: Verdict, model: BaseModelSpec) -> tuple[int, int, int, float, str]:
    return (
        0 if verdict.compatible else 1,
        0 if verdict.candidate.kind is RuntimeKind.NAMESPACED else 1,
        -verdict.score,
        _size_distance(verdict.candidate.spec, model),
        verdict.candidate.name,
    )


def select_runtime(
    model: BaseModelSpec,
    candidates: list[RuntimeCandidate],
    accelerator_classes: frozenset[str] = frozenset(),
    *,
    versionless: bool = False,
) -> Selection:
    """Automatic selection: the best compatible runtime among `candidates` (the namespace's
    ServingRuntimes and the ClusterServingRuntimes), and every verdict in ranking order."""
    verdicts = [judge(c, model, accelerator_classes, auto_select=True, versionless=versionless) for c in candidates]
    verdicts.sort(key=lambda v: _rank(v, model))
    chosen = verdicts[0] if verdicts and verdicts[0].compatible else None
    return Selection(chosen=chosen, verdicts=verdicts)


def check_runtime(
    candidate: RuntimeCandidate,
    model: BaseModelSpec,
    accelerator_classes: frozenset[str] = frozenset(),
    *,
    versionless: bool = False,
) -> Verdict:
    """A runtime the InferenceService names: compatible or not, autoSelect not required."""
    return judge(candidate, model, accelerator_classes, auto_select=False, versionless=versionless)
