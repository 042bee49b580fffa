//! A planned range as Python holds it: a tuple in `RecordingRange`'s field
//! order (`python/sulis/spark/replay.py`).

use sulis_spark::RecordingRange;

/// recording id, stream id, session id, start, end, replay from, replay
/// to, recording start, term length, segment length, initial term id.
pub(crate) type RangeTuple = (i64, i32, i32, i64, i64, i64, i64, i64, i32, i32, i32);

pub(crate) fn to_tuple(r: RecordingRange) -> RangeTuple {
    (
        r.recording_id,
        r.stream_id,
        r.session_id,
        r.start,
        r.end,
        r.replay_from,
        r.replay_to,
        r.recording_start,
        r.term_length,
        r.segment_length,
        r.initial_term_id,
    )
}

pub(crate) fn from_tuple(t: RangeTuple) -> RecordingRange {
    RecordingRange {
        recording_id: t.0,
        stream_id: t.1,
        session_id: t.2,
        start: t.3,
        end: t.4,
        replay_from: t.5,
        replay_to: t.6,
        recording_start: t.7,
        term_length: t.8,
        segment_length: t.9,
        initial_term_id: t.10,
    }
}
