//! `cluster-mark.dat` and `cluster-mark-service-<id>.dat`: a cluster
//! component's mark file, laid out as Aeron's (`ClusterMarkFile`, mark-file
//! schema 110, template 200), so Aeron's ClusterTool can `describe`, `pid`,
//! `errors` and `list-members` a sulis member's directory.
//!
//! ```text
//! 0       8                         136                            8192
//! +-------+-------------------------+------------------------------+--------------------+
//! | SBE   | MarkFileHeader block    | var strings (aeron directory,| error log (Aeron's |
//! | header| (128 bytes, below)      | control, ingress, service    | distinct error log)|
//! |       |                         | name, authenticator, ...)    | to the end         |
//! +-------+-------------------------+------------------------------+--------------------+
//! ```
//!
//! `version` is written last: 0.3.0 once the component has started, −1 when
//! its start failed (the error log says why). The activity timestamp moves
//! every second while the component runs.

/// The consensus module's file name inside the cluster directory.
pub const MARK_FILE: &str = "cluster-mark.dat";
/// A service's file is this, its id, then [`FILE_EXTENSION`].
pub const SERVICE_FILE_PREFIX: &str = "cluster-mark-service-";
/// Mark files end in this.
pub const FILE_EXTENSION: &str = ".dat";
/// Bytes before the error log.
pub const HEADER_LENGTH: usize = 8192;
/// Default and least error log length (Aeron's: 1 MiB).
pub const DEFAULT_ERROR_BUFFER_LENGTH: usize = 1024 * 1024;
/// Mark file schema id.
pub const SCHEMA_ID: u16 = 110;
/// Mark file schema version (the one with `services_cluster_dir`).
pub const SCHEMA_VERSION: u16 = 2;
/// The mark file's semantic version (Aeron's 0.3.0).
pub const MARK_FILE_VERSION: i32 = crate::sbe::semantic_version(0, 3, 0);
/// The version of a component whose start failed.
pub const VERSION_FAILED: i32 = -1;

/// `component_type`: which component writes the file.
pub mod component_type {
    /// The consensus module.
    pub const CONSENSUS_MODULE: i32 = 1;
    /// A clustered service's container.
    pub const CONTAINER: i32 = 2;
    /// A cluster backup.
    pub const BACKUP: i32 = 3;
}

/// The name of service `service_id`'s mark file.
pub fn service_file_name(service_id: i32) -> String {
    format!("{SERVICE_FILE_PREFIX}{service_id}{FILE_EXTENSION}")
}

crate::sbe_messages! {
    schema SCHEMA_ID, version SCHEMA_VERSION;

    /// The mark file's header.
    MarkFileHeader = 200, block 128 {
        version: i32 @0,
        component_type: i32 @4,
        activity_timestamp: i64 @8,
        start_timestamp: i64 @16,
        pid: i64 @24,
        candidate_term_id: i64 @32,
        archive_stream_id: i32 @40,
        service_stream_id: i32 @44,
        consensus_module_stream_id: i32 @48,
        ingress_stream_id: i32 @52,
        member_id: i32 @56,
        service_id: i32 @60,
        header_length: i32 @64,
        error_buffer_length: i32 @68,
        cluster_id: i32 @72,
    } var {
        aeron_directory: ascii,
        control_channel: ascii,
        ingress_channel: ascii,
        service_name: ascii,
        authenticator: ascii,
        services_cluster_dir: ascii since 1,
    }
}

/// File offset of the version field (the SBE header, then the block).
pub const VERSION_OFFSET: usize = 8;
/// File offset of the activity timestamp.
pub const ACTIVITY_TIMESTAMP_OFFSET: usize = 8 + 8;
/// File offset of the member id (a service learns it when it joins the log).
pub const MEMBER_ID_OFFSET: usize = 8 + 56;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn should_lay_the_header_out_as_aerons_cluster_mark_file() {
        let h = MarkFileHeader {
            version: MARK_FILE_VERSION,
            component_type: component_type::CONSENSUS_MODULE,
            activity_timestamp: 5,
            pid: 42,
            member_id: 2,
            service_id: -1,
            header_length: HEADER_LENGTH as i32,
            cluster_id: 7,
            aeron_directory: "/dev/shm/x".into(),
            control_channel: "aeron:ipc".into(),
            ..Default::default()
        };
        let b = h.encode();
        // blockLength 128, templateId 200, schemaId 110, version 2.
        assert_eq!(&b[..8], &[128, 0, 200, 0, 110, 0, 2, 0]);
        assert_eq!(
            &b[VERSION_OFFSET..VERSION_OFFSET + 4],
            &0x300i32.to_le_bytes()
        );
        assert_eq!(&b[8 + 4..8 + 8], &1i32.to_le_bytes());
        assert_eq!(
            &b[ACTIVITY_TIMESTAMP_OFFSET..ACTIVITY_TIMESTAMP_OFFSET + 8],
            &5i64.to_le_bytes()
        );
        assert_eq!(
            &b[MEMBER_ID_OFFSET..MEMBER_ID_OFFSET + 4],
            &2i32.to_le_bytes()
        );
        assert_eq!(&b[8 + 72..8 + 76], &7i32.to_le_bytes());
        // The first var field starts right after the block.
        assert_eq!(&b[136..140], &10u32.to_le_bytes());
        assert_eq!(&b[140..150], b"/dev/shm/x");
        assert_eq!(MarkFileHeader::decode(&b).unwrap(), h);
        assert_eq!(service_file_name(0), "cluster-mark-service-0.dat");
    }
}
