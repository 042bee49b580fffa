package io.sulis.spark;

import java.util.Map;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * {@code format("sulis")} in the JVM: a DataSource V2 over sulis archive recordings, the same options,
 * rows and offsets as the Python source (its rules are one implementation, in Rust), and an at-least-once
 * sink that publishes each row as it comes (so in real-time mode too). Spark makes one of
 * these for every format lookup, so nothing happens here until a query plans.
 */
public final class SulisProvider implements TableProvider, DataSourceRegister {
    @Override
    public String shortName() {
        return "sulis";
    }

    /** A read's rows; a write's options give the plain rows (the write's schema is its data frame's). */
    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        Native.load();
        String[][] pairs = SourceOptions.arrays(options);
        return StructType.fromDDL(Native.tableSchema(pairs[0], pairs[1]));
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new SulisTable(schema);
    }
}
