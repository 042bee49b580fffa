//! Layout of a log buffer file and the arithmetic of terms and positions.
//!
//! ```text
//! +----------------------------+
//! |           Term 0           |  term_length bytes
//! +----------------------------+
//! |           Term 1           |
//! +----------------------------+
//! |           Term 2           |
//! +----------------------------+
//! |        Log metadata        |  4096 bytes (LOG_META_DATA_LENGTH)
//! +----------------------------+
//! ```
//! The whole file is rounded up to the page size. Metadata offsets are those of
//! Aeron's `LogBufferDescriptor` so the files read the same to Aeron's tools.
//! Positions are `(term_count << position_bits_to_shift) + term_offset`.

/// Number of term partitions in a log.
pub const PARTITION_COUNT: usize = 3;
/// Smallest term length.
pub const TERM_MIN_LENGTH: usize = 64 * 1024;
/// Largest term length.
pub const TERM_MAX_LENGTH: usize = 1024 * 1024 * 1024;
/// Smallest page size.
pub const PAGE_MIN_SIZE: usize = 4 * 1024;
/// Largest page size.
pub const PAGE_MAX_SIZE: usize = 1024 * 1024 * 1024;
/// Length of the metadata section at the end of the log.
pub const LOG_META_DATA_LENGTH: usize = 4096;
/// Largest message a publication accepts regardless of term length.
pub const MAX_MESSAGE_LENGTH_LIMIT: usize = 16 * 1024 * 1024;

/// Tail counter of partition `i` is at `TERM_TAIL_COUNTERS_OFFSET + 8 * i`.
pub const TERM_TAIL_COUNTERS_OFFSET: usize = 0;
/// Term count of the active partition (i32).
pub const LOG_ACTIVE_TERM_COUNT_OFFSET: usize = 24;
/// End-of-stream position (i64), `i64::MAX` until the stream ends.
pub const LOG_END_OF_STREAM_POSITION_OFFSET: usize = 128;
/// Connected flag (i32), written by the driver.
pub const LOG_IS_CONNECTED_OFFSET: usize = 136;
/// Number of live transports of an image (i32).
pub const LOG_ACTIVE_TRANSPORT_COUNT: usize = 140;
/// Registration / correlation id (i64).
pub const LOG_CORRELATION_ID_OFFSET: usize = 256;
/// Initial term id (i32).
pub const LOG_INITIAL_TERM_ID_OFFSET: usize = 264;
/// Default frame header length (i32, always 32).
pub const LOG_DEFAULT_FRAME_HEADER_LENGTH_OFFSET: usize = 268;
/// MTU length (i32).
pub const LOG_MTU_LENGTH_OFFSET: usize = 272;
/// Term length (i32).
pub const LOG_TERM_LENGTH_OFFSET: usize = 276;
/// Page size (i32).
pub const LOG_PAGE_SIZE_OFFSET: usize = 280;
/// Publication window length (i32).
pub const LOG_PUBLICATION_WINDOW_LENGTH_OFFSET: usize = 284;
/// Receiver window length (i32).
pub const LOG_RECEIVER_WINDOW_LENGTH_OFFSET: usize = 288;
/// SO_SNDBUF of the channel socket (i32).
pub const LOG_SOCKET_SNDBUF_LENGTH_OFFSET: usize = 292;
/// SO_RCVBUF of the channel socket (i32).
pub const LOG_SOCKET_RCVBUF_LENGTH_OFFSET: usize = 304;
/// Max resend (i32).
pub const LOG_MAX_RESEND_OFFSET: usize = 316;
/// Default frame header (32 bytes used of 128).
pub const LOG_DEFAULT_FRAME_HEADER_OFFSET: usize = 320;
/// Maximum default frame header length.
pub const LOG_DEFAULT_FRAME_HEADER_MAX_LENGTH: usize = 128;
/// Entity tag (i64).
pub const LOG_ENTITY_TAG_OFFSET: usize = 448;
/// Response correlation id (i64).
pub const LOG_RESPONSE_CORRELATION_ID_OFFSET: usize = 456;
/// Linger timeout in ns (i64).
pub const LOG_LINGER_TIMEOUT_NS_OFFSET: usize = 464;
/// Untethered window limit timeout in ns (i64).
pub const LOG_UNTETHERED_WINDOW_LIMIT_TIMEOUT_NS_OFFSET: usize = 472;
/// Untethered resting timeout in ns (i64).
pub const LOG_UNTETHERED_RESTING_TIMEOUT_NS_OFFSET: usize = 480;
/// Group flag (u8).
pub const LOG_GROUP_OFFSET: usize = 488;
/// Is-response flag (u8).
pub const LOG_IS_RESPONSE_OFFSET: usize = 489;
/// Rejoin flag (u8).
pub const LOG_REJOIN_OFFSET: usize = 490;
/// Reliable flag (u8).
pub const LOG_RELIABLE_OFFSET: usize = 491;
/// Sparse flag (u8).
pub const LOG_SPARSE_OFFSET: usize = 492;
/// Signal-EOS flag (u8).
pub const LOG_SIGNAL_EOS_OFFSET: usize = 493;
/// Spies-simulate-connection flag (u8).
pub const LOG_SPIES_SIMULATE_CONNECTION_OFFSET: usize = 494;
/// Tether flag (u8).
pub const LOG_TETHER_OFFSET: usize = 495;
/// Publication revoked flag (u8).
pub const LOG_IS_PUBLICATION_REVOKED_OFFSET: usize = 496;
/// Log type (u8): 0 concurrent publication, 1 exclusive publication, 2 image.
pub const LOG_TYPE_OFFSET: usize = 497;

/// `LOG_TYPE_OFFSET` value of a concurrent publication.
pub const LOG_TYPE_CONCURRENT: u8 = 0;
/// `LOG_TYPE_OFFSET` value of an exclusive publication.
pub const LOG_TYPE_EXCLUSIVE: u8 = 1;
/// `LOG_TYPE_OFFSET` value of a network image.
pub const LOG_TYPE_IMAGE: u8 = 2;

/// Checks a term length: a power of two between 64 KiB and 1 GiB.
pub fn check_term_length(term_length: usize) -> Result<(), String> {
    if !(TERM_MIN_LENGTH..=TERM_MAX_LENGTH).contains(&term_length) || !term_length.is_power_of_two()
    {
        return Err(format!(
            "term length {term_length} must be a power of two between {TERM_MIN_LENGTH} and {TERM_MAX_LENGTH}"
        ));
    }
    Ok(())
}

/// Checks a page size: a power of two between 4 KiB and 1 GiB.
pub fn check_page_size(page_size: usize) -> Result<(), String> {
    if !(PAGE_MIN_SIZE..=PAGE_MAX_SIZE).contains(&page_size) || !page_size.is_power_of_two() {
        return Err(format!("page size {page_size} must be a power of two between {PAGE_MIN_SIZE} and {PAGE_MAX_SIZE}"));
    }
    Ok(())
}

/// Length of a log file for a term length and page size.
pub fn compute_log_length(term_length: usize, page_size: usize) -> usize {
    let raw = PARTITION_COUNT * term_length + LOG_META_DATA_LENGTH;
    (raw + page_size - 1) & !(page_size - 1)
}

/// Largest message a publication with this term length accepts.
pub fn compute_max_message_length(term_length: usize) -> usize {
    (term_length / 8).min(MAX_MESSAGE_LENGTH_LIMIT)
}

/// `log2(term_length)`.
#[inline(always)]
pub fn position_bits_to_shift(term_length: usize) -> u32 {
    term_length.trailing_zeros()
}

/// Position from a term id and offset.
#[inline(always)]
pub fn compute_position(term_id: i32, term_offset: i32, bits: u32, initial_term_id: i32) -> i64 {
    let term_count = term_id.wrapping_sub(initial_term_id) as i64;
    (term_count << bits) + term_offset as i64
}

/// Term id holding a position.
#[inline(always)]
pub fn compute_term_id_from_position(position: i64, bits: u32, initial_term_id: i32) -> i32 {
    ((position >> bits) as i32).wrapping_add(initial_term_id)
}

/// Offset within its term of a position.
#[inline(always)]
pub fn compute_term_offset_from_position(position: i64, bits: u32) -> i32 {
    (position & ((1i64 << bits) - 1)) as i32
}

/// Partition index of a term count.
#[inline(always)]
pub fn index_by_term_count(term_count: i64) -> usize {
    (term_count % PARTITION_COUNT as i64) as usize
}

/// Partition index of a term id.
#[inline(always)]
pub fn index_by_term(initial_term_id: i32, term_id: i32) -> usize {
    (term_id.wrapping_sub(initial_term_id) as u32 as usize) % PARTITION_COUNT
}

/// Partition index of a position.
#[inline(always)]
pub fn index_by_position(position: i64, bits: u32) -> usize {
    ((position >> bits) as u64 % PARTITION_COUNT as u64) as usize
}

/// Packs a term id and tail offset into a raw tail counter value.
#[inline(always)]
pub fn pack_tail(term_id: i32, term_offset: i32) -> i64 {
    ((term_id as i64) << 32) + term_offset as i64
}

/// Term id of a raw tail.
#[inline(always)]
pub fn term_id(raw_tail: i64) -> i32 {
    (raw_tail >> 32) as i32
}

/// Tail offset of a raw tail, clamped to the term length (concurrent writers can overshoot).
#[inline(always)]
pub fn term_offset(raw_tail: i64, term_length: i64) -> i32 {
    let tail = raw_tail & 0xFFFF_FFFF;
    tail.min(term_length) as i32
}

/// Maximum position a stream can reach with this term length.
pub fn max_possible_position(term_length: usize) -> i64 {
    (term_length as i64) << 31
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn should_round_trip_positions_across_term_id_wrap() {
        let bits = position_bits_to_shift(64 * 1024);
        let initial = i32::MAX - 1;
        let term = initial.wrapping_add(3); // wrapped to negative
        let pos = compute_position(term, 4096, bits, initial);
        assert_eq!(pos, 3 * 65536 + 4096);
        assert_eq!(compute_term_id_from_position(pos, bits, initial), term);
        assert_eq!(compute_term_offset_from_position(pos, bits), 4096);
        assert_eq!(index_by_term(initial, term), 0);
        assert_eq!(index_by_position(pos, bits), 0);
    }

    #[test]
    fn should_pack_and_clamp_tail() {
        let raw = pack_tail(-5, 70_000);
        assert_eq!(term_id(raw), -5);
        assert_eq!(term_offset(raw, 65536), 65536);
        assert_eq!(term_offset(pack_tail(7, 100), 65536), 100);
    }

    #[test]
    fn should_check_lengths() {
        assert!(check_term_length(64 * 1024).is_ok());
        assert!(check_term_length(100_000).is_err());
        assert!(check_term_length(32 * 1024).is_err());
        assert_eq!(compute_log_length(65536, 4096), 3 * 65536 + 4096);
        assert_eq!(compute_max_message_length(65536), 8192);
        assert_eq!(compute_max_message_length(1 << 30), 16 * 1024 * 1024);
    }
}
