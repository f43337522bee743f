"""A benchmark's stated goals, checked once its figures are printed: the exit status says whether all held.

Each bench records its goals as it measures (`goals.check(...)`), prints its figures as usual, and ends
with `goals.finish()`, which prints one line per goal and exits 1 when any was missed, so a bench can
run as a check (CI, a script) without anyone reading its output. A bench that fails before measuring
raises, which exits non-zero too.
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, NoReturn

Comparison = Literal["<", "<=", ">", ">="]
_COMPARE: dict[Comparison, Callable[[float, float], bool]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}  # fmt: skip


@dataclass(frozen=True)
class Goal:
    what: str
    value: float
    comparison: Comparison
    target: float
    unit: str = ""

    @property
    def met(self) -> bool:
        return _COMPARE[self.comparison](self.value, self.target)

    def line(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        verdict = "met" if self.met else "MISSED"
        return f"{verdict:6} {self.what}: {self.value:.4g}{unit} (goal {self.comparison} {self.target:g}{unit})"


@dataclass
class Goals:
    bench: str
    goals: list[Goal] = field(default_factory=list)

    def check(self, what: str, value: float, comparison: Comparison, target: float, unit: str = "") -> Goal:
        """Record a goal; `value` as measured, unrounded (rounding could turn a miss into a pass)."""
        goal = Goal(what, value, comparison, target, unit)
        self.goals.append(goal)
        return goal

    @property
    def all_met(self) -> bool:
        return all(goal.met for goal in self.goals)

    def finish(self) -> NoReturn:
        """Print every goal and exit: 0 when all were met, 1 otherwise."""
        print(f"\n== goals of {self.bench} ==", flush=True)
        for goal in self.goals:
            print(goal.line(), flush=True)
        missed = [goal for goal in self.goals if not goal.met]
        if missed:
            print(f"{self.bench}: {len(missed)} of {len(self.goals)} goals missed", flush=True)
        sys.exit(1 if missed else 0)
