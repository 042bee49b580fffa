package io.sulis.spark;

import java.nio.ByteBuffer;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;

/**
 * The records the Rust reader writes into a direct buffer (position, reserved value, session id, value
 * length, value; little-endian) as rows of the source's schema: value, recording_id, stream_id,
 * session_id, position, reserved_value, and timestamp with includeTimestamp.
 */
final class RowDecoder {
    private final long recordingId;
    private final int streamId;
    private final boolean timestamp;
    /** The position of the last row decoded. */
    long position;

    RowDecoder(long recordingId, int streamId, boolean timestamp, long position) {
        this.recordingId = recordingId;
        this.streamId = streamId;
        this.timestamp = timestamp;
        this.position = position;
    }

    InternalRow next(ByteBuffer buffer) {
        position = buffer.getLong();
        long reserved = buffer.getLong();
        int session = buffer.getInt();
        byte[] value = new byte[buffer.getInt()];
        buffer.get(value);
        Object[] fields = timestamp ? new Object[7] : new Object[6];
        fields[0] = value;
        fields[1] = recordingId;
        fields[2] = streamId;
        fields[3] = session;
        fields[4] = position;
        fields[5] = reserved;
        if (timestamp) {
            fields[6] = reserved > 0 ? reserved / 1000 : null; // epoch ns, the publisher's stamp, as micros
        }
        return new GenericInternalRow(fields);
    }
}
