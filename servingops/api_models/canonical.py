"""The one canonical JSON serialisation of the project: sorted keys, no whitespace, UTF-8 (non-ASCII kept
as is). What is hashed into a digest (revision hashes, index and manifest digests, fingerprints) or
uploaded as a content-addressed blob goes through it, so equal content always gives equal bytes."""

from __future__ import annotations

import json
from typing import Any


def canonical_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
