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
nanoseconds since the Unix epoch, read as Spark's microsecond timestamps). A payload whose length
is not the layout's size fails the query naming the recording and the position.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa

from .options import OptionError

__all__ = ["ValueLayout", "parse_value_schema"]

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

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ValueLayout:
    """A parsed ``valueSchema``: picklable (it keeps only the field list) and cheap to rebuild."""

    def __init__(self, fields: tuple[tuple[str, str], ...]) -> None:
        self.fields = fields
        self.dtype = np.dtype({"names": [n for n, _ in fields], "formats": [_TYPES[t][1] for _, t in fields]})
        self.size = self.dtype.itemsize

    def __reduce__(self):
        return ValueLayout, (self.fields,)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ValueLayout) and other.fields == self.fields

    def __hash__(self) -> int:
        return hash(self.fields)

    def ddl(self) -> str:
        return ", ".join(f"{n} {_TYPES[t][0]}" for n, t in self.fields)

    def arrow_fields(self) -> list[pa.Field]:
        return [pa.field(n, _TYPES[t][2]) for n, t in self.fields]

    def decode(self, values: pa.Array, positions: np.ndarray, recording_id: int) -> list[pa.Array]:
        """The field columns of ``values`` (a binary array, possibly a slice)."""
        n = len(values)
        _, offsets_buf, data_buf = values.buffers()
        offsets = np.frombuffer(offsets_buf, np.int32)[values.offset: values.offset + n + 1]
        lengths = np.diff(offsets)
        bad = np.flatnonzero(lengths != self.size)
        if len(bad):
            i = int(bad[0])
            raise ValueError(f"valueSchema: recording {recording_id}, message ending at position {int(positions[i])} "
                             f"is {int(lengths[i])} bytes, the layout ({self.ddl()}) takes {self.size}")
        base = int(offsets[0]) if n else 0
        records = np.frombuffer(data_buf, self.dtype, count=n, offset=base) if n else np.empty(0, self.dtype)
        columns = []
        for name, t in self.fields:
            column = np.ascontiguousarray(records[name])
            if t == "timestamp":
                columns.append(pa.array(column // 1000, pa.timestamp("us", tz="UTC")))
            elif t == "boolean":
                columns.append(pa.array(column != 0))
            else:
                columns.append(pa.array(column))
        return columns


def parse_value_schema(text: str) -> ValueLayout:
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
        if name in {n for n, _ in fields} or name in ("recording_id", "stream_id", "session_id", "position",
                                                      "reserved_value"):
            raise OptionError(f"option valueSchema: column {name!r} is named twice")
        fields.append((name, t))
    return ValueLayout(tuple(fields))
