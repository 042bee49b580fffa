package io.sulis.spark;

import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.connector.write.streaming.StreamingDataWriterFactory;
import org.apache.spark.sql.connector.write.streaming.StreamingWrite;
import org.apache.spark.sql.internal.connector.SupportsStreamingUpdateAsAppend;

/**
 * A write of the JVM sink, batch or streaming (micro-batches or real-time mode): every task publishes its
 * rows as they come, so at least once; there is nothing to commit. The options and the data frame's columns
 * are checked here, on the Spark driver, before any task runs (exactlyOnce=true is refused). Update mode
 * (real-time mode's) appends each updated row, as Kafka's sink does.
 */
final class SulisWrite implements WriteBuilder, SupportsStreamingUpdateAsAppend, Write, BatchWrite, StreamingWrite {
    private final SulisWriterFactory factory;

    SulisWrite(LogicalWriteInfo info) {
        factory = new SulisWriterFactory(info.options(), info.schema());
        Native.load();
        Native.sinkClose(factory.open());
    }

    @Override
    public Write build() {
        return this;
    }

    @Override
    public BatchWrite toBatch() {
        return this;
    }

    @Override
    public StreamingWrite toStreaming() {
        return this;
    }

    @Override
    public DataWriterFactory createBatchWriterFactory(PhysicalWriteInfo info) {
        return factory;
    }

    @Override
    public StreamingDataWriterFactory createStreamingWriterFactory(PhysicalWriteInfo info) {
        return factory;
    }

    /** Nothing to coordinate: a task's rows are out as it writes them. */
    @Override
    public boolean useCommitCoordinator() {
        return false;
    }

    @Override
    public void commit(WriterCommitMessage[] messages) {}

    @Override
    public void abort(WriterCommitMessage[] messages) {}

    @Override
    public void commit(long epochId, WriterCommitMessage[] messages) {}

    @Override
    public void abort(long epochId, WriterCommitMessage[] messages) {}
}
