package io.sulis.spark;

import org.apache.spark.TaskContext;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.streaming.PartitionOffset;
import org.apache.spark.sql.connector.read.streaming.SupportsRealTimeRead;

/**
 * Real-time mode: a recording's rows as they are recorded (a replay that follows the recording, never past
 * what the archive recorded), each handed to Spark as it comes; the offset is the position after the last
 * row handed over, so a batch that ends with messages read but not handed over reads them again.
 */
final class SulisRealTimeReader implements SupportsRealTimeRead<InternalRow> {
    /** The longest native wait between looks at whether the task was killed. */
    private static final long WAIT_SLICE_MS = 100;

    private final long handle;
    private final long recordingId;
    private final UnsafeRows rows;
    private InternalRow row;

    SulisRealTimeReader(SourceOptions options, SulisLivePartition p) {
        Native.load();
        handle = Native.liveOpen(options.keys, options.values, p.part);
        recordingId = p.part[0];
        rows = new UnsafeRows(options.schema().size(), p.part[7]);
    }

    @Override
    public RecordStatus nextWithTimeout(Long startTimeMs, Long timeoutMs) {
        long deadline = System.currentTimeMillis() + Math.max(0, timeoutMs);
        TaskContext task = TaskContext.get();
        while (rows.isEmpty()) {
            long wait = deadline - System.currentTimeMillis();
            if (wait < 0) {
                return RecordStatus.newStatusWithoutArrivalTime(false);
            }
            // A stopped query kills its tasks: looked at every WAIT_SLICE_MS, not only at the batch's end (a
            // real-time batch may be minutes long, and a native wait does not see Java's interrupt).
            if (task != null) {
                task.killTaskIfInterrupted();
            }
            // Nothing within the wait: the loop ends at the deadline.
            rows.filled(Native.liveRows(handle, rows.buffer(), Math.min(wait, WAIT_SLICE_MS)));
        }
        row = rows.next();
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
