"""Why a model file or an upload is rejected: an ErrorType (the condition reason) and a message a user can act on.

Everything in `clients.model_files` signals bad input with `InvalidModel` and nothing else, so the
import workflow can end in phase Failed with `reason` and `message` on its condition instead of retrying
an input that will never get better. The activities raise it across the boundary as
`application_error(exc.reason, exc.message)`: the ApplicationError's type is the reason itself.
Bugs and I/O failures of our own stay ordinary exceptions (retried).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from servingops.api_models.errors import MAX_MESSAGE_CHARS, ErrorType

# Config-like JSON (config.json, tokenizer_config.json, indexes) is read whole; big tokenizer configs run
# to a few MB, so this bound only stops a hostile file from making us parse gigabytes.
MAX_JSON_BYTES = 64 * 1024 * 1024


class InvalidModel(Exception):
    """The input is not a model we can import; `reason` goes to the condition, `message` explains it."""

    def __init__(self, reason: ErrorType, message: str) -> None:
        # ErrorType(...) also refuses a string that is no member (and restores the member after unpickling).
        reason = ErrorType(reason)
        if len(message) > MAX_MESSAGE_CHARS:
            message = message[: MAX_MESSAGE_CHARS - 3] + "..."
        super().__init__(message)
        self.reason = reason
        self.message = message

    def __reduce__(self) -> tuple[Any, ...]:
        # The default pickling passes only args (the message) back to __init__.
        return (type(self), (self.reason, self.message))

    def __repr__(self) -> str:
        return f"InvalidModel({self.reason.value!r}, {self.message!r})"


def display_path(path: Path, root: Path | None = None) -> str:
    """A file's name as a user knows it: relative to the model root when possible, never a worker path."""
    if root is not None:
        try:
            return path.relative_to(root).as_posix()
        except ValueError:
            pass
    return path.name


def load_json_object(
    path: Path, reason: ErrorType, *, what: str, shown_as: str | None = None, limit: int = MAX_JSON_BYTES
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
