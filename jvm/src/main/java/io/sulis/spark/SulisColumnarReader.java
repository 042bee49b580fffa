package io.sulis.spark;

import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * A planned range's rows as columnar batches: the Rust reader (segment files or a replay, as readMode says)
 * writes each batch as Arrow buffers and the columns are read where they are. Spark turns them into rows
 * in its generated code, so a row is not handed through an iterator and copied by a projection besides.
 */
final class SulisColumnarReader implements PartitionReader<ColumnarBatch> {
    /** Rows a batch holds at most: Spark's own columnar batch size. */
    static final int BATCH_ROWS = 4096;

    private final long handle;
    private final SulisColumnVector[] vectors;
    private final long[] meta;
    private final ColumnarBatch batch;
    private boolean done;

    SulisColumnarReader(SourceOptions options, SulisInputPartition p) {
        Native.load();
        handle = Native.readerOpen(options.keys, options.values, p.range, p.archiveId);
        SulisMicroBatchStream.log(Native.readerDrainLog(handle));
        StructType schema = options.schema();
        StructField[] fields = schema.fields();
        vectors = new SulisColumnVector[fields.length];
        for (int i = 0; i < fields.length; i++) {
            vectors[i] = new SulisColumnVector(fields[i].dataType());
        }
        meta = new long[4 * fields.length];
        batch = new ColumnarBatch((ColumnVector[]) vectors);
    }

    @Override
    public boolean next() {
        if (done) {
            return false;
        }
        int n;
        do {
            // 0: nothing yet (a planned range's reader waits for its messages itself; asked again regardless).
            n = Native.readerColumns(handle, meta, BATCH_ROWS);
        } while (n == 0);
        if (n < 0) {
            done = true;
            return false;
        }
        for (int i = 0; i < vectors.length; i++) {
            vectors[i].pointTo(meta, 4 * i);
        }
        batch.setNumRows(n);
        return true;
    }

    @Override
    public ColumnarBatch get() {
        return batch;
    }

    @Override
    public void close() {
        Native.readerClose(handle);
    }
}
