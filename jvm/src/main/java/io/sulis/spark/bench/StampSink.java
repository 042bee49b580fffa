package io.sulis.spark.bench;

import java.io.DataOutputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.Serializable;
import java.io.BufferedOutputStream;
import java.io.File;
import java.time.Instant;
import java.util.EnumSet;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.catalog.CatalogV2Util;
import org.apache.spark.sql.connector.catalog.Column;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.connector.write.streaming.StreamingDataWriterFactory;
import org.apache.spark.sql.connector.write.streaming.StreamingWrite;
import org.apache.spark.sql.internal.connector.SupportsStreamingUpdateAsAppend;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * bench/spark_latency.py's sink: where a query's output is seen, in the JVM. Each row's first column is a
 * value whose first 8 bytes are the epoch-ns stamp taken when it was published; {@code write} takes the
 * clock again as the row arrives (in real-time mode, as it is read) and keeps now - stamp for the rows
 * stamped at or after {@code measureFrom}; each task writes its latencies (little-endian longs) to a file
 * of its own under {@code path} when it commits, aborts or closes. Used by class name; not a product sink.
 */
public final class StampSink implements TableProvider {
    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        return new StructType();
    }

    @Override
    public boolean supportsExternalMetadata() {
        return true;
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new StampTable(schema);
    }

    static final class StampTable implements SupportsWrite {
        private final StructType schema;

        StampTable(StructType schema) {
            this.schema = schema;
        }

        @Override
        public String name() {
            return "stamp-sink";
        }

        /** The columns of the schema, as Spark's own default makes them (Table.schema() is deprecated). */
        @Override
        public Column[] columns() {
            return CatalogV2Util.structTypeToV2Columns(schema, true);
        }

        @Override
        public Set<TableCapability> capabilities() {
            return EnumSet.of(TableCapability.STREAMING_WRITE);
        }

        @Override
        public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
            String path = info.options().get("path");
            long from = Long.parseLong(info.options().getOrDefault("measureFrom", "0"));
            return new Builder() {
                @Override
                public Write build() {
                    return new Write() {
                        @Override
                        public StreamingWrite toStreaming() {
                            return new Streaming(path, from);
                        }
                    };
                }
            };
        }
    }

    /** Update mode (real-time mode asks it) is append here: every row is a new latency. */
    interface Builder extends WriteBuilder, SupportsStreamingUpdateAsAppend {}

    static final class Streaming implements StreamingWrite {
        private final String path;
        private final long from;

        Streaming(String path, long from) {
            this.path = path;
            this.from = from;
        }

        @Override
        public StreamingDataWriterFactory createStreamingWriterFactory(PhysicalWriteInfo info) {
            return new Factory(path, from);
        }

        @Override
        public boolean useCommitCoordinator() {
            return false;
        }

        @Override
        public void commit(long epochId, WriterCommitMessage[] messages) {}

        @Override
        public void abort(long epochId, WriterCommitMessage[] messages) {}
    }

    static final class Factory implements StreamingDataWriterFactory, Serializable {
        private static final long serialVersionUID = 1L;
        private final String path;
        private final long from;

        Factory(String path, long from) {
            this.path = path;
            this.from = from;
        }

        @Override
        public DataWriter<InternalRow> createWriter(int partitionId, long taskId, long epochId) {
            return new Writer(path, from);
        }
    }

    static final class Committed implements WriterCommitMessage {
        private static final long serialVersionUID = 1L;
    }

    static final class Writer implements DataWriter<InternalRow> {
        private final String path;
        private final long from;
        private long[] latencies = new long[1 << 16];
        private int n;

        Writer(String path, long from) {
            this.path = path;
            this.from = from;
        }

        @Override
        public void write(InternalRow row) {
            Instant now = Instant.now();
            long nowNs = now.getEpochSecond() * 1_000_000_000L + now.getNano();
            byte[] v = row.getBinary(0);
            long stamp = 0;
            for (int i = 7; i >= 0; i--) {
                stamp = (stamp << 8) | (v[i] & 0xFF);
            }
            if (stamp < from) {
                return;
            }
            if (n == latencies.length) {
                latencies = java.util.Arrays.copyOf(latencies, n * 2);
            }
            latencies[n++] = nowNs - stamp;
        }

        private void flush() throws IOException {
            File out = new File(path, UUID.randomUUID().toString());
            try (DataOutputStream s = new DataOutputStream(new BufferedOutputStream(new FileOutputStream(out)))) {
                for (int i = 0; i < n; i++) {
                    s.writeLong(Long.reverseBytes(latencies[i]));
                }
            }
            n = 0;
        }

        @Override
        public WriterCommitMessage commit() throws IOException {
            flush();
            return new Committed();
        }

        /** A query stopped mid-batch (a real-time batch longer than the run) aborts: its latencies still count. */
        @Override
        public void abort() throws IOException {
            flush();
        }

        /** A task stopped with its batch (real-time mode) may end with neither: what it saw still counts. */
        @Override
        public void close() throws IOException {
            if (n > 0) {
                flush();
            }
        }
    }
}
