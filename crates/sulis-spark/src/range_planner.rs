//! Which positions of which recordings a query reads, and in which pieces.
//!
//! A range `(start, end]` of a recording holds the messages whose end
//! position `p` has `start < p <= end`: ranges that touch hold every
//! message once, whatever the cut, and a streaming offset (a position,
//! which may fall between two fragments of a message) needs no rounding.
//! A replay of it begins where a message begins, [`replay_from`]: the
//! recording's start or a term boundary at or before `start` (Aeron never
//! lets a message straddle terms), and the reader drops what ends at or
//! before `start`.

use crate::RecordingInfo;
use std::collections::BTreeMap;

/// `startingPositions` / `endingPositions` for one recording: the first
/// or last position there is.
pub const EARLIEST: i64 = -2;
/// See [`EARLIEST`]: what is recorded when the query plans.
pub const LATEST: i64 = -1;

/// `startingPositions` or `endingPositions`: `earliest`, `latest`, or a
/// position per recording id ([`EARLIEST`], [`LATEST`] or a position;
/// a recording not named is read from its earliest, to its latest).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PositionSpec {
    Earliest,
    Latest,
    ById(BTreeMap<i64, i64>),
}

/// Why a plan cannot be made: an option that does not fit what the
/// archive holds, data the query was to read that is gone
/// (`failOnDataLoss=true`), or an archive that cannot be asked. The text
/// names the option, recording or archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanError {
    Option(String),
    DataLoss(String),
    /// The archive could not be reached or failed a request.
    Archive(String),
}

/// The positions a query reads: start and end per recording id, and the
/// warnings to log beside them (data skipped with `failOnDataLoss=false`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Positions {
    pub starts: BTreeMap<i64, i64>,
    pub ends: BTreeMap<i64, i64>,
    pub warnings: Vec<String>,
}

impl PlanError {
    /// The name both sources give this error (Python's exception class,
    /// the JVM's `SulisException` subclass), and its text.
    pub fn named(self) -> (&'static str, String) {
        match self {
            PlanError::Option(t) => ("OptionError", t),
            PlanError::DataLoss(t) => ("DataLossError", t),
            PlanError::Archive(t) => ("ArchiveUnavailableError", t),
        }
    }
}

/// Messages of one recording whose end position is in `(start, end]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordingRange {
    pub recording_id: i64,
    pub stream_id: i32,
    pub session_id: i32,
    pub start: i64,
    pub end: i64,
    /// A message boundary at or before `start`: where the replay begins.
    pub replay_from: i64,
    /// A frame boundary at or after `end` (what was recorded when planned):
    /// where the replay ends.
    pub replay_to: i64,
    /// The recording's geometry, for reading its segment files.
    pub recording_start: i64,
    pub term_length: i32,
    pub segment_length: i32,
    pub initial_term_id: i32,
}

/// Where a replay of `(start, ...]` begins (see the module doc).
pub fn replay_from(start: i64, recording_start: i64, term_length: i32) -> i64 {
    recording_start.max(start - start.rem_euclid(term_length as i64))
}

/// The start and end position per recording, from `startingPositions` and
/// `endingPositions` (a streaming query has no end: `ending` is not
/// looked at). A position outside what a recording holds is an option
/// error; a start before the recording's (purged) start is data loss
/// ([`check_data_loss`]).
pub fn resolve_positions(
    infos: &[RecordingInfo],
    starting: &PositionSpec,
    ending: &PositionSpec,
    streaming: bool,
    fail_on_data_loss: bool,
    archive: &str,
    selection: &str,
) -> Result<Positions, PlanError> {
    check_keys(starting, infos, "startingPositions", selection)?;
    if !streaming {
        check_keys(ending, infos, "endingPositions", selection)?;
    }
    let mut starts = BTreeMap::new();
    let mut ends = BTreeMap::new();
    let mut warnings = Vec::new();
    for r in infos {
        let id = r.recording_id;
        let value = match starting {
            PositionSpec::Earliest => EARLIEST,
            PositionSpec::Latest => LATEST,
            PositionSpec::ById(m) => m.get(&id).copied().unwrap_or(EARLIEST),
        };
        let start = match value {
            EARLIEST => r.start,
            LATEST => r.end,
            p => p,
        };
        let mut end = r.end;
        if !streaming {
            let value = match ending {
                PositionSpec::ById(m) => m.get(&id).copied().unwrap_or(LATEST),
                _ => LATEST,
            };
            if value >= 0 {
                if value > r.end {
                    return Err(PlanError::Option(format!(
                        "option endingPositions: position {value} of recording {id} is beyond what is recorded ({})",
                        r.end
                    )));
                }
                end = value;
            }
        }
        if start > r.end {
            return Err(PlanError::Option(format!(
                "option startingPositions: position {start} of recording {id} is beyond what is recorded ({})",
                r.end
            )));
        }
        let (start, warning) = check_data_loss(id, r.start, start, fail_on_data_loss, archive)?;
        warnings.extend(warning);
        if end < start {
            return Err(PlanError::Option(format!(
                "endingPositions: position {end} of recording {id} is before its starting position {start}"
            )));
        }
        starts.insert(id, start);
        ends.insert(id, end);
    }
    Ok(Positions {
        starts,
        ends,
        warnings,
    })
}

/// `start`, or the recording's start if the bytes between are gone
/// (purged, detached or truncated): data loss, an error with
/// `failOnDataLoss=true`, else skipped with the warning returned.
pub fn check_data_loss(
    recording_id: i64,
    recording_start: i64,
    start: i64,
    fail_on_data_loss: bool,
    archive: &str,
) -> Result<(i64, Option<String>), PlanError> {
    if start >= recording_start {
        return Ok((start, None));
    }
    let text = format!(
        "recording {recording_id}: positions {start} to {recording_start} are no longer in {archive} (purged, detached or truncated)"
    );
    if fail_on_data_loss {
        return Err(PlanError::DataLoss(format!(
            "{text}; failOnDataLoss=true (set it to false to skip them)"
        )));
    }
    Ok((
        recording_start,
        Some(format!("{text}; skipped (failOnDataLoss=false)")),
    ))
}

fn check_keys(
    spec: &PositionSpec,
    infos: &[RecordingInfo],
    option: &str,
    selection: &str,
) -> Result<(), PlanError> {
    let PositionSpec::ById(m) = spec else {
        return Ok(());
    };
    let mut read: Vec<i64> = infos.iter().map(|r| r.recording_id).collect();
    read.sort_unstable();
    for id in m.keys() {
        if !read.contains(id) {
            let listed = if read.is_empty() {
                "none".to_string()
            } else {
                format!(
                    "[{}]",
                    read.iter()
                        .map(i64::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            return Err(PlanError::Option(format!(
                "option {option}: recording {id} is not among the recordings read ({selection}: {listed})"
            )));
        }
    }
    Ok(())
}

/// `pieces - 1` cut positions strictly inside `(start, end)`: on term
/// boundaries when the pieces are at least a term long (then no replay
/// reads bytes it drops), else on 32-byte frame alignment.
pub fn split_points(start: i64, end: i64, pieces: i64, term_length: i32) -> Vec<i64> {
    let length = end - start;
    if pieces <= 1 || length < 64 {
        return Vec::new();
    }
    let step = length as f64 / pieces as f64;
    let grain = if step >= term_length as f64 {
        term_length as i64
    } else {
        32
    };
    let mut cuts: Vec<i64> = Vec::new();
    for k in 1..pieces {
        // Rounded half to even, as the first implementation (Python's
        // round) cut: a re-run of a batch must cut where its first run did.
        let mut c = start + (step * k as f64 / grain as f64).round_ties_even() as i64 * grain;
        c -= c.rem_euclid(grain);
        if start < c && c < end && cuts.last().is_none_or(|&last| c > last) {
            cuts.push(c);
        }
    }
    cuts
}

/// The non-empty ranges `(start, end]` per recording, cut so there are at
/// least `min_partitions` when the data allows, bigger recordings into
/// more pieces (Kafka's `minPartitions`).
pub fn plan_ranges(
    infos: &BTreeMap<i64, RecordingInfo>,
    starts: &BTreeMap<i64, i64>,
    ends: &BTreeMap<i64, i64>,
    min_partitions: i64,
) -> Result<Vec<RecordingRange>, String> {
    let mut spans = Vec::new();
    for (&id, &s) in starts {
        let e = *ends
            .get(&id)
            .ok_or_else(|| format!("recording {id} has a start but no end"))?;
        if e > s {
            spans.push((id, s, e));
        }
    }
    let total: i128 = spans.iter().map(|&(_, s, e)| (e - s) as i128).sum();
    let mut ranges = Vec::new();
    for &(id, s, e) in &spans {
        let r = infos
            .get(&id)
            .ok_or_else(|| format!("recording {id} is not among those listed"))?;
        let mut pieces = 1;
        if min_partitions > spans.len() as i64 && total > 0 {
            let wanted = ((e - s) as i128 * min_partitions as i128 + total - 1) / total;
            pieces = (wanted as i64).max(1);
        }
        let mut bounds = vec![s];
        bounds.extend(split_points(s, e, pieces, r.term_length));
        bounds.push(e);
        for w in bounds.windows(2) {
            let (a, b) = (w[0], w[1]);
            ranges.push(RecordingRange {
                recording_id: id,
                stream_id: r.stream_id,
                session_id: r.session_id,
                start: a,
                end: b,
                replay_from: replay_from(a, r.start, r.term_length),
                replay_to: b.max(r.end),
                recording_start: r.start,
                term_length: r.term_length,
                segment_length: r.segment_length,
                initial_term_id: r.initial_term_id,
            });
        }
    }
    Ok(ranges)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TERM: i32 = 64 * 1024;

    fn info(id: i64, start: i64, end: i64) -> RecordingInfo {
        RecordingInfo {
            recording_id: id,
            stream_id: 10,
            session_id: 7,
            start,
            end,
            term_length: TERM,
            segment_length: 4 * TERM,
            initial_term_id: 0,
            mtu_length: 1408,
            live: false,
            stop_timestamp: -1,
            recorded: -1,
        }
    }

    #[allow(clippy::type_complexity)]
    fn resolve(
        infos: &[RecordingInfo],
        starting: PositionSpec,
        ending: PositionSpec,
        fail: bool,
    ) -> Result<(BTreeMap<i64, i64>, BTreeMap<i64, i64>, Vec<String>), PlanError> {
        resolve_positions(
            infos,
            &starting,
            &ending,
            false,
            fail,
            "the archive",
            "stream 10",
        )
        .map(|p| (p.starts, p.ends, p.warnings))
    }

    #[test]
    fn a_replay_begins_at_the_term_boundary_at_or_before_the_start_never_before_the_recording() {
        assert_eq!(replay_from(3 * TERM as i64 + 96, 0, TERM), 3 * TERM as i64);
        assert_eq!(replay_from(3 * TERM as i64, 0, TERM), 3 * TERM as i64);
        assert_eq!(replay_from(160, 96, TERM), 96);
    }

    #[test]
    fn positions_come_from_the_options_and_are_checked_against_what_is_recorded() {
        let infos = [info(1, 0, 1000), info(2, 64, 512)];
        let (s, e, w) =
            resolve(&infos, PositionSpec::Earliest, PositionSpec::Latest, true).unwrap();
        assert_eq!((s[&1], e[&1], s[&2], e[&2]), (0, 1000, 64, 512));
        assert!(w.is_empty());
        let (s, _, _) = resolve(&infos, PositionSpec::Latest, PositionSpec::Latest, true).unwrap();
        assert_eq!((s[&1], s[&2]), (1000, 512));
        let by = |pairs: &[(i64, i64)]| PositionSpec::ById(pairs.iter().copied().collect());
        let (s, e, _) = resolve(&infos, by(&[(2, 128)]), by(&[(1, 320)]), true).unwrap();
        assert_eq!((s[&1], e[&1], s[&2], e[&2]), (0, 320, 128, 512));
        let err = |r: Result<_, PlanError>| match r {
            Err(PlanError::Option(t)) => t,
            other => panic!("{other:?}"),
        };
        let t = err(resolve(&infos, by(&[(3, 0)]), PositionSpec::Latest, true));
        assert_eq!(
            t,
            "option startingPositions: recording 3 is not among the recordings read (stream 10: [1, 2])"
        );
        let t = err(resolve(&[], PositionSpec::Earliest, by(&[(3, 0)]), true));
        assert!(t.ends_with("(stream 10: none)"), "{t}");
        let t = err(resolve(&infos, by(&[(2, 600)]), PositionSpec::Latest, true));
        assert!(
            t.contains("position 600 of recording 2 is beyond what is recorded (512)"),
            "{t}"
        );
        let t = err(resolve(
            &infos,
            PositionSpec::Earliest,
            by(&[(2, 600)]),
            true,
        ));
        assert!(t.starts_with("option endingPositions: position 600"), "{t}");
        let t = err(resolve(&infos, by(&[(2, 320)]), by(&[(2, 128)]), true));
        assert!(
            t.contains("128 of recording 2 is before its starting position 320"),
            "{t}"
        );
        // A streaming query has no end: endingPositions is not looked at.
        let streaming = resolve_positions(
            &infos,
            &PositionSpec::Earliest,
            &by(&[(9, 1)]),
            true,
            true,
            "the archive",
            "stream 10",
        );
        assert!(streaming.is_ok());
    }

    #[test]
    fn a_start_before_a_purged_recordings_start_is_data_loss_or_skipped_with_a_warning() {
        let infos = [info(2, 640, 1024)];
        let by = PositionSpec::ById([(2, 64)].into_iter().collect());
        match resolve(&infos, by.clone(), PositionSpec::Latest, true) {
            Err(PlanError::DataLoss(t)) => assert_eq!(
                t,
                "recording 2: positions 64 to 640 are no longer in the archive (purged, detached or truncated); failOnDataLoss=true (set it to false to skip them)"
            ),
            other => panic!("{other:?}"),
        }
        let (s, _, w) = resolve(&infos, by, PositionSpec::Latest, false).unwrap();
        assert_eq!(s[&2], 640);
        assert!(w[0].ends_with("skipped (failOnDataLoss=false)"), "{w:?}");
    }

    #[test]
    fn cuts_fall_on_terms_for_long_pieces_and_on_frames_for_short_ones() {
        let t = TERM as i64;
        assert_eq!(split_points(0, 4 * t, 4, TERM), vec![t, 2 * t, 3 * t]);
        assert_eq!(split_points(0, 1000, 3, TERM), vec![320, 672]);
        assert!(split_points(0, 63, 4, TERM).is_empty());
        assert!(split_points(0, 4 * t, 1, TERM).is_empty());
        // Rounded half to even: 2.5 grains rounds to 2, as the first implementation cut.
        assert_eq!(split_points(0, 160, 2, TERM), vec![64]);
    }

    #[test]
    fn ranges_cover_every_position_once_in_pieces_by_size() {
        let t = TERM as i64;
        let infos: BTreeMap<i64, RecordingInfo> = [(1, info(1, 0, 3 * t)), (2, info(2, 0, t))]
            .into_iter()
            .collect();
        let starts: BTreeMap<i64, i64> = [(1, 0), (2, 0)].into_iter().collect();
        let ends: BTreeMap<i64, i64> = [(1, 3 * t), (2, t)].into_iter().collect();
        let ranges = plan_ranges(&infos, &starts, &ends, 4).unwrap();
        let of = |id| {
            ranges
                .iter()
                .filter(|r| r.recording_id == id)
                .map(|r| (r.start, r.end))
                .collect::<Vec<_>>()
        };
        assert_eq!(of(1), vec![(0, t), (t, 2 * t), (2 * t, 3 * t)]);
        assert_eq!(of(2), vec![(0, t)]);
        assert!(ranges
            .iter()
            .all(|r| r.replay_from == r.start
                && r.replay_to == r.end.max(infos[&r.recording_id].end)));
        // An empty span yields no range; fewer partitions asked: one each.
        let ends: BTreeMap<i64, i64> = [(1, 3 * t), (2, 0)].into_iter().collect();
        let ranges = plan_ranges(&infos, &starts, &ends, 1).unwrap();
        assert_eq!(ranges.len(), 1);
        assert_eq!((ranges[0].start, ranges[0].end), (0, 3 * t));
    }
}
