package io.sulis.spark;

import java.util.Arrays;
import org.apache.spark.sql.connector.read.InputPartition;

/** One Spark task: a position range {@code (start, end]} of one recording of the archive {@code archiveId}. */
final class SulisInputPartition implements InputPartition {
    private static final long serialVersionUID = 1L;

    /** RecordingRange's fields: recording id, stream id, session id, start, end, replay from, replay to,
     * recording start, term length, segment length, initial term id. */
    final long[] range;
    final long archiveId;

    SulisInputPartition(long[] range, long archiveId) {
        this.range = range;
        this.archiveId = archiveId;
    }

    static InputPartition[] of(long[] flat, long archiveId) {
        InputPartition[] out = new InputPartition[flat.length / 11];
        for (int i = 0; i < out.length; i++) {
            out[i] = new SulisInputPartition(Arrays.copyOfRange(flat, i * 11, i * 11 + 11), archiveId);
        }
        return out;
    }

    @Override
    public String toString() {
        return "SulisInputPartition(recording " + range[0] + " (" + range[3] + ", " + range[4] + "])";
    }
}
