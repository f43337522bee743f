"""Why a model file or an upload is rejected: a metav1 Condition reason and a message a user can act on.

Everything in `activities.model_files` signals bad input with `InvalidModel` and nothing else, so the
import workflow can end in phase Failed with `reason` and `message` on its condition instead of retrying
an input that will never get better. Bugs and I/O failures of our own stay ordinary exceptions (retried).
"""

from __future__ import annotations

import json
import re
from enum import StrEnum
from pathlib import Path
from typing import Any

from temporalio.exceptions import ApplicationError

# metav1.Condition.reason must match this; checked when an error is built so a typo cannot reach the API.
CONDITION_REASON_PATTERN = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
# The ApplicationError type under which InvalidModel crosses the activity boundary.
INVALID_MODEL_ERROR_TYPE = "InvalidModel"
# metav1.Condition.message is limited to 32768 bytes; stay well below so a wrapping prefix still fits.
MAX_MESSAGE_CHARS = 4096
# Config-like JSON (config.json, tokenizer_config.json, indexes) is read whole; big tokenizer configs run
# to a few MB, so this bound only stops a hostile file from making us parse gigabytes.
MAX_JSON_BYTES = 64 * 1024 * 1024


class Reason(StrEnum):
    """Condition reasons for a model that cannot be imported as given."""

    # What the files are
    UNKNOWN_FORMAT = "UnknownFormat"
    UNSUPPORTED_FORMAT = "UnsupportedFormat"  # recognised, but not one we serve (pickle .bin, .pt, .onnx, ...)
    AMBIGUOUS_MODEL = "AmbiguousModel"  # several models where one is expected (e.g. many GGUF quantizations)
    EMPTY_MODEL = "EmptyModel"
    # Safetensors
    TRUNCATED_SAFETENSORS = "TruncatedSafetensors"
    INVALID_SAFETENSORS_HEADER = "InvalidSafetensorsHeader"
    INVALID_SAFETENSORS_INDEX = "InvalidSafetensorsIndex"
    MISSING_SHARD = "MissingShard"
    # transformers config
    MISSING_CONFIG = "MissingConfig"
    INVALID_CONFIG = "InvalidConfig"
    # GGUF
    INVALID_GGUF = "InvalidGGUF"
    UNSUPPORTED_GGUF_VERSION = "UnsupportedGGUFVersion"
    UNSUPPORTED_GGUF_TYPE = "UnsupportedGGUFType"
    TRUNCATED_GGUF = "TruncatedGGUF"
    # Diffusers
    INVALID_DIFFUSERS = "InvalidDiffusers"
    # Archives (uploads)
    UNSUPPORTED_ARCHIVE = "UnsupportedArchive"
    INVALID_ARCHIVE = "InvalidArchive"
    EMPTY_ARCHIVE = "EmptyArchive"
    ARCHIVE_PATH_ESCAPE = "ArchivePathEscape"
    INVALID_ARCHIVE_PATH = "InvalidArchivePath"
    ARCHIVE_LINK = "ArchiveLink"
    ARCHIVE_SPECIAL_FILE = "ArchiveSpecialFile"
    ARCHIVE_DUPLICATE_ENTRY = "ArchiveDuplicateEntry"
    ARCHIVE_BOMB = "ArchiveBomb"
    ARCHIVE_TOO_LARGE = "ArchiveTooLarge"
    ARCHIVE_TOO_MANY_FILES = "ArchiveTooManyFiles"
    ENCRYPTED_ARCHIVE = "EncryptedArchive"


class InvalidModel(Exception):
    """The input is not a model we can import; `reason` goes to the condition, `message` explains it."""

    def __init__(self, reason: Reason | str, message: str) -> None:
        reason = str(reason)
        if not CONDITION_REASON_PATTERN.match(reason):
            raise ValueError(f"{reason!r} is not a valid condition reason")
        if len(message) > MAX_MESSAGE_CHARS:
            message = message[: MAX_MESSAGE_CHARS - 3] + "..."
        super().__init__(message)
        self.reason = reason
        self.message = message

    def __reduce__(self) -> tuple[Any, ...]:
        # The default pickling passes only args (the message) back to __init__.
        return (type(self), (self.reason, self.message))

    def __repr__(self) -> str:
        return f"InvalidModel({self.reason!r}, {self.message!r})"

    def to_application_error(self) -> ApplicationError:
        """The activity-boundary form: non-retryable, with the reason as the error's details.

        A workflow reads it back with `details[0]` (reason) and `message`; retrying cannot fix bad input.
        """
        return ApplicationError(self.message, self.reason, type=INVALID_MODEL_ERROR_TYPE, non_retryable=True)


def display_path(path: Path, root: Path | None = None) -> str:
    """A file's name as a user knows it: relative to the model root when possible, never a worker path."""
    if root is not None:
        try:
            return path.relative_to(root).as_posix()
        except ValueError:
            pass
    return path.name


def load_json_object(
    path: Path, reason: Reason, *, what: str, shown_as: str | None = None, limit: int = MAX_JSON_BYTES
) -> dict[str, Any]:
    """Read a small JSON file that must hold an object; any problem becomes InvalidModel(reason).

    Bounded by `limit` (checked on the size before reading), strict UTF-8, duplicate keys rejected:
    two readers of a file with duplicate keys may disagree on which value counts.
    """
    name = shown_as or path.name
    size = path.stat().st_size
    if size > limit:
        raise InvalidModel(reason, f"{name}: {what} is {size} bytes, more than the {limit} bytes allowed")
    with path.open("rb") as fh:
        raw = fh.read(limit + 1)
    try:
        data = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicate_keys)
    except UnicodeDecodeError as exc:
        raise InvalidModel(reason, f"{name}: {what} is not UTF-8 text (byte {exc.start})") from None
    except _DuplicateKey as exc:
        raise InvalidModel(reason, f"{name}: {what} has the key {exc.key!r} more than once") from None
    except ValueError as exc:
        raise InvalidModel(reason, f"{name}: {what} is not valid JSON ({exc})") from None
    except RecursionError:
        raise InvalidModel(reason, f"{name}: {what} nests too deeply") from None
    if not isinstance(data, dict):
        raise InvalidModel(reason, f"{name}: {what} must be a JSON object, found {type(data).__name__}")
    return data


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result
