package io.sulis.spark;

import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;

/**
 * The Rust core of the source ({@code sulis_spark}, through {@code crates/sulis-jni}): the planner and
 * the partition readers the Python source runs too. The library is loaded on first use, never when
 * Spark instantiates the provider (it does so for every format lookup): from {@code -Dsulis.jni.library}
 * if set, else from the copy inside this jar, written to a temporary file once per JVM.
 */
final class Native {
    private Native() {}

    private static volatile boolean loaded;

    static void load() {
        if (loaded) {
            return;
        }
        synchronized (Native.class) {
            if (loaded) {
                return;
            }
            String given = System.getProperty("sulis.jni.library");
            if (given != null && !given.isEmpty()) {
                System.load(given);
            } else {
                System.load(extracted().toString());
            }
            loaded = true;
        }
    }

    private static Path extracted() {
        String resource = "/native/libsulis_jni.so";
        try (InputStream in = Native.class.getResourceAsStream(resource)) {
            if (in == null) {
                throw new UnsatisfiedLinkError("the sulis jar holds no " + resource
                        + " (build it with scripts/build_jar.sh) and -Dsulis.jni.library is not set");
            }
            Path file = Files.createTempFile("libsulis_jni", ".so");
            file.toFile().deleteOnExit();
            Files.copy(in, file, StandardCopyOption.REPLACE_EXISTING);
            return file;
        } catch (IOException e) {
            throw new UncheckedIOException("extracting " + resource, e);
        }
    }

    /** An IOException as an unchecked one, for the loader. */
    static final class UncheckedIOException extends RuntimeException {
        private static final long serialVersionUID = 1L;

        UncheckedIOException(String what, IOException cause) {
            super(what + ": " + cause.getMessage(), cause);
        }
    }

    /** The options checked (the first bad one thrown); the rows' schema as Spark DDL. */
    static native String optionsSchema(String[] keys, String[] values);

    /** The schema of the table a format lookup makes (a read's rows; the plain rows for a write's options). */
    static native String tableSchema(String[] keys, String[] values);

    // -- the sink ----------------------------------------------------------------------------------
    /** On the Spark driver as a streaming write starts: with exactlyOnce, the archive records the journal. */
    static native void sinkRecordJournal(String[] keys, String[] values);

    /**
     * A writer, the options and the write's columns (names, Spark simple types) checked; exactly once as
     * task attempt {@code attempt} of {@code partition} in micro-batch {@code batch} of streaming query
     * {@code query} where exactlyOnce is set, at least once where {@code query} is null (a batch write).
     */
    static native long sinkOpen(String[] keys, String[] values, String[] names, String[] types, String query,
            long batch, long partition, long attempt);

    /** The id of a row's target: its channel (null: none) and stream id. */
    static native int sinkTarget(long handle, long row, String channel, long streamId, boolean streamNull);

    /** Offers a value; time: 1 the row's timestamp (micros), 0 a null one, 2 no timestamp column. */
    static native void sinkOffer(long handle, long row, int target, byte[] value, long micros, int time);

    /** After the last row: every target's rows recorded and the journal told; {published, skipped}. */
    static native long[] sinkFinish(long handle);

    /** After an error: the journal told how the attempt ended, where it can be. */
    static native void sinkFail(long handle, String why);

    /** What to log since the last call. */
    static native String[] sinkNotes(long handle);

    static native void sinkClose(long handle);

    /** The address of a direct buffer's memory. */
    static native long bufferAddress(ByteBuffer buffer);

    // -- the planner (driver side) ---------------------------------------------------------------
    static native long plannerOpen(String[] keys, String[] values, boolean streaming);

    static native void plannerClose(long handle);

    /** Spark committed the micro-batch ending at {@code end} (offset JSON): the query's retention hold moves there. */
    static native void plannerCommit(long handle, String end);

    /** 11 longs per range: RecordingRange's fields in order. */
    static native long[] plannerBatchRanges(long handle);

    static native String plannerInitialOffset(long handle);

    /** {kind, n}: 0 all available, 1 max bytes, 2 max rows, 3 min rows. */
    static native long[] plannerDefaultReadLimit(long handle);

    static native void plannerPrepareAvailableNow(long handle);

    static native String plannerReportLatestOffset(long handle);

    /** null: no batch yet (too few rows for a min-rows limit). */
    static native String plannerLatestOffset(long handle, String start, int kind, long n);

    static native long[] plannerRanges(long handle, String start, String end);

    /** The archive's id, archiveDir checked against it. */
    static native long plannerArchiveId(long handle);

    /** Lines to log: "W text" or "I text". */
    static native String[] plannerDrainLog(long handle);

    /** Real-time mode: 8 longs per followed recording (id, stream, session, recording start, term length,
     * segment length, initial term id, position read on from). */
    static native long[] plannerLivePartitions(long handle, String start);

    /** Real-time mode: the offset a batch from start ended at; pairs: recording id, position read to. */
    static native String plannerMergeOffsets(long handle, String start, long[] pairs);

    // -- the partition readers (executor side) ---------------------------------------------------
    static native long readerOpen(String[] keys, String[] values, long[] range, long archiveId);

    /** Lines to log: "I text". */
    static native String[] readerDrainLog(long handle);

    /** The next rows, at most limit, as Arrow buffers: how many (-1 at the range's end); four longs a column
     * into columns (validity, null count, offsets, data; see SulisColumnVector), valid until the next call. */
    static native int readerColumns(long handle, long[] columns, int limit);

    /** Real-time mode: a recording followed as it is recorded (8 longs, as plannerLivePartitions). */
    static native long liveOpen(String[] keys, String[] values, long[] partition);

    /** Records written into the direct buffer, -1 at the end, -n: the next needs n bytes; waits at most
     * timeoutMs for a message: 0 records then. */
    static native int liveRows(long handle, ByteBuffer buffer, long timeoutMs);

    static native void readerClose(long handle);
}
