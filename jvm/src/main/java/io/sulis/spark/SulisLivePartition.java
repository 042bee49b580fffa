package io.sulis.spark;

import org.apache.spark.sql.connector.read.InputPartition;

/** Real-time mode: one recording followed as it is recorded, from a position on (a long-running task). */
final class SulisLivePartition implements InputPartition {
    private static final long serialVersionUID = 1L;

    /** Recording id, stream id, session id, recording start, term length, segment length, initial term
     * id, the position read on from. */
    final long[] part;

    SulisLivePartition(long[] part) {
        this.part = part;
    }

    @Override
    public String toString() {
        return "SulisLivePartition(recording " + part[0] + " from " + part[7] + ")";
    }
}
