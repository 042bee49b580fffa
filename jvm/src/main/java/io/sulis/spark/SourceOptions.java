package io.sulis.spark;

import java.io.Serializable;
import java.util.Map;
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
    /** The rows' schema as Spark DDL, the Rust core's (the Python source's). */
    final String ddl;

    SourceOptions(CaseInsensitiveStringMap options) {
        String[][] pairs = arrays(options);
        keys = pairs[0];
        values = pairs[1];
        // Checked by the Rust core, as the Python source checks them.
        Native.load();
        ddl = Native.optionsSchema(keys, values);
    }

    /** The options as two parallel arrays, names and values, as the Rust core takes them. */
    static String[][] arrays(Map<String, String> options) {
        Map<String, String> given = options instanceof CaseInsensitiveStringMap
                ? ((CaseInsensitiveStringMap) options).asCaseSensitiveMap()
                : options;
        String[] k = new String[given.size()];
        String[] v = new String[given.size()];
        int i = 0;
        for (Map.Entry<String, String> e : given.entrySet()) {
            k[i] = e.getKey();
            v[i] = e.getValue();
            i++;
        }
        return new String[][] {k, v};
    }

    /**
     * The rows: value (or valueSchema's fields), then the metadata (a cluster log's with clusterDir), then
     * timestamp with includeTimestamp.
     */
    StructType schema() {
        return StructType.fromDDL(ddl);
    }
}
