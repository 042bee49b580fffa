package io.sulis.spark;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.read.PartitionReader;

/**
 * A planned range's rows: the Rust reader (segment files or a replay, as readMode says) fills a direct
 * buffer with whole messages, which become rows here.
 */
final class SulisPartitionReader implements PartitionReader<InternalRow> {
    private final long handle;
    private final long recordingId;
    private final int streamId;
    private final boolean timestamp;
    private ByteBuffer buffer = ByteBuffer.allocateDirect(1 << 20).order(ByteOrder.LITTLE_ENDIAN);
    private int left;
    private InternalRow row;
    private boolean done;

    SulisPartitionReader(SourceOptions options, SulisInputPartition p) {
        Native.load();
        handle = Native.readerOpen(options.keys, options.values, p.range, p.archiveId);
        SulisMicroBatchStream.log(Native.readerDrainLog(handle));
        recordingId = p.range[0];
        streamId = (int) p.range[1];
        timestamp = options.timestamp;
    }

    @Override
    public boolean next() {
        while (left == 0) {
            if (done) {
                return false;
            }
            int n = Native.readerRows(handle, buffer);
            if (n == -1) {
                done = true;
                return false;
            }
            if (n < -1) {
                buffer = ByteBuffer.allocateDirect(Math.max(-n, buffer.capacity() * 2)).order(ByteOrder.LITTLE_ENDIAN);
                continue;
            }
            buffer.clear();
            left = n;
        }
        long position = buffer.getLong();
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
        fields[4] = position;
        fields[5] = reserved;
        if (timestamp) {
            fields[6] = reserved > 0 ? reserved / 1000 : null; // epoch ns, the publisher's stamp, as micros
        }
        row = new GenericInternalRow(fields);
        return true;
    }

    @Override
    public InternalRow get() {
        return row;
    }

    @Override
    public void close() {
        Native.readerClose(handle);
    }
}
