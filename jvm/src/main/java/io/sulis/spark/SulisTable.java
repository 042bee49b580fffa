package io.sulis.spark;

import java.util.EnumSet;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.CatalogV2Util;
import org.apache.spark.sql.connector.catalog.Column;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The recordings a read selects, as a table Spark reads in batch or micro-batches (and real-time mode); a
 * write publishes its rows (any schema with a value, the sink checks it).
 */
final class SulisTable implements SupportsRead, SupportsWrite {
    private final StructType schema;

    SulisTable(StructType schema) {
        this.schema = schema;
    }

    @Override
    public String name() {
        return "sulis";
    }

    /** The columns of the schema, as Spark's own default makes them (Table.schema() is deprecated). */
    @Override
    public Column[] columns() {
        return CatalogV2Util.structTypeToV2Columns(schema, true);
    }

    @Override
    public Set<TableCapability> capabilities() {
        return EnumSet.of(TableCapability.BATCH_READ, TableCapability.MICRO_BATCH_READ,
                TableCapability.BATCH_WRITE, TableCapability.STREAMING_WRITE, TableCapability.ACCEPT_ANY_SCHEMA);
    }

    @Override
    public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
        return new SulisWrite(info);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
        return new SulisScan(new SourceOptions(options));
    }
}
