package io.sulis.spark;

import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadAllAvailable;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxBytes;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.ReadMinRows;
import org.apache.spark.sql.connector.read.streaming.PartitionOffset;
import org.apache.spark.sql.connector.read.streaming.SupportsAdmissionControl;
import org.apache.spark.sql.connector.read.streaming.SupportsRealTimeMode;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * {@code spark.readStream}: micro-batches planned by the Rust planner the Python source runs
 * ({@code sulis_spark::StreamPlanner}): offsets are positions per recording, new recordings join at their
 * start, recordings read to their stop leave the offsets, purged or truncated ones are data loss.
 */
final class SulisMicroBatchStream
        implements MicroBatchStream, SupportsAdmissionControl, SupportsTriggerAvailableNow, SupportsRealTimeMode {
    private static final Logger LOG = LoggerFactory.getLogger("sulis.spark");

    private final SourceOptions options;
    private long planner;
    /** Real-time mode: where the batch being run began (mergeOffsets is not told). */
    private volatile String realTimeStart;

    SulisMicroBatchStream(SourceOptions options) {
        this.options = options;
        Native.load();
        planner = Native.plannerOpen(options.keys, options.values, true);
    }

    static void log(String[] lines) {
        if (lines == null) {
            return;
        }
        for (String line : lines) {
            if (line.startsWith("W ")) {
                LOG.warn(line.substring(2));
            } else {
                LOG.info(line.substring(2));
            }
        }
    }

    private String[] drained() {
        return Native.plannerDrainLog(planner);
    }

    @Override
    public Offset initialOffset() {
        try {
            return new SulisOffset(Native.plannerInitialOffset(planner));
        } finally {
            log(drained());
        }
    }

    @Override
    public Offset deserializeOffset(String json) {
        return new SulisOffset(json);
    }

    @Override
    public Offset latestOffset() {
        throw new UnsupportedOperationException("the sulis source is asked latestOffset(start, limit)");
    }

    @Override
    public ReadLimit getDefaultReadLimit() {
        long[] limit = Native.plannerDefaultReadLimit(planner);
        switch ((int) limit[0]) {
            case 1:
                return ReadLimit.maxBytes(limit[1]);
            case 2:
                return ReadLimit.maxRows(limit[1]);
            case 3:
                return ReadLimit.minRows(limit[1], Long.MAX_VALUE);
            default:
                return ReadLimit.allAvailable();
        }
    }

    @Override
    public Offset latestOffset(Offset start, ReadLimit limit) {
        int kind = 0;
        long n = 0;
        if (limit instanceof ReadMaxBytes) {
            kind = 1;
            n = ((ReadMaxBytes) limit).maxBytes();
        } else if (limit instanceof ReadMaxRows) {
            kind = 2;
            n = ((ReadMaxRows) limit).maxRows();
        } else if (limit instanceof ReadMinRows) {
            kind = 3;
            n = ((ReadMinRows) limit).minRows();
        } else if (!(limit instanceof ReadAllAvailable)) {
            kind = 0;
        }
        try {
            String next = Native.plannerLatestOffset(planner, start == null ? null : start.json(), kind, n);
            return next == null ? start : new SulisOffset(next);
        } finally {
            log(drained());
        }
    }

    @Override
    public Offset reportLatestOffset() {
        String latest = Native.plannerReportLatestOffset(planner);
        return latest == null ? null : new SulisOffset(latest);
    }

    @Override
    public void prepareForTriggerAvailableNow() {
        Native.plannerPrepareAvailableNow(planner);
    }

    @Override
    public InputPartition[] planInputPartitions(Offset start, Offset end) {
        long archiveId = Native.plannerArchiveId(planner);
        try {
            return SulisInputPartition.of(
                    Native.plannerRanges(planner, start == null ? null : start.json(), end.json()), archiveId);
        } finally {
            log(drained());
        }
    }

    @Override
    public void prepareForRealTimeMode() {
        // Nothing to prepare: each batch follows the recordings from where the last one read to.
    }

    @Override
    public InputPartition[] planInputPartitions(Offset start) {
        realTimeStart = start == null ? null : start.json();
        long[] flat;
        try {
            flat = Native.plannerLivePartitions(planner, realTimeStart);
        } finally {
            log(drained());
        }
        InputPartition[] out = new InputPartition[flat.length / 8];
        for (int i = 0; i < out.length; i++) {
            out[i] = new SulisLivePartition(java.util.Arrays.copyOfRange(flat, i * 8, i * 8 + 8));
        }
        return out;
    }

    @Override
    public Offset mergeOffsets(PartitionOffset[] offsets) {
        long[] pairs = new long[offsets.length * 2];
        for (int i = 0; i < offsets.length; i++) {
            SulisPartitionOffset o = (SulisPartitionOffset) offsets[i];
            pairs[2 * i] = o.recordingId;
            pairs[2 * i + 1] = o.position;
        }
        return new SulisOffset(Native.plannerMergeOffsets(planner, realTimeStart, pairs));
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
        return new SulisReaderFactory(options);
    }

    @Override
    public void commit(Offset end) {
        // The checkpoint's offsets are the only record of where the query is; the archive's retention
        // spares what the next batch reads from here (the query's retention hold).
        if (planner != 0) {
            Native.plannerCommit(planner, end.json());
        }
    }

    @Override
    public void stop() {
        if (planner != 0) {
            Native.plannerClose(planner);
            planner = 0;
        }
    }
}
