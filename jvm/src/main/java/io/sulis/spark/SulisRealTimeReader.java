package io.sulis.spark;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import org.apache.spark.sql.catalyst.InternalRow;
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
    private final RowDecoder rows;
    private ByteBuffer buffer = ByteBuffer.allocateDirect(1 << 20).order(ByteOrder.LITTLE_ENDIAN);
    private int left;
    private InternalRow row;

    SulisRealTimeReader(SourceOptions options, SulisLivePartition p) {
        Native.load();
        handle = Native.liveOpen(options.keys, options.values, p.part);
        recordingId = p.part[0];
        rows = new RowDecoder(p.part[0], (int) p.part[1], options.timestamp, p.part[7]);
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
        row = rows.next(buffer);
        left--;
    }

    @Override
    public InternalRow get() {
        return row;
    }

    @Override
    public PartitionOffset getOffset() {
        return new SulisPartitionOffset(recordingId, rows.position);
    }

    @Override
    public void close() {
        Native.readerClose(handle);
    }
}
