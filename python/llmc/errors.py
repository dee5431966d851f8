"""The exceptions llmc raises: one class per status code of the runtime, all under
:class:`llmc.Error`, each carrying the runtime's message (what failed and where)."""

from __future__ import annotations


class Error(RuntimeError):
    """An llmc call failed. ``code`` is the runtime's status code (``llmc::StatusCode``)."""

    code: int = 8

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class InvalidArgumentError(Error, ValueError):
    """Bad input from the caller: shapes, names, options, a malformed model."""
    code = 1


class NotFoundError(Error, LookupError):
    """A file, tensor, tokenizer or chat template that does not exist."""
    code = 2


class OutOfRangeError(Error, IndexError):
    """A dimension outside its declared range, a prompt longer than the context."""
    code = 3


class UnimplementedError(Error, NotImplementedError):
    """An operator, dtype or feature llmc does not have (the message names the node)."""
    code = 4


class DataLossError(Error):
    """A corrupted or truncated file."""
    code = 5


class FailedPreconditionError(Error):
    """A call that cannot run in the current state (an engine format this runtime cannot read,
    a session already running on another thread)."""
    code = 6


class ResourceExhaustedError(Error, MemoryError):
    """Out of memory, or the KV cache is full."""
    code = 7


class InternalError(Error):
    """A broken invariant of llmc itself (please report it)."""
    code = 8


class UnavailableError(Error):
    code = 9


class CancelledError(Error):
    code = 10


_BY_CODE = {cls.code: cls for cls in (
    InvalidArgumentError, NotFoundError, OutOfRangeError, UnimplementedError, DataLossError,
    FailedPreconditionError, ResourceExhaustedError, InternalError, UnavailableError,
    CancelledError)}


def _class_for_code(code: int) -> type[Error]:
    return _BY_CODE.get(code, Error)


__all__ = ["Error"] + [cls.__name__ for cls in _BY_CODE.values()]
