package io.sulis.spark;

import java.io.Serializable;
import java.util.Map;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The options of a read as Spark passed them, checked by the Rust core when made (with the messages the
 * Python source gives), and the rows' schema. Travels to the executors inside the reader factory.
 */
final class SourceOptions implements Serializable {
    private static final long serialVersionUID = 1L;

    final String[] keys;
    final String[] values;
    final boolean timestamp;

    SourceOptions(CaseInsensitiveStringMap options) {
        Map<String, String> given = options.asCaseSensitiveMap();
        keys = new String[given.size()];
        values = new String[given.size()];
        int i = 0;
        for (Map.Entry<String, String> e : given.entrySet()) {
            keys[i] = e.getKey();
            values[i] = e.getValue();
            i++;
        }
        // Checked by the Rust core, as the Python source checks them.
        Native.load();
        timestamp = Native.optionsIncludeTimestamp(keys, values);
    }

    /** The rows: value, then the metadata, then timestamp with includeTimestamp (the Python source's). */
    StructType schema() {
        StructType s = new StructType()
                .add("value", DataTypes.BinaryType)
                .add("recording_id", DataTypes.LongType)
                .add("stream_id", DataTypes.IntegerType)
                .add("session_id", DataTypes.IntegerType)
                .add("position", DataTypes.LongType)
                .add("reserved_value", DataTypes.LongType);
        return timestamp ? s.add("timestamp", DataTypes.TimestampType) : s;
    }
}
