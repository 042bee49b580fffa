package io.sulis.spark;

import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;

/** {@code spark.read}: the selected recordings between startingPositions and endingPositions, once. */
final class SulisBatch implements Batch {
    private final SourceOptions options;
    private InputPartition[] planned;

    SulisBatch(SourceOptions options) {
        this.options = options;
    }

    @Override
    public InputPartition[] planInputPartitions() {
        // Planned once: Spark asks again as it plans (whether the scan is columnar, then for its tasks), and
        // a second plan would both cost a round of archive requests and could see more recorded.
        if (planned == null) {
            planned = plan();
        }
        return planned;
    }

    private InputPartition[] plan() {
        Native.load();
        long planner = Native.plannerOpen(options.keys, options.values, false);
        try {
            long archiveId = Native.plannerArchiveId(planner);
            try {
                return SulisInputPartition.of(Native.plannerBatchRanges(planner), archiveId);
            } finally {
                SulisMicroBatchStream.log(Native.plannerDrainLog(planner));
            }
        } finally {
            Native.plannerClose(planner);
        }
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
        return new SulisReaderFactory(options);
    }
}
