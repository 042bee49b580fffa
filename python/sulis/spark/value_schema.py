"""``valueSchema``: fixed-layout little-endian payloads decoded into typed columns, no loop per row.

Many market-data and telemetry feeds send packed structs. With
``.option("valueSchema", "instrument int, price double, qty int, event_time timestamp")`` the
``value`` column is replaced by one column per field, decoded from the payload bytes by a numpy
structured dtype view over the Arrow data buffer (fields back to back, no padding)::

    offset 0        4                12       16                  24
           +--------+----------------+--------+-------------------+
           | int32  | float64        | int32  | int64 (ns, UTC)   |
           +--------+----------------+--------+-------------------+
             instrument price          qty      event_time

Types: ``byte``/``tinyint`` (1), ``short``/``smallint`` (2), ``int``/``integer`` (4),
``long``/``bigint`` (8), ``float`` (4), ``double`` (8), ``boolean`` (1), ``timestamp`` (8:
nanoseconds since the Unix epoch, read as Spark's microsecond timestamps).

A payload whose length is not the layout's size is malformed; ``mode`` says what happens, with
the names and meanings of Spark's JSON and CSV readers:

* ``FAILFAST`` (the default): the query fails naming the recording and the message's position.
* ``PERMISSIVE``: the row's fields are null and its raw bytes go to an extra binary column,
  ``columnNameOfCorruptRecord`` (``_corrupt``), which is null on well-formed rows.
* ``DROPMALFORMED``: the row is left out.

Malformed rows are found by comparing the Arrow offsets' differences with the size; when there
are some, the well-formed payloads are gathered with one fancy-indexing copy: still no loop per row.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .errors import OptionError, RowError

__all__ = ["ValueLayout", "parse_value_schema", "MODES"]

#: ``mode``: what a malformed payload does (Spark's names).
MODES = ("FAILFAST", "PERMISSIVE", "DROPMALFORMED")

# Spark DDL name, numpy format, Arrow type of the column
_TYPES: dict[str, tuple[str, str, pa.DataType]] = {
    "byte": ("tinyint", "<i1", pa.int8()),
    "tinyint": ("tinyint", "<i1", pa.int8()),
    "short": ("smallint", "<i2", pa.int16()),
    "smallint": ("smallint", "<i2", pa.int16()),
    "int": ("int", "<i4", pa.int32()),
    "integer": ("int", "<i4", pa.int32()),
    "long": ("bigint", "<i8", pa.int64()),
    "bigint": ("bigint", "<i8", pa.int64()),
    "float": ("float", "<f4", pa.float32()),
    "double": ("double", "<f8", pa.float64()),
    "boolean": ("boolean", "<u1", pa.bool_()),
    "timestamp": ("timestamp", "<i8", pa.timestamp("us", tz="UTC")),
}

#: The metadata columns that follow the value's.
_META = ("recording_id", "stream_id", "session_id", "position", "reserved_value")

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ValueLayout:
    """A parsed ``valueSchema`` with its ``mode``: picklable (it keeps only the field list, the mode
    and the corrupt-record column's name) and cheap to rebuild."""

    def __init__(self, fields: tuple[tuple[str, str], ...], mode: str = "FAILFAST",
                 corrupt_column: str = "_corrupt") -> None:
        self.fields = fields
        self.mode = mode
        self.corrupt_column = corrupt_column
        self.dtype = np.dtype({"names": [n for n, _ in fields], "formats": [_TYPES[t][1] for _, t in fields]})
        self.size = self.dtype.itemsize

    def __reduce__(self):
        return ValueLayout, (self.fields, self.mode, self.corrupt_column)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ValueLayout) and (other.fields, other.mode, other.corrupt_column) == (
            self.fields, self.mode, self.corrupt_column)

    def __hash__(self) -> int:
        return hash((self.fields, self.mode, self.corrupt_column))

    @property
    def permissive(self) -> bool:
        return self.mode == "PERMISSIVE"

    def ddl(self) -> str:
        text = ", ".join(f"{n} {_TYPES[t][0]}" for n, t in self.fields)
        return f"{text}, {self.corrupt_column} binary" if self.permissive else text

    def arrow_fields(self) -> list[pa.Field]:
        fields = [pa.field(n, _TYPES[t][2]) for n, t in self.fields]
        return [*fields, pa.field(self.corrupt_column, pa.binary())] if self.permissive else fields

    def malformed(self, values: pa.Array) -> np.ndarray:
        """Indices of the payloads of ``values`` whose length is not the layout's size."""
        _, offsets = self._offsets(values)
        return np.flatnonzero(np.diff(offsets) != self.size)

    @staticmethod
    def _offsets(values: pa.Array) -> tuple[pa.Buffer, np.ndarray]:
        _, offsets_buf, data_buf = values.buffers()
        n = len(values)
        return data_buf, np.frombuffer(offsets_buf, np.int32)[values.offset: values.offset + n + 1]

    def decode(self, values: pa.Array, positions: np.ndarray, recording_id: int,
               bad: np.ndarray | None = None) -> list[pa.Array]:
        """The field columns of ``values`` (a binary array, possibly a slice), and in PERMISSIVE mode
        the corrupt-record column. ``bad``: the malformed rows, if already known. Raises naming the
        recording and position of the first malformed payload in FAILFAST mode; DROPMALFORMED rows
        must have been taken out before (``replay._Rows`` does)."""
        n = len(values)
        data_buf, offsets = self._offsets(values)
        if bad is None:
            bad = np.flatnonzero(np.diff(offsets) != self.size)
        if len(bad) and self.mode != "PERMISSIVE":
            i = int(bad[0])
            raise RowError(f"valueSchema: recording {recording_id}, message ending at position {int(positions[i])} "
                             f"is {int(offsets[i + 1] - offsets[i])} bytes, the layout ({self.ddl()}) takes "
                             f"{self.size} (mode FAILFAST; PERMISSIVE or DROPMALFORMED keep the query going)")
        if not len(bad):
            base = int(offsets[0]) if n else 0
            records = np.frombuffer(data_buf, self.dtype, count=n, offset=base) if n else np.empty(0, self.dtype)
            mask = None
        else:
            # Gather the well-formed payloads into a contiguous block: one (rows x size) index array.
            good = np.ones(n, bool)
            good[bad] = False
            starts = offsets[:-1][good].astype(np.int64)
            data = np.frombuffer(data_buf, np.uint8)
            records = np.zeros(n, self.dtype)
            gathered = data[starts[:, None] + np.arange(self.size)]
            records[good] = np.ascontiguousarray(gathered).view(self.dtype).reshape(-1)
            mask = ~good
        columns = []
        for name, t in self.fields:
            column = np.ascontiguousarray(records[name])
            if t == "timestamp":
                columns.append(pa.array(column // 1000, pa.timestamp("us", tz="UTC"), mask=mask))
            elif t == "boolean":
                columns.append(pa.array(column != 0, mask=mask))
            else:
                columns.append(pa.array(column, mask=mask))
        if self.permissive:
            corrupt = np.zeros(n, bool) if mask is None else mask
            columns.append(pc.if_else(pa.array(corrupt), values, pa.scalar(None, pa.binary())))
        return columns


def parse_value_schema(text: str, mode: str = "FAILFAST", corrupt_column: str = "_corrupt") -> ValueLayout:
    """``"name type, name type, ..."`` (types as in the module doc); ``OptionError`` naming the option."""
    fields: list[tuple[str, str]] = []
    for part in text.split(","):
        words = part.split()
        if len(words) != 2:
            raise OptionError(f"option valueSchema: {part.strip()!r} is not 'name type' (e.g. 'price double')")
        name, t = words[0], words[1].lower()
        if not _NAME.match(name):
            raise OptionError(f"option valueSchema: {name!r} is not a column name")
        if t not in _TYPES:
            raise OptionError(f"option valueSchema: type {words[1]!r} of {name!r} is not one of "
                              f"{', '.join(sorted(_TYPES))}")
        if name in {n for n, _ in fields} or name in _META:
            raise OptionError(f"option valueSchema: column {name!r} is named twice")
        fields.append((name, t))
    mode = mode.strip().upper()
    if mode not in MODES:
        raise OptionError(f"option mode: {mode!r} is not one of {', '.join(MODES)}")
    if mode == "PERMISSIVE":
        if not _NAME.match(corrupt_column):
            raise OptionError(f"option columnNameOfCorruptRecord: {corrupt_column!r} is not a column name")
        if corrupt_column in {n for n, _ in fields} or corrupt_column in _META:
            raise OptionError(f"option columnNameOfCorruptRecord: column {corrupt_column!r} is named twice")
    return ValueLayout(tuple(fields), mode, corrupt_column)
