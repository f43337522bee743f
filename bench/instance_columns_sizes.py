"""Sizes of an InferenceReplica's per-Instance rows in each spelling, and where a write switches.

    .venv/bin/python -m bench.instance_columns_sizes [--budget-bytes 524288] [--admitted]

A typical settled row set: every Instance Ready on the same revision, one pod serving and available,
its own readySince (one second apart). Prints the DenseV1 bytes of one row, the first row count that
`with_rows` writes as ColumnarV2 under the budget (api_models/ome/instance_columns.py,
DEFAULT_BUDGET_BYTES), and both spellings' bytes at 200, 2,000 and that count. Pure computation: no
stack, no timing.
"""

from __future__ import annotations

import argparse
import datetime as dt

from servingops.api_models.ome.instance_columns import (
    DEFAULT_BUDGET_BYTES,
    ENCODING_FIELD,
    dense_json,
    encode,
    json_size,
    with_rows,
)
from servingops.api_models.ome.instance_status import OMENativeInstanceStatus

T0 = dt.datetime(2026, 11, 29, 10, 0, tzinfo=dt.UTC)
REVISION = "llama-3-70b-engine-5d8f7c9b6d"


def typical(count: int, *, admitted: bool) -> list[OMENativeInstanceStatus]:
    return [OMENativeInstanceStatus(index=i, phase="Ready", running_revision=REVISION, target_revision=REVISION,
                                    pod_count=1, serving_pod_count=1, available_pod_count=1,
                                    admitted=admitted or None, ready_since=T0 + dt.timedelta(seconds=i))
            for i in range(count)]


def switch_point(budget: int, *, admitted: bool) -> int:
    """The fewest rows written as ColumnarV2 (DenseV1 grows with every row, so bisect)."""
    low, high = 1, 1
    while with_rows(typical(high, admitted=admitted), budget_bytes=budget)[ENCODING_FIELD] is None:
        high *= 2
    while low < high:
        middle = (low + high) // 2
        if with_rows(typical(middle, admitted=admitted), budget_bytes=budget)[ENCODING_FIELD] is None:
            low = middle + 1
        else:
            high = middle
    return low


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget-bytes", type=int, default=DEFAULT_BUDGET_BYTES)
    parser.add_argument("--admitted", action="store_true", help="rows also say admitted: true")
    args = parser.parse_args()
    print(f"one DenseV1 row: {json_size(dense_json(typical(1, admitted=args.admitted))) - 2} bytes")
    switch = switch_point(args.budget_bytes, admitted=args.admitted)
    print(f"budget {args.budget_bytes} bytes: ColumnarV2 from {switch} rows on")
    for count in (200, 2000, switch):
        rows = typical(count, admitted=args.admitted)
        print(f"{count} rows: DenseV1 {json_size(dense_json(rows))} bytes, "
              f"ColumnarV2 {json_size(encode(rows).to_api())} bytes")


if __name__ == "__main__":
    main()
