package io.sulis.spark;

/**
 * Every failure of the sulis source, as the Python source names them: each message names what and
 * where (the option, the recording and positions, the archive).
 */
public class SulisException extends RuntimeException {
    public SulisException(String message) {
        super(message);
    }

    /** An option that is wrong, or does not fit what the archive holds. */
    public static final class OptionError extends SulisException {
        public OptionError(String message) {
            super(message);
        }
    }

    /** Data the query was to read is gone (failOnDataLoss=true). */
    public static final class DataLossError extends SulisException {
        public DataLossError(String message) {
            super(message);
        }
    }

    /** The archive could not be asked. */
    public static final class ArchiveUnavailableError extends SulisException {
        public ArchiveUnavailableError(String message) {
            super(message);
        }
    }

    /** A range could not be read whole (a replay cut short, a corrupt frame). */
    public static class ReadError extends SulisException {
        public ReadError(String message) {
            super(message);
        }
    }

    /** A payload valueSchema cannot decode (mode FAILFAST), naming the recording and position. */
    public static final class RowError extends SulisException {
        public RowError(String message) {
            super(message);
        }
    }

    /** The sink could not publish (a publication closed, a value that could not be read). */
    public static class SinkError extends SulisException {
        public SinkError(String message) {
            super(message);
        }
    }

    /** A stream refused the sink's offers for the message timeout. */
    public static final class SinkTimeoutError extends SinkError {
        public SinkTimeoutError(String message) {
            super(message);
        }
    }

    /** A replay made no progress for the message timeout: a read error, as in the Python source. */
    public static final class ReadTimeoutError extends ReadError {
        public ReadTimeoutError(String message) {
            super(message);
        }
    }

    /** No media driver on this host to read through. */
    public static final class NoMediaDriverError extends SulisException {
        public NoMediaDriverError(String message) {
            super(message);
        }
    }
}
