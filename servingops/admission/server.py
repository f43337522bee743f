"""The webhook's HTTPS server: `POST /validate` (an AdmissionReview v1, answered by review.review) and
`GET /healthz`, on the HTTPS server both webhooks share (runtime/review_server.py)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Self

from servingops.admission.review import TreeReader, review
from servingops.runtime.review_server import HEALTH_PATH, ReviewServer

log = logging.getLogger("servingops.admission")

VALIDATE_PATH = "/validate"


class AdmissionServer(ReviewServer):
    """start() and stop() from main (or a test)."""

    def __init__(self, host: str, port: int, cert_file: Path, key_file: Path, reader: TreeReader, *,
                 max_depth: int) -> None:
        super().__init__(host, port, cert_file, key_file, path=VALIDATE_PATH, answer=self._review,
                         name="servingops-admission", log=log)
        self.reader = reader
        self.max_depth = max_depth

    def _review(self, body: dict[str, Any]) -> Mapping[str, Any]:
        answer = review(body, self.reader, max_depth=self.max_depth)
        response = answer["response"]
        if not response["allowed"]:
            log.info("refused %s: %s", (body.get("request") or {}).get("name", ""), response["status"]["message"])
        return answer

    def start(self) -> Self:
        super().start()
        log.info("admission webhook listening on https://%s:%d%s", self.host, self.port, VALIDATE_PATH)
        return self


__all__ = ["HEALTH_PATH", "VALIDATE_PATH", "AdmissionServer"]
