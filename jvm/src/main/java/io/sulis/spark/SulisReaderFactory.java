package io.sulis.spark;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;

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
        return new SulisPartitionReader(options, (SulisInputPartition) partition);
    }
}
