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
 * rows and offsets as the Python source (its rules are one implementation, in Rust). Spark makes one of
 * these for every format lookup, so nothing happens here until a query plans.
 */
public final class SulisProvider implements TableProvider, DataSourceRegister {
    @Override
    public String shortName() {
        return "sulis";
    }

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        return new SourceOptions(options).schema();
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new SulisTable(schema);
    }
}
