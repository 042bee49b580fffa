package io.sulis.spark;

import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * One column of the rows the Rust reader wrote as Arrow buffers (sulis_spark::arrow_columns): read where they
 * are, in native memory the reader owns until its next batch. Values are little-endian, a boolean one bit,
 * a binary value between two int32 offsets; a validity bit map only where a value is null. A column whose
 * rows all hold one value (a range's recording, stream and session ids) is that value.
 */
final class SulisColumnVector extends ColumnVector {
    private final boolean bits;
    private long validity;
    private int nulls;
    private long offsets;
    private long data;
    /** Every row's value is {@code data} itself. */
    private boolean constant;

    SulisColumnVector(DataType type) {
        super(type);
        bits = type instanceof BooleanType;
    }

    /** Points the column at a batch's buffers: four longs as Native.readerColumns gives them, from {@code at}. */
    void pointTo(long[] meta, int at) {
        validity = meta[at];
        nulls = (int) meta[at + 1];
        offsets = meta[at + 2];
        data = meta[at + 3];
        constant = offsets == -1;
    }

    @Override
    public void close() {
        // The reader owns the memory.
    }

    @Override
    public boolean hasNull() {
        return nulls > 0;
    }

    @Override
    public int numNulls() {
        return nulls;
    }

    @Override
    public boolean isNullAt(int rowId) {
        return validity != 0 && (Platform.getByte(null, validity + (rowId >> 3)) & (1 << (rowId & 7))) == 0;
    }

    @Override
    public boolean getBoolean(int rowId) {
        return (Platform.getByte(null, data + (rowId >> 3)) & (1 << (rowId & 7))) != 0;
    }

    @Override
    public byte getByte(int rowId) {
        return constant ? (byte) data : Platform.getByte(null, data + rowId);
    }

    @Override
    public short getShort(int rowId) {
        return constant ? (short) data : Platform.getShort(null, data + 2L * rowId);
    }

    @Override
    public int getInt(int rowId) {
        return constant ? (int) data : Platform.getInt(null, data + 4L * rowId);
    }

    @Override
    public long getLong(int rowId) {
        return constant ? data : Platform.getLong(null, data + 8L * rowId);
    }

    @Override
    public float getFloat(int rowId) {
        return Platform.getFloat(null, data + 4L * rowId);
    }

    @Override
    public double getDouble(int rowId) {
        return Platform.getDouble(null, data + 8L * rowId);
    }

    @Override
    public byte[] getBinary(int rowId) {
        if (isNullAt(rowId)) {
            return null;
        }
        int start = Platform.getInt(null, offsets + 4L * rowId);
        int end = Platform.getInt(null, offsets + 4L * rowId + 4);
        byte[] out = new byte[end - start];
        Platform.copyMemory(null, data + start, out, Platform.BYTE_ARRAY_OFFSET, end - start);
        return out;
    }

    @Override
    public UTF8String getUTF8String(int rowId) {
        throw unsupported();
    }

    @Override
    public Decimal getDecimal(int rowId, int precision, int scale) {
        throw unsupported();
    }

    @Override
    public ColumnarArray getArray(int rowId) {
        throw unsupported();
    }

    @Override
    public ColumnarMap getMap(int ordinal) {
        throw unsupported();
    }

    @Override
    public ColumnVector getChild(int ordinal) {
        throw unsupported();
    }

    private UnsupportedOperationException unsupported() {
        return new UnsupportedOperationException("a sulis column of type " + type.simpleString()
                + " has no such values");
    }
}
