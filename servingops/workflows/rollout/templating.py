"""Render an AnalysisMetric query with the rollout's revision context.

Upstream OME executes queries as Go text/template with a fixed context, so the same
placeholders work here: {{.Namespace}}, {{.ISVCName}}, {{.Component}}, {{.CanaryService}},
{{.StableService}}, {{.CanaryRevision}}, {{.StableRevision}} (whitespace inside the braces is
allowed, as Go allows it). Anything else in braces is an error rather than silently sent to
Prometheus: a query with a typo would otherwise read "no data" forever and stall the gate.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_PLACEHOLDER = re.compile(r"\{\{-?\s*(.*?)\s*-?\}\}")


class TemplateError(ValueError):
    """The query uses a placeholder the rollout context does not define."""


@dataclass(frozen=True)
class QueryContext:
    namespace: str
    isvc_name: str
    component: str
    canary_service: str
    stable_service: str
    canary_revision: str
    stable_revision: str

    def variables(self) -> dict[str, str]:
        return {
            ".Namespace": self.namespace,
            ".ISVCName": self.isvc_name,
            ".Component": self.component,
            ".CanaryService": self.canary_service,
            ".StableService": self.stable_service,
            ".CanaryRevision": self.canary_revision,
            ".StableRevision": self.stable_revision,
        }


def render(query: str, context: QueryContext) -> str:
    variables = context.variables()

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in variables:
            raise TemplateError(f"unknown template variable {{{{{name}}}}} (known: {', '.join(sorted(variables))})")
        return variables[name]

    return _PLACEHOLDER.sub(substitute, query)
