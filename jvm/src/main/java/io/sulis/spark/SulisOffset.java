package io.sulis.spark;

import org.apache.spark.sql.connector.read.streaming.Offset;

/** A streaming offset: its JSON text, the one the Python source writes for the same offset. */
final class SulisOffset extends Offset {
    private final String json;

    SulisOffset(String json) {
        this.json = json;
    }

    @Override
    public String json() {
        return json;
    }
}
