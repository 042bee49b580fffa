//! `node-state.dat`: the highest candidate term this member stood in or
//! voted for (Raft's `currentTerm`), durable before it is used, so that a
//! member never votes twice in a term however often it restarts (Aeron's
//! `NodeStateFile`).
//!
//! The layout is Aeron's (node-state schema 112): frames of a 16-byte
//! header `{blockLength:u16, templateId:u16, schemaId:u16, version:u16,
//! frameLength:i32, padding:i32}` and a block, each at an 8-byte boundary:
//! NodeStateHeader (300) `{version:i32, padding:i32}` at 0, CandidateTerm
//! (301) `{candidateTermId:i64, timestamp:i64, logPosition:i64}` at 24 and
//! a NodeStateFooter (304) at 64, in a file of 1 MiB. A member changes the
//! candidate term in place and syncs the file (`fdatasync`) before the
//! election may act on it.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The file's name in the cluster directory.
pub const FILE_NAME: &str = "node-state.dat";
/// Aeron's schema id of the node-state codecs.
pub const SCHEMA_ID: u16 = 112;
/// The schema version written.
pub const SCHEMA_VERSION: u16 = 10;
/// The file's version (the cluster mark file's semantic version, 0.3.0).
pub const FILE_VERSION: i32 = 3 << 8;
/// The length Aeron gives the file.
pub const FILE_LENGTH: u64 = 1 << 20;

const HEADER_LENGTH: usize = 16;
const NODE_STATE_HEADER: u16 = 300;
const CANDIDATE_TERM: u16 = 301;
const FOOTER: u16 = 304;
const CANDIDATE_TERM_OFFSET: usize = 24;
const CANDIDATE_TERM_BLOCK: usize = 24;
const FOOTER_OFFSET: usize = 64;

/// The candidate term as the file holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CandidateTerm {
    /// The highest term stood in or voted for (−1: none yet).
    pub candidate_term_id: i64,
    /// When it was written (cluster time, ms).
    pub timestamp: i64,
    /// The member's log position then.
    pub log_position: i64,
}

/// The open file.
pub struct NodeStateFile {
    file: File,
    path: PathBuf,
    candidate: CandidateTerm,
}

fn frame_header(out: &mut [u8], block_length: usize, template_id: u16) {
    out[0..2].copy_from_slice(&(block_length as u16).to_le_bytes());
    out[2..4].copy_from_slice(&template_id.to_le_bytes());
    out[4..6].copy_from_slice(&SCHEMA_ID.to_le_bytes());
    out[6..8].copy_from_slice(&SCHEMA_VERSION.to_le_bytes());
    out[8..12].copy_from_slice(&((HEADER_LENGTH + block_length) as i32).to_le_bytes());
    out[12..16].fill(0);
}

fn i64_at(b: &[u8], at: usize) -> i64 {
    i64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().unwrap())
}

impl NodeStateFile {
    /// Opens `dir/node-state.dat`, creating it (candidate term −1) if it is
    /// not there. A file that is not a node-state file of this schema is an
    /// error naming it; it is never overwritten.
    pub fn open(dir: &Path) -> Result<NodeStateFile, String> {
        let path = dir.join(FILE_NAME);
        let what = |e: std::io::Error| format!("{}: {e}", path.display());
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(what)?;
        // New, or made by a member that died before it wrote the first
        // frames (nothing was ever voted on with it): written afresh.
        let mut head = vec![0u8; FOOTER_OFFSET + HEADER_LENGTH];
        let length = file.metadata().map_err(what)?.len();
        let unwritten = length == 0
            || (length >= head.len() as u64
                && file.read_exact_at(&mut head, 0).is_ok()
                && head.iter().all(|&b| b == 0));
        if unwritten {
            let candidate = CandidateTerm {
                candidate_term_id: -1,
                timestamp: 0,
                log_position: 0,
            };
            let mut image = vec![0u8; FOOTER_OFFSET + HEADER_LENGTH];
            frame_header(&mut image[0..], 8, NODE_STATE_HEADER);
            image[16..20].copy_from_slice(&FILE_VERSION.to_le_bytes());
            frame_header(
                &mut image[CANDIDATE_TERM_OFFSET..],
                CANDIDATE_TERM_BLOCK,
                CANDIDATE_TERM,
            );
            Self::put_candidate(&mut image, &candidate);
            frame_header(&mut image[FOOTER_OFFSET..], 0, FOOTER);
            file.set_len(FILE_LENGTH).map_err(what)?;
            file.write_all_at(&image, 0).map_err(what)?;
            file.sync_all().map_err(what)?;
            if let Some(parent) = path.parent() {
                // The new name is durable too.
                let _ = sulis_concurrent::mapped_file::sync_dir(parent);
            }
            return Ok(NodeStateFile {
                file,
                path,
                candidate,
            });
        }
        let mut image = vec![0u8; FOOTER_OFFSET + HEADER_LENGTH];
        file.read_exact_at(&mut image, 0)
            .map_err(|e| format!("{}: too short for a node-state file ({e})", path.display()))?;
        let bad = |why: String| format!("{}: not a node-state file: {why}", path.display());
        for (at, template) in [
            (0, NODE_STATE_HEADER),
            (CANDIDATE_TERM_OFFSET, CANDIDATE_TERM),
            (FOOTER_OFFSET, FOOTER),
        ] {
            let schema = u16_at(&image, at + 4);
            let found = u16_at(&image, at + 2);
            if schema != SCHEMA_ID || found != template {
                return Err(bad(format!(
                    "at offset {at} template {found} of schema {schema}, expected {template} of schema {SCHEMA_ID}"
                )));
            }
        }
        let block = u16_at(&image, CANDIDATE_TERM_OFFSET) as usize;
        if block < CANDIDATE_TERM_BLOCK {
            return Err(bad(format!("a candidate term block of {block} bytes")));
        }
        let body = CANDIDATE_TERM_OFFSET + HEADER_LENGTH;
        let candidate = CandidateTerm {
            candidate_term_id: i64_at(&image, body),
            timestamp: i64_at(&image, body + 8),
            log_position: i64_at(&image, body + 16),
        };
        Ok(NodeStateFile {
            file,
            path,
            candidate,
        })
    }

    fn put_candidate(image: &mut [u8], c: &CandidateTerm) {
        let body = CANDIDATE_TERM_OFFSET + HEADER_LENGTH;
        image[body..body + 8].copy_from_slice(&c.candidate_term_id.to_le_bytes());
        image[body + 8..body + 16].copy_from_slice(&c.timestamp.to_le_bytes());
        image[body + 16..body + 24].copy_from_slice(&c.log_position.to_le_bytes());
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The candidate term on disk.
    pub fn candidate_term(&self) -> CandidateTerm {
        self.candidate
    }

    /// The candidate term id on disk (−1: none yet).
    pub fn candidate_term_id(&self) -> i64 {
        self.candidate.candidate_term_id
    }

    /// Writes `candidate_term_id` if it is higher than the one on disk and
    /// syncs it before returning; returns the id on disk after (the higher
    /// of the two). A write that fails is an error: the member must not
    /// vote or stand on a term it could forget.
    pub fn propose_max_candidate_term_id(
        &mut self,
        candidate_term_id: i64,
        log_position: i64,
        timestamp: i64,
    ) -> Result<i64, String> {
        if candidate_term_id <= self.candidate.candidate_term_id {
            return Ok(self.candidate.candidate_term_id);
        }
        let next = CandidateTerm {
            candidate_term_id,
            timestamp,
            log_position,
        };
        let mut block = [0u8; CANDIDATE_TERM_OFFSET + HEADER_LENGTH + CANDIDATE_TERM_BLOCK];
        Self::put_candidate(&mut block, &next);
        let body = CANDIDATE_TERM_OFFSET + HEADER_LENGTH;
        let what = |e: std::io::Error| format!("{}: {e}", self.path.display());
        self.file
            .write_all_at(&block[body..], body as u64)
            .map_err(what)?;
        self.file.sync_data().map_err(what)?;
        self.candidate = next;
        Ok(candidate_term_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("sulis-node-state-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_new_file_has_no_candidate_term_and_aerons_layout() {
        let d = dir("new");
        let f = NodeStateFile::open(&d).unwrap();
        assert_eq!(f.candidate_term_id(), -1);
        let bytes = std::fs::read(d.join(FILE_NAME)).unwrap();
        assert_eq!(bytes.len() as u64, FILE_LENGTH);
        // Header frame: block 8, template 300, schema 112, version 10, frame length 24.
        assert_eq!(&bytes[0..12], &[8, 0, 44, 1, 112, 0, 10, 0, 24, 0, 0, 0]);
        assert_eq!(
            i32::from_le_bytes(bytes[16..20].try_into().unwrap()),
            FILE_VERSION
        );
        // Candidate term frame at 24: block 24, template 301, frame length 40; id −1.
        assert_eq!(&bytes[24..36], &[24, 0, 45, 1, 112, 0, 10, 0, 40, 0, 0, 0]);
        assert_eq!(i64_at(&bytes, 40), -1);
        // Footer at 64 (24 + 40): template 304, frame length 16.
        assert_eq!(&bytes[64..76], &[0, 0, 48, 1, 112, 0, 10, 0, 16, 0, 0, 0]);
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn the_candidate_term_only_rises_and_survives_reopening() {
        let d = dir("rises");
        let mut f = NodeStateFile::open(&d).unwrap();
        assert_eq!(f.propose_max_candidate_term_id(3, 640, 17).unwrap(), 3);
        assert_eq!(f.propose_max_candidate_term_id(2, 700, 18).unwrap(), 3);
        assert_eq!(f.propose_max_candidate_term_id(3, 800, 19).unwrap(), 3);
        drop(f);
        let mut f = NodeStateFile::open(&d).unwrap();
        assert_eq!(
            f.candidate_term(),
            CandidateTerm {
                candidate_term_id: 3,
                timestamp: 17,
                log_position: 640
            }
        );
        assert_eq!(f.propose_max_candidate_term_id(5, 900, 20).unwrap(), 5);
        drop(f);
        assert_eq!(NodeStateFile::open(&d).unwrap().candidate_term_id(), 5);
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn a_file_whose_creation_was_cut_short_is_written_afresh() {
        let d = dir("cut-short");
        let path = d.join(FILE_NAME);
        std::fs::write(&path, vec![0u8; FILE_LENGTH as usize]).unwrap();
        let mut f = NodeStateFile::open(&d).unwrap();
        assert_eq!(f.candidate_term_id(), -1);
        assert_eq!(f.propose_max_candidate_term_id(1, 0, 0).unwrap(), 1);
        drop(f);
        assert_eq!(NodeStateFile::open(&d).unwrap().candidate_term_id(), 1);
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn a_file_that_is_not_a_node_state_file_is_refused_and_left_alone() {
        let d = dir("foreign");
        let path = d.join(FILE_NAME);
        std::fs::write(&path, vec![7u8; 4096]).unwrap();
        let e = NodeStateFile::open(&d).err().unwrap();
        assert!(
            e.contains("not a node-state file") && e.contains(FILE_NAME),
            "{e}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), vec![7u8; 4096]);
        std::fs::write(&path, [1u8, 2, 3]).unwrap();
        let e = NodeStateFile::open(&d).err().unwrap();
        assert!(e.contains("too short"), "{e}");
        std::fs::remove_dir_all(d).unwrap();
    }
}
