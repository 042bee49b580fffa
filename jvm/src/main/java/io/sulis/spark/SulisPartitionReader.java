package io.sulis.spark;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.PartitionReader;

/**
 * A planned range's rows: the Rust reader (segment files or a replay, as readMode says) writes them, as
 * UnsafeRows, into a direct buffer.
 */
final class SulisPartitionReader implements PartitionReader<InternalRow> {
    private final long handle;
    private final UnsafeRows rows;
    private InternalRow row;
    private boolean done;

    SulisPartitionReader(SourceOptions options, SulisInputPartition p) {
        Native.load();
        handle = Native.readerOpen(options.keys, options.values, p.range, p.archiveId);
        SulisMicroBatchStream.log(Native.readerDrainLog(handle));
        rows = new UnsafeRows(options.schema().size(), p.range[3]);
    }

    @Override
    public boolean next() {
        while (rows.isEmpty()) {
            if (done) {
                return false;
            }
            int n = Native.readerRows(handle, rows.buffer());
            if (n == -1) {
                done = true;
                return false;
            }
            rows.filled(n);
        }
        row = rows.next();
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
