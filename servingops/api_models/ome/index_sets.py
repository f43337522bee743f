"""Canonical index sets of ColumnarV2 (seed 004, InstanceStatusColumns): "0-8,10-114,116".

Terms are comma-separated, each a single index or a closed "first-last" range with first < last;
terms are strictly ascending, disjoint and nonadjacent (adjacent terms are merged); indices are
nonnegative int32 values without leading zeros; no whitespace, sign, empty term or trailing comma.
The canonical spelling is the only accepted one, so two equal sets always have equal strings and a
status diff never shows a change that is only a respelling.

Pure and deterministic: workflows call it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

INT32_MAX = 2**31 - 1

# One term, ASCII digits only ([0-9], not \d: Python's \d and int() also accept other scripts'
# digits, which the CRD pattern refuses); no leading zeros.
_TERM = re.compile(r"(0|[1-9][0-9]*)(?:-(0|[1-9][0-9]*))?")
_INT32_DIGITS = len(str(INT32_MAX))


class IndexSetError(ValueError):
    """An index set that is not in canonical form, or a set of ints that cannot be spelled."""


def format_index_set(indexes: Iterable[int]) -> str:
    """The canonical spelling of a nonempty set of int32 indexes (duplicates are one index)."""
    ordered = sorted(set(indexes))
    if not ordered:
        raise IndexSetError("an index set has at least one index; leave the field out instead")
    if ordered[0] < 0 or ordered[-1] > INT32_MAX:
        bad = ordered[0] if ordered[0] < 0 else ordered[-1]
        raise IndexSetError(f"index {bad} is not a nonnegative int32")
    terms: list[str] = []
    first = last = ordered[0]
    for index in ordered[1:]:
        if index == last + 1:
            last = index
            continue
        terms.append(_term(first, last))
        first = last = index
    terms.append(_term(first, last))
    return ",".join(terms)


def _term(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}-{last}"


def parse_index_ranges(text: str) -> list[tuple[int, int]]:
    """The closed ranges of a canonical index set, without expanding them (a two-word string can
    name two billion indexes); IndexSetError names the first non-canonical detail."""
    if text == "":
        raise IndexSetError("empty index set: an index set has at least one index")
    ranges: list[tuple[int, int]] = []
    terms = text.split(",")
    for position, term in enumerate(terms):
        if term == "":
            where = "trailing comma" if position == len(terms) - 1 else f"empty term {position + 1}"
            raise IndexSetError(f"index set {text!r}: {where}")
        first, last = _parse_term(text, term)
        if ranges:
            previous_first, previous_last = ranges[-1]
            if first < previous_first:
                raise IndexSetError(f"index set {text!r}: term {term!r} is not ascending")
            if first <= previous_last:
                raise IndexSetError(f"index set {text!r}: term {term!r} overlaps the term before it")
            if first == previous_last + 1:
                raise IndexSetError(
                    f"index set {text!r}: term {term!r} is adjacent to the term before it; "
                    "the canonical form merges them into one range"
                )
        ranges.append((first, last))
    return ranges


def _parse_term(text: str, term: str) -> tuple[int, int]:
    if any(ch.isspace() for ch in term):
        raise IndexSetError(f"index set {text!r}: whitespace in term {term!r}")
    if term[0] in "+-":
        raise IndexSetError(f"index set {text!r}: term {term!r} has a sign; indexes are nonnegative, unsigned")
    match = _TERM.fullmatch(term)
    if match is None:
        if re.fullmatch(r"[0-9]+(-[0-9]+)?", term):
            raise IndexSetError(f"index set {text!r}: leading zero in term {term!r}")
        raise IndexSetError(f"index set {text!r}: term {term!r} is not an index or a first-last range")
    first = _int32(text, match.group(1))
    if match.group(2) is None:
        return first, first
    last = _int32(text, match.group(2))
    if first >= last:
        raise IndexSetError(f"index set {text!r}: range {term!r} needs first < last")
    return first, last


def _int32(text: str, digits: str) -> int:
    # Checked by length first: int() of thousands of digits is slow and fails with an unrelated message.
    if len(digits) > _INT32_DIGITS or int(digits) > INT32_MAX:
        raise IndexSetError(f"index set {text!r}: index {digits} exceeds int32 ({INT32_MAX})")
    return int(digits)


def index_set_size(ranges: list[tuple[int, int]]) -> int:
    return sum(last - first + 1 for first, last in ranges)


def parse_index_set(text: str, *, limit: int | None = None) -> list[int]:
    """The ascending indexes of a canonical index set. With `limit`, a set of more indexes is
    refused before it is expanded."""
    ranges = parse_index_ranges(text)
    if limit is not None and index_set_size(ranges) > limit:
        raise IndexSetError(f"index set {text!r} names {index_set_size(ranges)} indexes, more than {limit}")
    return [index for first, last in ranges for index in range(first, last + 1)]


__all__ = [
    "INT32_MAX",
    "IndexSetError",
    "format_index_set",
    "index_set_size",
    "parse_index_ranges",
    "parse_index_set",
]
