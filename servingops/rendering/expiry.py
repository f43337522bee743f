"""When an InferenceService is to be deleted: seed 004's `spec.ttlSecondsAfterCreation`.

The deadline is computed from the object as it is now (creationTimestamp + ttl), on every observation, so
an edit of the ttl moves it and removing the field cancels it. A placement copy on a member cluster
(label `ome.io/placement-origin`) ignores it: its source's lifetime governs it, and placement removes it
when the source goes.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from servingops.api_models.ome.placement import ORIGIN_LABEL


def expires_at(obj: Mapping[str, Any]) -> datetime | None:
    ttl = (obj.get("spec") or {}).get("ttlSecondsAfterCreation")
    meta = obj.get("metadata") or {}
    if not isinstance(ttl, int) or isinstance(ttl, bool) or ttl < 1 or ORIGIN_LABEL in (meta.get("labels") or {}):
        return None
    created = meta.get("creationTimestamp")
    if not created:
        return None
    when = created if isinstance(created, datetime) else datetime.fromisoformat(str(created).replace("Z", "+00:00"))
    return when + timedelta(seconds=ttl)
