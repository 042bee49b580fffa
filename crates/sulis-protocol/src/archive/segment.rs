//! Segment files: where a recording's bytes live.
//!
//! A recording is stored in files of `segment_file_length` bytes named
//! `<recordingId>-<segmentBasePosition>.rec`. The bytes of stream position
//! `p` are at offset `p - base` of the file whose base is the largest
//! segment boundary at or below `p`, boundaries being counted from the
//! start of the term the recording began in; so terms lie at multiples of
//! the term length inside a file and the file mirrors the log's term
//! buffers: whole frames, 32-byte aligned, headers included. A recording
//! that joined mid-term leaves the bytes before its start position zero.

/// Extension of segment files.
pub const SEGMENT_FILE_SUFFIX: &str = ".rec";
/// Extension of segment files queued for deletion.
pub const DELETE_SUFFIX: &str = ".del";
/// Default segment file length (Aeron's, 128 MiB).
pub const DEFAULT_SEGMENT_FILE_LENGTH: usize = 128 * 1024 * 1024;

/// `<recording_id>-<base_position>.rec`.
pub fn segment_file_name(recording_id: i64, base_position: i64) -> String {
    format!("{recording_id}-{base_position}{SEGMENT_FILE_SUFFIX}")
}

/// The recording id and base position a segment file name holds, if it is one.
pub fn parse_segment_file_name(name: &str) -> Option<(i64, i64)> {
    let stem = name.strip_suffix(SEGMENT_FILE_SUFFIX)?;
    let (id, base) = stem.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(id) || !digits(base) {
        return None;
    }
    Some((id.parse().ok()?, base.parse().ok()?))
}

/// Base position of the segment file holding `position` of a recording
/// that started at `start_position`.
pub fn segment_file_base_position(
    start_position: i64,
    position: i64,
    term_length: i64,
    segment_length: i64,
) -> i64 {
    let start_term_base = start_position - (start_position & (term_length - 1));
    let length_from_base = position - start_term_base;
    start_term_base + (length_from_base - (length_from_base & (segment_length - 1)))
}

/// Checks a segment file length: a power of two from 64 KiB to 1 GiB.
pub fn check_segment_file_length(length: usize) -> Result<(), String> {
    if !(64 * 1024..=1024 * 1024 * 1024).contains(&length) || !length.is_power_of_two() {
        return Err(format!(
            "segment file length {length} must be a power of two from 64 KiB to 1 GiB"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn should_name_and_parse_segment_files() {
        assert_eq!(segment_file_name(3, 1 << 27), "3-134217728.rec");
        assert_eq!(
            parse_segment_file_name("3-134217728.rec"),
            Some((3, 1 << 27))
        );
        for bad in [
            "3-1.rec.del",
            "x-1.rec",
            "3-.rec",
            "-3-1.rec",
            "3_1.rec",
            "3-1",
        ] {
            assert_eq!(parse_segment_file_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn should_count_segment_bases_from_the_starting_term() {
        let (term, seg) = (64 * 1024i64, 256 * 1024i64);
        // Started mid-term: the first file begins at that term's base.
        let start = 3 * term + 640;
        assert_eq!(
            segment_file_base_position(start, start, term, seg),
            3 * term
        );
        assert_eq!(
            segment_file_base_position(start, 3 * term + seg - 32, term, seg),
            3 * term
        );
        assert_eq!(
            segment_file_base_position(start, 3 * term + seg, term, seg),
            3 * term + seg
        );
        assert_eq!(
            segment_file_base_position(0, 5 * seg + 1, term, seg),
            5 * seg
        );
    }

    #[test]
    fn should_check_the_segment_length() {
        assert!(check_segment_file_length(128 * 1024 * 1024).is_ok());
        assert!(check_segment_file_length(65536).is_ok());
        assert!(check_segment_file_length(1000)
            .unwrap_err()
            .contains("1000"));
        assert!(check_segment_file_length(3 << 20).is_err());
    }
}
