package io.sulis.spark;

import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.types.StructType;

/** A read of the selected recordings: a batch, or a stream of micro-batches. */
final class SulisScan implements ScanBuilder, Scan {
    private final SourceOptions options;
    private SulisBatch batch;

    SulisScan(SourceOptions options) {
        this.options = options;
    }

    @Override
    public Scan build() {
        return this;
    }

    @Override
    public StructType readSchema() {
        return options.schema();
    }

    @Override
    public String description() {
        return "sulis";
    }

    @Override
    public Batch toBatch() {
        // Spark asks each copy of its scan node: one batch (and one plan) for the scan.
        if (batch == null) {
            batch = new SulisBatch(options);
        }
        return batch;
    }

    @Override
    public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
        return new SulisMicroBatchStream(options);
    }
}
