package io.sulis.spark;

import java.util.Collections;
import java.util.Iterator;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/** Readers of planned ranges, on the executors. */
final class SulisReaderFactory implements PartitionReaderFactory {
    private static final long serialVersionUID = 1L;

    private final SourceOptions options;

    SulisReaderFactory(SourceOptions options) {
        this.options = options;
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
        if (partition instanceof SulisLivePartition) {
            return new SulisRealTimeReader(options, (SulisLivePartition) partition);
        }
        // Spark reads planned ranges in columnar batches (supportColumnarReads); rows of them, should it ask.
        SulisColumnarReader batches = new SulisColumnarReader(options, (SulisInputPartition) partition);
        return new PartitionReader<InternalRow>() {
            private Iterator<InternalRow> rows = Collections.emptyIterator();

            @Override
            public boolean next() {
                while (!rows.hasNext()) {
                    if (!batches.next()) {
                        return false;
                    }
                    rows = batches.get().rowIterator();
                }
                return true;
            }

            @Override
            public InternalRow get() {
                return rows.next();
            }

            @Override
            public void close() {
                batches.close();
            }
        };
    }

    /** A planned range is read in columnar batches; real-time mode's followed recordings row by row. */
    @Override
    public boolean supportColumnarReads(InputPartition partition) {
        return partition instanceof SulisInputPartition;
    }

    @Override
    public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
        return new SulisColumnarReader(options, (SulisInputPartition) partition);
    }
}
