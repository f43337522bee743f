"""A stand-in for the model workflow: it waits for `upload-complete` under the model's workflow id.

Defined in an importable module: the workflow sandbox refuses classes from __main__.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from servingops.api_models.contract import Signal
    from servingops.api_models.contract.uploads import UploadComplete


@workflow.defn
class UploadProbe:
    def __init__(self) -> None:
        # Initialised here, not in run: under signal-with-start the handler can run first.
        self._uploads: list[UploadComplete] = []

    @workflow.run
    async def run(self) -> list[UploadComplete]:
        await workflow.wait_condition(lambda: bool(self._uploads))
        return list(self._uploads)

    @workflow.signal(name=Signal.UPLOAD_COMPLETE)
    def upload_complete(self, upload: UploadComplete) -> None:
        self._uploads.append(upload)
