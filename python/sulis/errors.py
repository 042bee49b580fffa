"""Exceptions raised by sulis.

``SulisError`` is the base of all of them (``ArchiveIOError`` is an
``OSError`` too). Hot-path outcomes (back pressure,
not connected, admin action) are result codes returned by ``offer``, not
exceptions.
"""

from ._native import (
    ActiveDriverError,
    ArchiveError,
    ClientTimeoutError,
    ClosedError,
    ConfigurationError,
    DriverTimeoutError,
    MessageTooLongError,
    RegistrationError,
    StorageSpaceError,
    SulisError,
)


class ArchiveIOError(SulisError, OSError):
    """A file of the archive could not be created, read or written (a full
    disk, a permission): an ``OSError`` whose ``errno`` says why, as the
    operating system did, and a ``SulisError``."""


__all__ = [
    "ActiveDriverError",
    "ArchiveError",
    "ArchiveIOError",
    "ClientTimeoutError",
    "ClosedError",
    "ConfigurationError",
    "DriverTimeoutError",
    "MessageTooLongError",
    "RegistrationError",
    "StorageSpaceError",
    "SulisError",
]
