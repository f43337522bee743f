"""A runtime's per-accelerator tuning (SupportedModelFormat.acceleratorConfig) applied to the main
container, with upstream OME's rules: pure, on the container's JSON.

- environmentOverride: each variable set to the given value (replacing one of that name);
- runtimeArgsOverride: merged into the container's args by flag: a flag the override names replaces
  the container's flag and its values, a new flag is appended, the container's order is kept;
- tensorParallelismOverride: the value after --tp-size / --tp / --tensor-parallel-size (and
  --pp-size / --pp / --pipeline-parallel-size) is replaced where the first alias is found, in args,
  else in command (`--tp=2` forms included); nothing is added when neither names it.
"""

from __future__ import annotations

import copy
from typing import Any

from servingops.api_models.ome.runtimes import AcceleratorModelConfig

TENSOR_PARALLEL_FLAGS = ("--tp-size", "--tp", "--tensor-parallel-size")
PIPELINE_PARALLEL_FLAGS = ("--pp-size", "--pp", "--pipeline-parallel-size")


def _groups(args: list[str]) -> list[tuple[str, list[str]]]:
    """Args as (key, tokens) groups: a flag with the values that follow it; a leading value is a
    group of its own (keyed by its position, so it is never replaced)."""
    groups: list[tuple[str, list[str]]] = []
    for token in args:
        if token.startswith("-"):
            groups.append((token.split("=", 1)[0], [token]))
        elif groups and groups[-1][0].startswith("-"):
            groups[-1][1].append(token)
        else:
            groups.append((f"#{len(groups)}", [token]))
    return groups


def merge_args(args: list[str], overrides: list[str]) -> list[str]:
    if not overrides:
        return list(args)
    merged = dict(_groups(args))
    order = [key for key, _ in _groups(args)]
    for key, tokens in _groups(overrides):
        if key not in merged:
            order.append(key)
        merged[key] = tokens
    return [token for key in order for token in merged[key]]


def _override_value(tokens: list[str], aliases: tuple[str, ...], value: int) -> tuple[list[str], bool]:
    result = list(tokens)
    for alias in aliases:
        for index, token in enumerate(result):
            if token == alias and index + 1 < len(result):
                result[index + 1] = str(value)
                return result, True
            if token.startswith(alias + "="):
                result[index] = f"{alias}={value}"
                return result, True
    return result, False


def _override_param(container: dict[str, Any], aliases: tuple[str, ...], value: int) -> None:
    for field in ("args", "command"):
        tokens = container.get(field)
        if isinstance(tokens, list):
            updated, found = _override_value([str(t) for t in tokens], aliases, value)
            if found:
                container[field] = updated
                return


def apply(container: dict[str, Any], config: AcceleratorModelConfig) -> dict[str, Any]:
    """A copy of `container` tuned for the accelerator `config` describes."""
    result = copy.deepcopy(container)
    if config.environment_override:
        env = [e for e in result.get("env") or [] if e.get("name") not in config.environment_override]
        env += [{"name": k, "value": v} for k, v in sorted(config.environment_override.items())]
        result["env"] = env
    if config.runtime_args_override:
        result["args"] = merge_args([str(a) for a in result.get("args") or []], config.runtime_args_override)
    parallelism = config.tensor_parallelism_override
    if parallelism is not None:
        if parallelism.tensor_parallel_size:
            _override_param(result, TENSOR_PARALLEL_FLAGS, parallelism.tensor_parallel_size)
        if parallelism.pipeline_parallel_size:
            _override_param(result, PIPELINE_PARALLEL_FLAGS, parallelism.pipeline_parallel_size)
    return result
