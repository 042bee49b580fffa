package io.sulis.spark;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.read.streaming.PartitionOffset;
import org.apache.spark.sql.connector.read.streaming.SupportsRealTimeRead;

/**
 * Real-time mode: a recording's rows as they are recorded (a replay that follows the recording, never past
 * what the archive recorded), each handed to Spark as it comes; the offset is the position after the last
 * row handed over, so a batch that ends with messages read but not handed over reads them again.
 */
final class SulisRealTimeReader implements SupportsRealTimeRead<InternalRow> {
    private final long handle;
    private final long recordingId;
    private final int streamId;
    private final boolean timestamp;
    private ByteBuffer buffer = ByteBuffer.allocateDirect(1 << 20).order(ByteOrder.LITTLE_ENDIAN);
    private int left;
    private InternalRow row;
    private long position;

    SulisRealTimeReader(SourceOptions options, SulisLivePartition p) {
        Native.load();
        handle = Native.liveOpen(options.keys, options.values, p.part);
        recordingId = p.part[0];
        streamId = (int) p.part[1];
        position = p.part[7];
        timestamp = options.timestamp;
    }

    @Override
    public RecordStatus nextWithTimeout(Long startTimeMs, Long timeoutMs) {
        long deadline = System.currentTimeMillis() + Math.max(0, timeoutMs);
        while (left == 0) {
            long wait = deadline - System.currentTimeMillis();
            if (wait < 0) {
                return RecordStatus.newStatusWithoutArrivalTime(false);
            }
            int n = Native.liveRows(handle, buffer, wait);
            if (n < -1) {
                buffer = ByteBuffer.allocateDirect(Math.max(-n, buffer.capacity() * 2)).order(ByteOrder.LITTLE_ENDIAN);
                continue;
            }
            if (n <= 0) {
                continue; // nothing within the wait: the loop ends at the deadline
            }
            buffer.clear();
            left = n;
        }
        decode();
        return RecordStatus.newStatusWithoutArrivalTime(true);
    }

    // Real-time mode asks nextWithTimeout; next() waits until a row comes.
    @Override
    public boolean next() {
        while (!nextWithTimeout(System.currentTimeMillis(), 1000L).hasRecord()) {
            // keep waiting: the task is cancelled at the batch's end
        }
        return true;
    }

    private void decode() {
        long at = buffer.getLong();
        long reserved = buffer.getLong();
        int session = buffer.getInt();
        byte[] value = new byte[buffer.getInt()];
        buffer.get(value);
        left--;
        Object[] fields = timestamp ? new Object[7] : new Object[6];
        fields[0] = value;
        fields[1] = recordingId;
        fields[2] = streamId;
        fields[3] = session;
        fields[4] = at;
        fields[5] = reserved;
        if (timestamp) {
            fields[6] = reserved > 0 ? reserved / 1000 : null;
        }
        row = new GenericInternalRow(fields);
        position = at;
    }

    @Override
    public InternalRow get() {
        return row;
    }

    @Override
    public PartitionOffset getOffset() {
        return new SulisPartitionOffset(recordingId, position);
    }

    @Override
    public void close() {
        Native.readerClose(handle);
    }
}
