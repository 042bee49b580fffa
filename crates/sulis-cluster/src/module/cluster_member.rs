//! The members of a cluster as Aeron's `cluster.members` names them, what
//! this member knows of each (the log it reported, its vote, when it was
//! last heard), and the quorum arithmetic an election and the leader's
//! commit position rest on.
//!
//! `cluster.members` is `id,ingress,consensus,log,catchup,archive[,archiveResponse[,egressResponse]]`
//! for every member, separated by `|`; endpoints are `host:port`.

use std::fmt;

use sulis_protocol::cluster::messages::NULL_POSITION;

/// Aeron's "none" for a term or id.
pub const NULL_VALUE: i64 = -1;

/// One member: its endpoints, and this node's view of its log and vote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterMember {
    /// Member id (unique in the cluster).
    pub id: i32,
    /// Where clients send ingress.
    pub ingress_endpoint: String,
    /// Where members send consensus messages.
    pub consensus_endpoint: String,
    /// Where the leader's log reaches it.
    pub log_endpoint: String,
    /// Where a catch-up replay reaches it (`:0`: a port chosen at run time).
    pub catchup_endpoint: String,
    /// Its archive's control endpoint.
    pub archive_endpoint: String,
    /// Its archive's response endpoint, if it names one.
    pub archive_response_endpoint: Option<String>,
    /// Its egress response endpoint, if it names one.
    pub egress_response_endpoint: Option<String>,

    /// Leadership term of the log it last reported.
    pub leadership_term_id: i64,
    /// Log position it last reported (−1: nothing heard).
    pub log_position: i64,
    /// When it last reported an append position (ns).
    pub time_of_last_append_position_ns: i64,
    /// Its last report came after it joined the log of the term it
    /// reported in (a follower's report before joining carries
    /// `APPEND_FLAG_NOT_JOINED`; canvass positions never count as joined).
    pub has_joined_log: bool,
    /// The candidate term its vote is for (−1: none).
    pub candidate_term_id: i64,
    /// Its vote in `candidate_term_id`: `None` not heard, `Some(yes)`.
    pub vote: Option<bool>,
    /// This candidate's RequestVote reached it.
    pub is_ballot_sent: bool,
}

/// What is wrong with a `cluster.members` value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MembersError(pub String);

impl fmt::Display for MembersError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for MembersError {}

impl ClusterMember {
    /// A member with these endpoints and nothing heard from it.
    pub fn new(id: i32, endpoints: [&str; 5]) -> ClusterMember {
        let [ingress, consensus, log, catchup, archive] = endpoints;
        ClusterMember {
            id,
            ingress_endpoint: ingress.into(),
            consensus_endpoint: consensus.into(),
            log_endpoint: log.into(),
            catchup_endpoint: catchup.into(),
            archive_endpoint: archive.into(),
            archive_response_endpoint: None,
            egress_response_endpoint: None,
            leadership_term_id: NULL_VALUE,
            log_position: NULL_POSITION,
            time_of_last_append_position_ns: 0,
            has_joined_log: false,
            candidate_term_id: NULL_VALUE,
            vote: None,
            is_ballot_sent: false,
        }
    }

    /// Parses `cluster.members`. Ids must be unique, endpoints `host:port`.
    pub fn parse(value: &str) -> Result<Vec<ClusterMember>, MembersError> {
        if value.trim().is_empty() {
            return Err(MembersError(
                "cluster members are empty: name every member as \
                 id,ingress,consensus,log,catchup,archive separated by |"
                    .into(),
            ));
        }
        let mut members: Vec<ClusterMember> = Vec::new();
        for part in value.split('|') {
            let fields: Vec<&str> = part.split(',').collect();
            if !(6..=8).contains(&fields.len()) {
                return Err(MembersError(format!(
                    "invalid member {part:?} in {value:?}: it has {} fields, not 6 to 8 \
                     (id,ingress,consensus,log,catchup,archive[,archiveResponse[,egressResponse]])",
                    fields.len()
                )));
            }
            let id: i32 = fields[0].trim().parse().map_err(|_| {
                MembersError(format!("invalid member id {:?} in {part:?}", fields[0]))
            })?;
            if id < 0 {
                return Err(MembersError(format!(
                    "member id {id} in {part:?} is negative"
                )));
            }
            let names = [
                "ingress",
                "consensus",
                "log",
                "catchup",
                "archive",
                "archiveResponse",
                "egressResponse",
            ];
            for (i, (name, endpoint)) in names.iter().zip(&fields[1..]).enumerate() {
                if i < 5 || !endpoint.is_empty() {
                    check_endpoint(name, endpoint, part)?;
                }
            }
            if members.iter().any(|m| m.id == id) {
                return Err(MembersError(format!(
                    "member id {id} appears twice in {value:?}"
                )));
            }
            let mut m =
                ClusterMember::new(id, [fields[1], fields[2], fields[3], fields[4], fields[5]]);
            m.archive_response_endpoint = fields
                .get(6)
                .filter(|s| !s.is_empty())
                .map(|s| s.to_string());
            m.egress_response_endpoint = fields
                .get(7)
                .filter(|s| !s.is_empty())
                .map(|s| s.to_string());
            members.push(m);
        }
        Ok(members)
    }

    /// Its endpoints as `cluster.members` names them after its id
    /// (`ingress,consensus,log,catchup,archive[,archiveResponse[,egressResponse]]`).
    pub fn endpoints(&self) -> String {
        let mut out = [
            &self.ingress_endpoint,
            &self.consensus_endpoint,
            &self.log_endpoint,
            &self.catchup_endpoint,
            &self.archive_endpoint,
        ]
        .map(String::as_str)
        .join(",");
        match (
            &self.archive_response_endpoint,
            &self.egress_response_endpoint,
        ) {
            (a, Some(e)) => out.push_str(&format!(",{},{e}", a.as_deref().unwrap_or(""))),
            (Some(a), None) => out.push_str(&format!(",{a}")),
            (None, None) => {}
        }
        out
    }

    /// Forgets what was heard from the member (a new canvass).
    pub fn reset(&mut self) {
        self.is_ballot_sent = false;
        self.vote = None;
        self.candidate_term_id = NULL_VALUE;
        self.leadership_term_id = NULL_VALUE;
        self.log_position = NULL_POSITION;
        self.has_joined_log = false;
    }

    /// It reported an append position within `timeout_ns` of `now_ns`.
    pub fn is_active(&self, now_ns: i64, timeout_ns: i64) -> bool {
        self.time_of_last_append_position_ns + timeout_ns > now_ns
    }

    /// It would vote for `candidate`: it has reported a log, and that log
    /// is no more up to date than the candidate's.
    pub fn will_vote_for(&self, candidate: &ClusterMember) -> bool {
        self.log_position != NULL_POSITION
            && compare_log(
                self.leadership_term_id,
                self.log_position,
                candidate.leadership_term_id,
                candidate.log_position,
            ) != std::cmp::Ordering::Greater
    }

    /// It is active and reported at least `position` in `leadership_term_id`.
    pub fn has_reached_position(
        &self,
        leadership_term_id: i64,
        position: i64,
        now_ns: i64,
        timeout_ns: i64,
    ) -> bool {
        self.is_active(now_ns, timeout_ns)
            && self.leadership_term_id == leadership_term_id
            && self.log_position >= position
    }

    /// Like [`has_reached_position`](Self::has_reached_position), and the
    /// position was reported after joining that term's log.
    pub fn has_joined_at_position(
        &self,
        leadership_term_id: i64,
        position: i64,
        now_ns: i64,
        timeout_ns: i64,
    ) -> bool {
        self.has_joined_log
            && self.has_reached_position(leadership_term_id, position, now_ns, timeout_ns)
    }
}

fn check_endpoint(name: &str, endpoint: &str, member: &str) -> Result<(), MembersError> {
    let bad = || {
        MembersError(format!(
            "invalid {name} endpoint {endpoint:?} in member {member:?}: it must be host:port"
        ))
    };
    let (host, port) = endpoint.rsplit_once(':').ok_or_else(bad)?;
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(bad());
    }
    Ok(())
}

/// Members needed for a quorum of `member_count`: a majority.
pub fn quorum_threshold(member_count: usize) -> usize {
    member_count / 2 + 1
}

/// Orders two logs by their last term, then their position.
pub fn compare_log(
    lhs_term: i64,
    lhs_position: i64,
    rhs_term: i64,
    rhs_position: i64,
) -> std::cmp::Ordering {
    (lhs_term, lhs_position).cmp(&(rhs_term, rhs_position))
}

/// Every member heard from (but a leader that closed gracefully) would vote
/// for `candidate`, and they are a quorum.
pub fn is_unanimous_candidate(
    members: &[ClusterMember],
    candidate: &ClusterMember,
    graceful_closed_leader_id: i32,
) -> bool {
    let mut possible = 0;
    for m in members.iter().filter(|m| m.id != graceful_closed_leader_id) {
        if !m.will_vote_for(candidate) {
            return false;
        }
        possible += 1;
    }
    possible >= quorum_threshold(members.len())
}

/// A quorum of members would vote for `candidate`.
pub fn is_quorum_candidate(members: &[ClusterMember], candidate: &ClusterMember) -> bool {
    members
        .iter()
        .filter(|m| m.will_vote_for(candidate))
        .count()
        >= quorum_threshold(members.len())
}

/// Every member (but a leader that closed gracefully) voted yes in
/// `candidate_term_id`, and they are a quorum.
pub fn is_unanimous_leader(
    members: &[ClusterMember],
    candidate_term_id: i64,
    graceful_closed_leader_id: i32,
) -> bool {
    let mut votes = 0;
    for m in members.iter().filter(|m| m.id != graceful_closed_leader_id) {
        if m.candidate_term_id != candidate_term_id || m.vote != Some(true) {
            return false;
        }
        votes += 1;
    }
    votes >= quorum_threshold(members.len())
}

/// A quorum voted yes in `candidate_term_id`.
///
/// Unlike Aeron's, one member's NO does not lose a ballot a majority won:
/// every member votes at most once per candidate term (the term is on disk
/// before the vote goes), so a majority of yes is a win Raft's safety
/// argument covers, and a lagging member's NO cannot stall an election
/// round after round.
pub fn is_quorum_leader(members: &[ClusterMember], candidate_term_id: i64) -> bool {
    members
        .iter()
        .filter(|m| m.candidate_term_id == candidate_term_id && m.vote == Some(true))
        .count()
        >= quorum_threshold(members.len())
}

/// A quorum is active, joined the log of `leadership_term_id` and reported
/// `position` or more in it (the leader's own entry counts as joined).
///
/// A leader appends its new term's first entry once this holds; a report a
/// follower sent before joining (the tail it holds, what it replicated)
/// does not count: appended then, the entry would pass that follower's
/// endpoint before it listens, and its image would join past the log
/// position (three members on real drivers showed it).
pub fn has_quorum_at_position(
    members: &[ClusterMember],
    leadership_term_id: i64,
    position: i64,
    now_ns: i64,
    timeout_ns: i64,
) -> bool {
    members
        .iter()
        .filter(|m| m.has_joined_at_position(leadership_term_id, position, now_ns, timeout_ns))
        .count()
        >= quorum_threshold(members.len())
}

/// The highest position a quorum of active members has reported in one of
/// `terms` (0 when fewer than a quorum are active there).
///
/// A position counts only with the term it was reported in: members whose
/// logs end in the same term hold the same entries up to the shorter of
/// them, but a log ending in an older term may hold, at the same positions,
/// entries the leader does not have. Aeron counts every reported position,
/// so a member rejoining with a long log of an older term (reported in its
/// CanvassPosition) raises the leader's commit position over entries no
/// quorum holds; a simulation found committed entries lost so.
pub fn quorum_position(
    members: &[ClusterMember],
    terms: &[i64],
    now_ns: i64,
    timeout_ns: i64,
) -> i64 {
    let mut positions: Vec<i64> = members
        .iter()
        .filter(|m| m.is_active(now_ns, timeout_ns) && terms.contains(&m.leadership_term_id))
        .map(|m| m.log_position.max(0))
        .collect();
    let q = quorum_threshold(members.len());
    if positions.len() < q {
        return 0;
    }
    positions.sort_unstable_by(|a, b| b.cmp(a));
    positions[q - 1]
}

/// Marks `candidate_member_id` as having voted for itself in
/// `candidate_term_id` and clears every other member's vote.
pub fn become_candidate(
    members: &mut [ClusterMember],
    candidate_term_id: i64,
    candidate_member_id: i32,
) {
    for m in members.iter_mut() {
        if m.id == candidate_member_id {
            m.vote = Some(true);
            m.candidate_term_id = candidate_term_id;
            m.is_ballot_sent = true;
        } else {
            m.vote = None;
            m.candidate_term_id = NULL_VALUE;
            m.is_ballot_sent = false;
        }
    }
}

/// The client-facing list of ingress endpoints, `id=endpoint,...`, as
/// REDIRECT details and NewLeaderEvent carry it.
pub fn ingress_endpoints(members: &[ClusterMember]) -> String {
    members
        .iter()
        .map(|m| format!("{}={}", m.id, m.ingress_endpoint))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cmp::Ordering;

    const THREE: &str = "0,h0:9002,h0:9003,h0:9004,h0:0,h0:8010|\
                         1,h1:9002,h1:9003,h1:9004,h1:0,h1:8010|\
                         2,h2:9002,h2:9003,h2:9004,h2:0,h2:8010,h2:8011";

    fn members(logs: &[(i64, i64)]) -> Vec<ClusterMember> {
        logs.iter()
            .enumerate()
            .map(|(i, &(term, pos))| {
                let mut m = ClusterMember::new(i as i32, ["a:1"; 5]);
                m.leadership_term_id = term;
                m.log_position = pos;
                m
            })
            .collect()
    }

    #[test]
    fn parses_aerons_members_string() {
        let m = ClusterMember::parse(THREE).unwrap();
        assert_eq!(m.iter().map(|m| m.id).collect::<Vec<_>>(), vec![0, 1, 2]);
        assert_eq!(m[1].consensus_endpoint, "h1:9003");
        assert_eq!(m[2].archive_response_endpoint.as_deref(), Some("h2:8011"));
        assert_eq!(m[0].archive_response_endpoint, None);
        assert_eq!(ingress_endpoints(&m), "0=h0:9002,1=h1:9002,2=h2:9002");
        // Each member's endpoints read back as the string named them.
        let again: Vec<String> = m
            .iter()
            .map(|m| format!("{},{}", m.id, m.endpoints()))
            .collect();
        assert_eq!(again.join("|"), THREE);
    }

    #[test]
    fn a_bad_members_string_names_what_is_wrong() {
        for (value, says) in [
            ("", "empty"),
            ("0,a:1,a:2,a:3,a:4", "5 fields"),
            ("x,a:1,a:2,a:3,a:4,a:5", "member id \"x\""),
            (
                "0,a:1,a:2,a:3,a:4,a:5|0,b:1,b:2,b:3,b:4,b:5",
                "appears twice",
            ),
            ("0,a:1,a2,a:3,a:4,a:5", "consensus endpoint \"a2\""),
            ("0,a:1,a:2,a:3,a:4,a:99999", "archive endpoint"),
        ] {
            let e = ClusterMember::parse(value).unwrap_err();
            assert!(e.0.contains(says), "{value:?}: {e}");
        }
    }

    #[test]
    fn logs_order_by_term_then_position() {
        assert_eq!(compare_log(2, 0, 1, 1_000), Ordering::Greater);
        assert_eq!(compare_log(1, 64, 1, 128), Ordering::Less);
        assert_eq!(compare_log(1, 64, 1, 64), Ordering::Equal);
    }

    #[test]
    fn candidacy_needs_the_most_up_to_date_log_among_a_quorum() {
        let m = members(&[(1, 640), (1, 320), (0, 960)]);
        assert!(is_unanimous_candidate(&m, &m[0], -1));
        assert!(!is_unanimous_candidate(&m, &m[1], -1));
        assert!(is_quorum_candidate(&m, &m[1])); // 1 and 2 would vote for it
        assert!(!is_quorum_candidate(&m, &m[2])); // only itself
        let mut unheard = members(&[(1, 640), (1, 320), (0, 960)]);
        unheard[2].log_position = NULL_POSITION;
        assert!(!is_unanimous_candidate(&unheard, &unheard[0], -1));
        assert!(is_unanimous_candidate(&unheard, &unheard[0], 2)); // the closed leader is not waited for
    }

    #[test]
    fn a_majority_of_yes_wins_even_with_a_no() {
        let mut m = members(&[(1, 0), (1, 0), (1, 0)]);
        become_candidate(&mut m, 5, 0);
        assert!(!is_quorum_leader(&m, 5));
        m[1].candidate_term_id = 5;
        m[1].vote = Some(true);
        m[2].candidate_term_id = 5;
        m[2].vote = Some(false);
        assert!(is_quorum_leader(&m, 5));
        assert!(!is_unanimous_leader(&m, 5, -1));
        assert!(is_unanimous_leader(&m, 5, 2));
        assert!(!is_quorum_leader(&m, 6));
    }

    #[test]
    fn the_quorum_position_is_the_quorum_th_highest_of_active_members() {
        let mut m = members(&[(1, 900), (1, 500), (1, 700), (1, 100), (1, 800)]);
        for x in m.iter_mut() {
            x.time_of_last_append_position_ns = 1_000;
        }
        assert_eq!(quorum_position(&m, &[1], 1_500, 1_000), 700);
        m[0].time_of_last_append_position_ns = 0; // 900 went silent
        assert_eq!(quorum_position(&m, &[1], 1_500, 1_000), 500);
        m[1].leadership_term_id = 0; // 500 was reported for an older term's log: it does not count
        assert_eq!(quorum_position(&m, &[1], 1_500, 1_000), 100);
        assert_eq!(quorum_position(&m, &[0, 1], 1_500, 1_000), 500);
        m[4].time_of_last_append_position_ns = 0;
        m[2].time_of_last_append_position_ns = 0; // two left of five: no quorum
        assert_eq!(quorum_position(&m, &[0, 1], 1_500, 1_000), 0);
        assert!(!has_quorum_at_position(&m, 1, 100, 1_500, 1_000));
    }

    #[test]
    fn only_reports_made_after_joining_the_log_count_as_at_position() {
        let mut m = members(&[(1, 500), (1, 500), (1, 500)]);
        for x in m.iter_mut() {
            x.time_of_last_append_position_ns = 1_000;
        }
        m[0].has_joined_log = true; // the leader
        assert!(!has_quorum_at_position(&m, 1, 500, 1_500, 1_000));
        m[2].has_joined_log = true;
        assert!(has_quorum_at_position(&m, 1, 500, 1_500, 1_000));
        assert!(!has_quorum_at_position(&m, 1, 501, 1_500, 1_000));
    }
}
