package io.sulis.spark;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.PartitionReader;

/**
 * A planned range's rows: the Rust reader (segment files or a replay, as readMode says) fills a direct
 * buffer with whole messages, which become rows here.
 */
final class SulisPartitionReader implements PartitionReader<InternalRow> {
    private final long handle;
    private final RowDecoder rows;
    private ByteBuffer buffer = ByteBuffer.allocateDirect(1 << 20).order(ByteOrder.LITTLE_ENDIAN);
    private int left;
    private InternalRow row;
    private boolean done;

    SulisPartitionReader(SourceOptions options, SulisInputPartition p) {
        Native.load();
        handle = Native.readerOpen(options.keys, options.values, p.range, p.archiveId);
        SulisMicroBatchStream.log(Native.readerDrainLog(handle));
        rows = new RowDecoder(p.range[0], (int) p.range[1], options.timestamp, p.range[3]);
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
        row = rows.next(buffer);
        left--;
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
