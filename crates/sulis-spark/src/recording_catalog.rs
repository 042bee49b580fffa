//! What the planner asks of the archive (and of a cluster member's
//! directory): the recordings a query selects and where they end now.

use crate::{PlanError, RecordingInfo};

/// The archive as planning sees it. Failures to reach it are
/// [`PlanError::Archive`] (the planner names the archive and what it was
/// doing); a selection that cannot be read is [`PlanError::Option`].
pub trait RecordingCatalog {
    /// Every selected recording with its current positions, by recording
    /// id. Selected by id, every one must exist; with `missing` given, the
    /// ids the archive does not know go there instead (a streaming query
    /// decides whether that is data loss). `require_commit`: a cluster log
    /// with no commit position known is an error (a batch read), else
    /// nothing of it is readable yet.
    fn list_selected(
        &mut self,
        missing: Option<&mut Vec<i64>>,
        require_commit: bool,
    ) -> Result<Vec<RecordingInfo>, PlanError>;

    /// The recording as the query may read it now, None if the archive
    /// does not know it.
    fn describe(&mut self, recording_id: i64) -> Result<Option<RecordingInfo>, PlanError>;

    /// A live recording's state now: its recorded position (a cluster
    /// log's cut to the commit position), or its description once it
    /// stopped (`r` itself if it is gone: the next listing says so).
    fn position_now(&mut self, r: &RecordingInfo) -> Result<RecordingInfo, PlanError>;

    /// The messages of `r` that end in `(r.start, end]`: how many, and
    /// where the last ends (for the bytes per message of row limits).
    fn sample(&mut self, r: &RecordingInfo, end: i64) -> Result<(u64, i64), PlanError>;

    /// The archive's id.
    fn archive_id(&mut self) -> Result<i64, PlanError>;

    /// Forgets the archive session after a failure (the next call
    /// reconnects: the archive may have been restarted).
    fn reset(&mut self);
}
