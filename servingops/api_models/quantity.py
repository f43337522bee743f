"""A Kubernetes resource.Quantity read exactly: the one parser the rules share (routing weights, capacity
factors, accelerator memory, quota budgets and their shares, scaling ratios)."""

from __future__ import annotations

import re
from decimal import Decimal
from fractions import Fraction

_SUFFIXES = {
    "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": Fraction(1),
    "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
    "P": Fraction(10**15), "E": Fraction(10**18),
    "Ki": Fraction(2**10), "Mi": Fraction(2**20), "Gi": Fraction(2**30), "Ti": Fraction(2**40),
    "Pi": Fraction(2**50), "Ei": Fraction(2**60),
}  # fmt: skip
_QUANTITY = re.compile(
    r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(?:([eE][+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?$"
)


def quantity(value: int | str) -> Fraction:
    """A Kubernetes resource.Quantity as an exact fraction ("1.5" -> 3/2, "500m" -> 1/2, "1e3" -> 1000)."""
    if isinstance(value, int):
        return Fraction(value)
    match = _QUANTITY.match(value.strip())
    if not match:
        raise ValueError(f"{value!r} is not a quantity")
    number, exponent, suffix = match.groups()
    base = Fraction(Decimal(number))
    if exponent:
        return base * Fraction(10) ** int(exponent[1:])
    return base * _SUFFIXES[suffix or ""]


def quantity_text(value: Fraction) -> str:
    """A quantity's wire form: an integer when whole, else a plain decimal."""
    if value.denominator == 1:
        return str(value.numerator)
    return format(Decimal(value.numerator) / Decimal(value.denominator), "f")


__all__ = ["quantity", "quantity_text"]
