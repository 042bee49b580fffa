package io.sulis.spark;

import org.apache.spark.sql.connector.read.streaming.PartitionOffset;

/** Real-time mode: where one followed recording was read to (the position after its last row). */
final class SulisPartitionOffset implements PartitionOffset {
    private static final long serialVersionUID = 1L;

    final long recordingId;
    final long position;

    SulisPartitionOffset(long recordingId, long position) {
        this.recordingId = recordingId;
        this.position = position;
    }
}
