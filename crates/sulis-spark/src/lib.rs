//! The rules of `format("sulis")`, Spark's source over sulis recordings,
//! kept once for both of its implementations: the Python data source
//! (`python/sulis/spark/`, through `sulis._native`) and the JVM one.
//!
//! - [`source_offset`]: a streaming query's offset and its JSON text, which
//!   Spark keeps in the checkpoint and compares as text: both
//!   implementations write the same text for the same offset, so a query
//!   can move between them on one checkpoint.
//! - [`reader_options`], [`writer_options`]: the options, checked once
//!   when a query starts, every failure naming the option.
//! - [`range_planner`]: which positions of which recordings a query reads
//!   (`startingPositions`, `endingPositions`, data loss at a purged start)
//!   and how the ranges are cut into partitions (`minPartitions`).
//!
//! - [`stream_planner`]: the driver side of a query, batch or streaming,
//!   against a [`RecordingCatalog`]: [`ArchiveCatalog`] is a running
//!   archive's (and a cluster member's), tests use one of their own.
//! - [`partition_reader`]: the executor side, a planned range read as
//!   whole messages ([`message_assembler`]) from the segment files where
//!   they are readable here ([`archive_files`]), else replayed
//!   ([`range_replay`]).
//! - [`row_shape`]: which messages are rows and their columns
//!   ([`value_layout`] for `valueSchema`, a cluster log's session
//!   messages), written as Arrow columns for Python ([`arrow_columns`]) or
//!   Spark's `UnsafeRow`s for the JVM ([`unsafe_row`]).
//! - [`retention_hold`]: what a streaming query still has to read, kept
//!   from the archive's retention.
//! - [`sink_publisher`]: a sink task's writer, at least once or, through
//!   [`exactly_once_target`] and the [`sink_journal`], exactly once; both
//!   publish through [`sink_publications`].

pub mod archive_address;
pub mod archive_catalog;
pub mod archive_files;
pub mod archive_session;
pub mod arrow_columns;
pub mod close_match;
pub mod column_type;
pub mod commit_limit;
pub mod exactly_once_target;
pub mod interrupt;
pub mod journal_entry;
pub mod message_assembler;
pub mod option_values;
pub mod partition_reader;
pub mod range_planner;
pub mod range_replay;
pub mod reader_options;
pub mod recording_catalog;
pub mod recording_info;
pub mod retention_hold;
pub mod row_shape;
pub mod sink_archive;
pub mod sink_checksum;
pub mod sink_columns;
pub mod sink_journal;
pub mod sink_publications;
pub mod sink_publisher;
pub mod source_offset;
pub mod stream_planner;
pub mod unsafe_row;
pub mod value_layout;
pub mod writer_options;

pub use archive_address::ArchiveAddress;
pub use archive_catalog::ArchiveCatalog;
pub use archive_session::ArchiveSession;
pub use option_values::OptionMap;
pub use range_planner::{PlanError, PositionSpec, Positions, RecordingRange};
pub use reader_options::ReaderOptions;
pub use recording_catalog::RecordingCatalog;
pub use recording_info::RecordingInfo;
pub use row_shape::{RangeIds, RowError, RowShape};
pub use source_offset::{Finished, SourceOffset};
pub use stream_planner::{LogLine, ReadLimit, StreamPlanner};
pub use writer_options::WriterOptions;
