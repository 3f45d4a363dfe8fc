"""Sluice's errors, as TensorFlow's ``tf.errors``: one class per status code.

Every failing call raises a subclass of :class:`OpError` carrying ``code`` (the canonical
status code, the same numbers as ``tf.errors``) and ``message`` (what failed and where, e.g.
``"pipeline expression, column 11: unknown op 'mapp'"``). The end of data is not an error for
Python iteration: ``next()`` raises ``StopIteration``.
"""

OK = 0
CANCELLED = 1
UNKNOWN = 2
INVALID_ARGUMENT = 3
DEADLINE_EXCEEDED = 4
NOT_FOUND = 5
ALREADY_EXISTS = 6
PERMISSION_DENIED = 7
RESOURCE_EXHAUSTED = 8
FAILED_PRECONDITION = 9
ABORTED = 10
OUT_OF_RANGE = 11
UNIMPLEMENTED = 12
INTERNAL = 13
UNAVAILABLE = 14
DATA_LOSS = 15
UNAUTHENTICATED = 16


class OpError(Exception):
    """A failed Sluice call: ``code`` (int, as tf.errors) and ``message`` (str)."""

    def __init__(self, message, code=UNKNOWN):
        super().__init__(message)
        self.message = message
        self.code = code

    def __str__(self):
        return self.message

    def __reduce__(self):
        return (type(self), (self.message, self.code))


class CancelledError(OpError):
    """The operation was cancelled."""


class UnknownError(OpError):
    """An error of no other kind."""


class InvalidArgumentError(OpError):
    """Bad input: a malformed pipeline expression, option, record or request."""


class DeadlineExceededError(OpError):
    """A deadline passed before the operation completed."""


class NotFoundError(OpError):
    """A file, job, dataset or worker that was looked up does not exist."""


class AlreadyExistsError(OpError):
    """What was to be created exists."""


class PermissionDeniedError(OpError):
    """The caller may not do this."""


class ResourceExhaustedError(OpError):
    """A memory budget or quota would be exceeded."""


class FailedPreconditionError(OpError):
    """The system is not in the state the operation needs."""


class AbortedError(OpError):
    """The operation was aborted (a conflict); it may be retried."""


class OutOfRangeError(OpError):
    """The end of data (only where Python iteration does not say it with StopIteration)."""


class UnimplementedError(OpError):
    """Not supported."""


class InternalError(OpError):
    """A broken invariant: a bug in Sluice."""


class UnavailableError(OpError):
    """The service cannot be reached now (retried with backoff until the deadline)."""


class DataLossError(OpError):
    """Unrecoverable data loss or corruption (a bad checksum, a truncated record)."""


class UnauthenticatedError(OpError):
    """A missing or wrong token or certificate."""


_CLASSES = {
    CANCELLED: CancelledError,
    UNKNOWN: UnknownError,
    INVALID_ARGUMENT: InvalidArgumentError,
    DEADLINE_EXCEEDED: DeadlineExceededError,
    NOT_FOUND: NotFoundError,
    ALREADY_EXISTS: AlreadyExistsError,
    PERMISSION_DENIED: PermissionDeniedError,
    RESOURCE_EXHAUSTED: ResourceExhaustedError,
    FAILED_PRECONDITION: FailedPreconditionError,
    ABORTED: AbortedError,
    OUT_OF_RANGE: OutOfRangeError,
    UNIMPLEMENTED: UnimplementedError,
    INTERNAL: InternalError,
    UNAVAILABLE: UnavailableError,
    DATA_LOSS: DataLossError,
    UNAUTHENTICATED: UnauthenticatedError,
}


def _by_code(code):
    """The class for a status code (the C++ side raises through this)."""
    return _CLASSES.get(code, UnknownError)
