"""Python exceptions for flash's status codes. Each is also the builtin a caller would
expect (ValueError, NotImplementedError, RuntimeError), so `except ValueError` works
without knowing this package, and `except flashattn.Error` catches them all."""
from . import _abi


class Error(Exception):
    """Base of every error raised by flashattn; the message is flash's."""


class InvalidArgument(Error, ValueError):
    """A tensor, descriptor field or argument is invalid (FLASH_STATUS_INVALID_ARGUMENT)."""


class Unsupported(Error, NotImplementedError):
    """The backend is unavailable or cannot run this problem (FLASH_STATUS_UNSUPPORTED),
    or a FlashAttention argument this package does not implement."""


class BackendError(Error, RuntimeError):
    """The backend failed at run time, e.g. a CUDA error or out of memory."""


class InternalError(Error, RuntimeError):
    """A bug in libflashattn: please report it with the message."""


_BY_STATUS = {
    _abi.INVALID_ARGUMENT: InvalidArgument,
    _abi.UNSUPPORTED: Unsupported,
    _abi.RUNTIME_ERROR: BackendError,
    _abi.INTERNAL_ERROR: InternalError,
}


def raise_status(lib, status):
    """Raises the exception for a non-zero status with flash_last_error()'s text (read
    on this thread, right after the failed call, as the C API requires)."""
    message = lib.flash_last_error().decode("utf-8", "replace")
    raise _BY_STATUS.get(status, InternalError)(message or f"flash: status {status}")


def invalid(name, value, allowed):
    """A Python-side argument check, worded like flash::Error: field, value, what is allowed."""
    return InvalidArgument(f"flash: {name} = {value} is invalid; {allowed}")
