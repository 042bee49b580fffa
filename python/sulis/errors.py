"""Exceptions raised by sulis.

``SulisError`` is the base of all of them. Hot-path outcomes (back pressure,
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
    SulisError,
)

__all__ = [
    "ActiveDriverError",
    "ArchiveError",
    "ClientTimeoutError",
    "ClosedError",
    "ConfigurationError",
    "DriverTimeoutError",
    "MessageTooLongError",
    "RegistrationError",
    "SulisError",
]
