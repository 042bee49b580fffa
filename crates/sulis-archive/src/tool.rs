//! Offline inspection of an archive directory (what `sulis archive-tool`
//! does): the catalog's entries with their states, and a check that every
//! recording's segment files hold whole, consistent frames up to its stop
//! position.

use crate::catalog::Catalog;
use crate::segment::{Geometry, SegmentReader};
use std::path::Path;
use sulis_protocol::archive::catalog::CatalogEntry;
use sulis_protocol::archive::messages::{recording_state, NULL_VALUE};

/// The catalog's entries (every state) and what could not be read.
pub fn describe(dir: &Path) -> Result<(Vec<CatalogEntry>, Vec<String>), String> {
    if !dir
        .join(sulis_protocol::archive::catalog::CATALOG_FILE)
        .exists()
    {
        return Err(format!("{} holds no archive.catalog", dir.display()));
    }
    let catalog = Catalog::open(dir, 4096, 0).map_err(|e| e.to_string())?;
    Ok((catalog.entries(), catalog.problems().to_vec()))
}

/// One recording's verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Recording id.
    pub recording_id: i64,
    /// Everything from the start to the stop position reads as whole frames.
    pub ok: bool,
    /// What was found.
    pub message: String,
}

/// Reads every VALID recording's frames from its start to its stop
/// position (an active or unfinished one: as far as its files go).
pub fn verify(dir: &Path) -> Result<Vec<Verdict>, String> {
    let (entries, problems) = describe(dir)?;
    let mut out: Vec<Verdict> = problems
        .into_iter()
        .map(|p| Verdict {
            recording_id: NULL_VALUE,
            ok: false,
            message: p,
        })
        .collect();
    let mut buf = vec![0u8; 1 << 20];
    for e in entries {
        let d = e.descriptor;
        if e.state != recording_state::VALID {
            continue;
        }
        let g = Geometry {
            recording_id: d.recording_id,
            start_position: d.start_position,
            term_length: d.term_buffer_length as i64,
            segment_length: d.segment_file_length as i64,
            initial_term_id: d.initial_term_id,
        };
        if g.term_length <= 0
            || !(g.term_length as u64).is_power_of_two()
            || g.segment_length < g.term_length
        {
            out.push(Verdict {
                recording_id: d.recording_id,
                ok: false,
                message: format!(
                    "term length {} / segment length {} are not a valid geometry",
                    d.term_buffer_length, d.segment_file_length
                ),
            });
            continue;
        }
        if buf.len() < g.term_length as usize {
            buf.resize(g.term_length as usize, 0);
        }
        let end = if d.stop_position == NULL_VALUE {
            i64::MAX
        } else {
            d.stop_position
        };
        let mut reader = SegmentReader::new(dir, g, d.start_position);
        let verdict = loop {
            if reader.position() >= end {
                break Verdict {
                    recording_id: d.recording_id,
                    ok: true,
                    message: format!(
                        "OK: {} bytes from {} to {end}",
                        end - d.start_position,
                        d.start_position
                    ),
                };
            }
            match reader.read(&mut buf, end) {
                Ok(0) if end == i64::MAX => {
                    break Verdict {
                        recording_id: d.recording_id,
                        ok: true,
                        message: format!("OK (not stopped): frames up to {}", reader.position()),
                    }
                }
                Ok(0) => {
                    break Verdict {
                        recording_id: d.recording_id,
                        ok: false,
                        message: format!(
                            "frames end at {} before the stop position {end}",
                            reader.position()
                        ),
                    }
                }
                Ok(_) => {}
                Err(err) if end == i64::MAX => {
                    break Verdict {
                        recording_id: d.recording_id,
                        ok: true,
                        message: format!(
                            "OK (not stopped): frames up to {} ({err})",
                            reader.position()
                        ),
                    }
                }
                Err(err) => {
                    break Verdict {
                        recording_id: d.recording_id,
                        ok: false,
                        message: err.to_string(),
                    }
                }
            }
        };
        out.push(verdict);
    }
    Ok(out)
}
