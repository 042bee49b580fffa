package io.sulis.spark;

import java.io.Serializable;
import org.apache.spark.TaskContext;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.streaming.StreamingDataWriterFactory;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** The sink's options, where its columns are and whether it streams, sent to the executors; makes each task's writer. */
final class SulisWriterFactory implements DataWriterFactory, StreamingDataWriterFactory, Serializable {
    private static final long serialVersionUID = 1L;

    final String[] keys;
    final String[] values;
    final String[] names;
    final String[] types;
    /** Column ordinals, -1 where there is none; whether value is a string; stream_id's type. */
    final int value;
    final boolean valueIsString;
    final int channel;
    final int streamId;
    final String streamType;
    final int timestamp;
    /** A streaming write: exactly once where exactlyOnce is set (the task names its query and batch). */
    final boolean streaming;

    SulisWriterFactory(CaseInsensitiveStringMap options, StructType schema, boolean streaming) {
        this.streaming = streaming;
        String[][] pairs = SourceOptions.arrays(options);
        keys = pairs[0];
        values = pairs[1];
        StructField[] fields = schema.fields();
        names = new String[fields.length];
        types = new String[fields.length];
        for (int i = 0; i < fields.length; i++) {
            names[i] = fields[i].name();
            types[i] = fields[i].dataType().simpleString();
        }
        value = ordinal(schema, "value");
        valueIsString = value >= 0 && "string".equals(types[value]);
        channel = ordinal(schema, "channel");
        streamId = ordinal(schema, "stream_id");
        streamType = streamId >= 0 ? types[streamId] : "";
        int t = ordinal(schema, "timestamp");
        timestamp = t >= 0 && types[t].startsWith("timestamp") ? t : -1;
    }

    private static int ordinal(StructType schema, String name) {
        for (int i = 0; i < schema.fields().length; i++) {
            if (schema.fields()[i].name().equals(name)) {
                return i;
            }
        }
        return -1;
    }

    /** A native writer for no task: the options and columns checked. */
    long check() {
        return Native.sinkOpen(keys, values, names, types, null, 0, 0, 0);
    }

    /** A native writer for partition {@code partition} of the running task. */
    long open(int partition) {
        TaskContext task = TaskContext.get();
        if (!streaming) {
            return Native.sinkOpen(keys, values, names, types, null, 0, partition, 0);
        }
        // No query or batch id in a streaming task: exactly once fails saying so (at least once goes on).
        String query = task == null ? null : task.getLocalProperty("sql.streaming.queryId");
        String batch = task == null ? null : task.getLocalProperty("streaming.sql.batchId");
        boolean known = query != null && batch != null;
        return Native.sinkOpen(keys, values, names, types, known ? query : "", known ? Long.parseLong(batch) : 0,
                partition, task == null ? 0 : task.taskAttemptId());
    }

    @Override
    public DataWriter<InternalRow> createWriter(int partitionId, long taskId) {
        Native.load();
        return new SulisDataWriter(this, partitionId);
    }

    @Override
    public DataWriter<InternalRow> createWriter(int partitionId, long taskId, long epochId) {
        return createWriter(partitionId, taskId);
    }
}
