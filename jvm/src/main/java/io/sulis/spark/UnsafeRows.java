package io.sulis.spark;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;

/**
 * The rows the Rust reader writes into a direct buffer, each record the row's length, the position its
 * message ends at, then the row in Spark's UnsafeRow format (columns and their values are the Rust core's,
 * the Python source's): an UnsafeRow points at each in turn, nothing is decoded here. A row stays valid
 * until the buffer is filled again, after the last of its batch (Spark copies what it keeps).
 */
final class UnsafeRows {
    private static final int INITIAL = 1 << 20;

    private final UnsafeRow row;
    private ByteBuffer buffer;
    private long address;
    private int at;
    private int left;
    /** The position of the last row handed over. */
    long position;

    UnsafeRows(int fields, long position) {
        row = new UnsafeRow(fields);
        this.position = position;
        allocate(INITIAL);
    }

    private void allocate(int capacity) {
        buffer = ByteBuffer.allocateDirect(capacity).order(ByteOrder.LITTLE_ENDIAN);
        address = Native.bufferAddress(buffer);
    }

    ByteBuffer buffer() {
        return buffer;
    }

    boolean isEmpty() {
        return left == 0;
    }

    /**
     * What the reader returned: n records now in the buffer, true; a buffer too small for the next row
     * (-n, n > 1), a larger one and false; anything else, false.
     */
    boolean filled(int n) {
        if (n < -1) {
            allocate(Math.max(-n, buffer.capacity() * 2));
            return false;
        }
        if (n <= 0) {
            return false;
        }
        at = 0;
        left = n;
        return true;
    }

    UnsafeRow next() {
        int length = buffer.getInt(at);
        position = buffer.getLong(at + 8);
        row.pointTo(null, address + at + 16, length);
        at += 16 + length;
        left--;
        return row;
    }
}
