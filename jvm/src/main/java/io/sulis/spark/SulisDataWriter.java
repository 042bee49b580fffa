package io.sulis.spark;

import java.util.HashMap;
import java.util.Map;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One task's rows, each offered as it comes (the Rust core waits out back pressure, and fails naming the
 * stream after the message timeout); exactly once in a streaming write's tasks (the Rust core skips, checked,
 * what an earlier attempt of the task published), else at least once.
 */
final class SulisDataWriter implements DataWriter<InternalRow> {
    /** What a task published. */
    static final class Published implements WriterCommitMessage {
        private static final long serialVersionUID = 1L;
        final int partition;
        final long rows;
        final long skipped;

        Published(int partition, long rows, long skipped) {
            this.partition = partition;
            this.rows = rows;
            this.skipped = skipped;
        }
    }

    private static final byte[] EMPTY = new byte[0];
    private static final Logger LOG = LoggerFactory.getLogger("sulis.spark");

    private final SulisWriterFactory f;
    private final int partition;
    private final long handle;
    private final Map<String, Integer> targets = new HashMap<>();
    private int fixed = -1;
    private long rows;

    SulisDataWriter(SulisWriterFactory factory, int partition) {
        this.f = factory;
        this.partition = partition;
        this.handle = factory.open(partition);
        log();
    }

    private void log() {
        String[] notes = Native.sinkNotes(handle);
        for (String note : notes == null ? new String[0] : notes) {
            LOG.warn("{}", note);
        }
    }

    private int target(InternalRow row) {
        if (fixed >= 0) {
            return fixed;
        }
        String channel = f.channel >= 0 && !row.isNullAt(f.channel) ? row.getUTF8String(f.channel).toString() : null;
        boolean streamNull = f.streamId < 0 || row.isNullAt(f.streamId);
        long stream = streamNull ? 0 : streamOf(row);
        if (f.channel < 0 && f.streamId < 0) {
            // Both by option: one target for every row.
            fixed = Native.sinkTarget(handle, rows, null, 0, true);
            return fixed;
        }
        String key = channel + "\u0000" + (streamNull ? "null" : Long.toString(stream));
        Integer id = targets.get(key);
        if (id == null) {
            id = Native.sinkTarget(handle, rows, channel, stream, streamNull);
            targets.put(key, id);
        }
        return id;
    }

    private long streamOf(InternalRow row) {
        switch (f.streamType) {
            case "bigint":
                return row.getLong(f.streamId);
            case "smallint":
                return row.getShort(f.streamId);
            case "tinyint":
                return row.getByte(f.streamId);
            default:
                return row.getInt(f.streamId);
        }
    }

    @Override
    public void write(InternalRow row) {
        int id = target(row);
        // A null value is an empty message, as the Python sink publishes it.
        byte[] value = row.isNullAt(f.value) ? EMPTY
                : f.valueIsString ? row.getUTF8String(f.value).getBytes() : row.getBinary(f.value);
        long micros = 0;
        int time = 2;
        if (f.timestamp >= 0) {
            time = row.isNullAt(f.timestamp) ? 0 : 1;
            micros = time == 1 ? row.getLong(f.timestamp) : 0;
        }
        Native.sinkOffer(handle, rows, id, value, micros, time);
        rows++;
    }

    @Override
    public WriterCommitMessage commit() {
        long[] done = Native.sinkFinish(handle);
        log();
        return new Published(partition, done[0], done[1]);
    }

    @Override
    public void abort() {
        Native.sinkFail(handle, "the task failed after " + rows + " rows");
        log();
    }

    @Override
    public void close() {
        Native.sinkClose(handle);
    }
}
