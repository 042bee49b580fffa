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
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A write of the JVM sink, batch or streaming (micro-batches or real-time mode). Every task publishes its
 * rows as they come. A streaming write is exactly once unless exactlyOnce=false: the sink's journal
 * ({@code sulis_spark::sink_journal}) makes a task Spark runs again skip, checked, what an earlier attempt
 * published; a batch write is at least once (a task has no batch id to know its earlier attempts by). Nothing
 * is coordinated at commit. The options and the data frame's columns are checked here, on the Spark driver,
 * before any task runs. Update mode (real-time mode's) appends each updated row, as Kafka's sink does.
 */
final class SulisWrite implements WriteBuilder, SupportsStreamingUpdateAsAppend, Write, BatchWrite, StreamingWrite {
    private static final Logger LOG = LoggerFactory.getLogger("sulis.spark");

    private final LogicalWriteInfo info;
    private final SulisWriterFactory factory;

    SulisWrite(LogicalWriteInfo info) {
        this.info = info;
        factory = new SulisWriterFactory(info.options(), info.schema(), false);
        Native.load();
        Native.sinkClose(factory.check());
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
    public DataWriterFactory createBatchWriterFactory(PhysicalWriteInfo physical) {
        return factory;
    }

    @Override
    public StreamingDataWriterFactory createStreamingWriterFactory(PhysicalWriteInfo physical) {
        Native.sinkRecordJournal(factory.keys, factory.values);
        return new SulisWriterFactory(info.options(), info.schema(), true);
    }

    /** Nothing to coordinate: a task's rows are out as it writes them (and its journal says which). */
    @Override
    public boolean useCommitCoordinator() {
        return false;
    }

    @Override
    public void commit(WriterCommitMessage[] messages) {}

    @Override
    public void abort(WriterCommitMessage[] messages) {}

    @Override
    public void commit(long epochId, WriterCommitMessage[] messages) {
        long skipped = 0;
        for (WriterCommitMessage m : messages) {
            if (m instanceof SulisDataWriter.Published) {
                skipped += ((SulisDataWriter.Published) m).skipped;
            }
        }
        if (skipped > 0) {
            LOG.warn("sulis sink: batch {} re-run: {} rows were already published and were not published again",
                    epochId, skipped);
        }
    }

    @Override
    public void abort(long epochId, WriterCommitMessage[] messages) {}
}
