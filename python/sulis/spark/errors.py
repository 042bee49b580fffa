"""The errors ``format("sulis")`` raises: each a ``sulis.SulisError``, and each also the built-in
exception it was before (``ValueError``, ``RuntimeError``, ``TimeoutError``, ``ConnectionError``), so
``except`` clauses written for either catch it. Spark shows an executor's error as text (the
Python worker's traceback); the message names what failed and where.

Nothing here imports pyspark.
"""

from __future__ import annotations

from ..errors import SulisError

__all__ = ["OptionError", "DataLossError", "ArchiveUnavailableError", "NoMediaDriverError", "ReadError",
           "ReadTimeoutError", "RowError", "SinkError", "SinkTimeoutError"]


class OptionError(SulisError, ValueError):
    """A ``format("sulis")`` option is missing, unknown or has a bad value; the message names it."""


class DataLossError(SulisError, RuntimeError):
    """Data a query was to read is gone from the archive (purged, detached, truncated, or extended
    where the offsets no longer say it was read to)."""


class ArchiveUnavailableError(SulisError, RuntimeError):
    """The archive did not answer (stopped, killed, unreachable); the message names it and what is read.

    A query that fails with it can be restarted from its checkpoint once the archive is back: the
    offsets are positions in the recordings, which an archive restarted on its directory keeps."""


class NoMediaDriverError(SulisError, ConnectionError):
    """A process of the query (an executor, the Spark driver) finds no media driver, or cannot reach
    the archive through it: every host that runs one needs a sulis media driver of its own."""


class ReadError(SulisError, RuntimeError):
    """A partition could not be read whole: a replay refused, failed or ended before its end, or
    recording files that are corrupt or missing. A partition ends only at its end, or with this."""


class ReadTimeoutError(ReadError, TimeoutError):
    """A partition's replay made no progress for ``messageTimeout``."""


class RowError(SulisError, ValueError):
    """A row cannot be read or written as the options say (a null channel or stream id in the sink, a
    message shorter than ``valueSchema`` with mode FAILFAST); the message names the row."""


class SinkError(SulisError, RuntimeError):
    """The sink cannot publish a task's rows exactly once (its rows differ from what an earlier attempt
    published, the journal is damaged, a publication failed); it publishes nothing it cannot prove."""


class SinkTimeoutError(SinkError, TimeoutError):
    """The sink waited ``messageTimeout`` (or the journal's longer wait) for a stream to take its rows,
    for the archive to record them, or for another attempt of the task to finish."""
