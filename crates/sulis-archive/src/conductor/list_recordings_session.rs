//! Listings of the catalog (Aeron's `ListRecordingsSession`,
//! `ListRecordingsForUriSession` and `ListRecordingSubscriptionsSession`).
//!
//! A listing is sent a few descriptors per duty cycle, and only while its
//! control session has sent what it queued before: a client listing a
//! catalog of millions of recordings neither stalls the archive's duty
//! cycle nor makes it hold every descriptor in memory at once. It ends with
//! RECORDING_UNKNOWN naming the next id when it found fewer than asked for.
//!
//! A cycle costs what it looks at: the cursor is found in the catalog's
//! index in O(log n), each entry after it is read where it lies in the file
//! (state, stream and channel for a filter, its bytes copied into the
//! message), never decoded. Every entry looked at counts as work, so the
//! conductor does not idle between the cycles of a listing, even of a
//! filter that matches nothing for a while.

use super::*;
use crate::catalog::EntryRef;

/// Descriptors queued per duty cycle.
const BATCH: usize = 16;
/// Catalog entries (of any state) looked at per duty cycle: a filter may
/// match few, and a run of deleted recordings matches none.
const SCAN: usize = 4096;

/// Which recordings a listing sends.
pub(super) enum ListFilter {
    /// Every valid recording.
    All,
    /// Those of a stream whose stripped channel contains a fragment.
    ForUri { stream_id: i32, fragment: String },
}

impl ListFilter {
    fn matches(&self, e: &EntryRef<'_>) -> bool {
        match self {
            ListFilter::All => true,
            ListFilter::ForUri {
                stream_id,
                fragment,
            } => {
                e.stream_id() == *stream_id
                    && e.stripped_channel()
                        .is_some_and(|c| c.contains(fragment.as_str()))
            }
        }
    }
}

pub(super) struct ListRecordingsSession {
    pub(super) control_session_id: i64,
    correlation_id: i64,
    filter: ListFilter,
    /// The next recording id to look at.
    next_id: i64,
    /// How many may still be sent.
    remaining: i32,
    sent: i32,
    done: bool,
}

impl ListRecordingsSession {
    pub(super) fn new(
        control_session_id: i64,
        correlation_id: i64,
        from_recording_id: i64,
        count: i32,
        filter: ListFilter,
    ) -> ListRecordingsSession {
        ListRecordingsSession {
            control_session_id,
            correlation_id,
            filter,
            next_id: from_recording_id.max(0),
            remaining: count,
            sent: 0,
            done: false,
        }
    }

    /// Queues the next few matching descriptors into `session` once what
    /// it queued before is sent; returns the work done (the entries looked
    /// at, and one for the end). Done once the count is sent or the catalog
    /// is at its end (then RECORDING_UNKNOWN with the next recording id
    /// follows if fewer were found).
    pub(super) fn do_work(&mut self, catalog: &Catalog, session: &mut ControlSession) -> usize {
        if self.done || !session.outbox.is_empty() {
            return 0;
        }
        let mut queued = 0;
        let mut scanned = 0;
        let mut entries = catalog.entries_from(self.next_id).peekable();
        while self.remaining > 0 && queued < BATCH && scanned < SCAN {
            let Some(e) = entries.next() else {
                break;
            };
            scanned += 1;
            self.next_id = e.recording_id() + 1;
            if e.state() == recording_state::VALID && self.filter.matches(&e) {
                session.queue(e.descriptor_message(self.control_session_id, self.correlation_id));
                self.remaining -= 1;
                self.sent += 1;
                queued += 1;
            }
        }
        // At the end once no entry is left. Entries left that are not
        // VALID are looked at in the next cycles, SCAN a cycle, before the
        // end is told: the same answer (the next recording id is above
        // them all), never a cycle that looks at the whole catalog.
        let at_end = entries.peek().is_none();
        // A count of 0 (or less) asks for nothing: done, nothing sent.
        if self.remaining <= 0 || at_end {
            if self.remaining > 0 {
                let next = self.next_id.max(catalog.next_recording_id());
                session.respond(
                    self.correlation_id,
                    next,
                    response_code::RECORDING_UNKNOWN,
                    "",
                );
            }
            self.done = true;
        }
        scanned + usize::from(self.done)
    }

    pub(super) fn is_done(&self) -> bool {
        self.done
    }
}

impl ArchiveConductor {
    /// Starts a listing of the catalog for control session `sid`.
    pub(super) fn list(&mut self, sid: i64, k: i64, from: i64, count: i32, filter: ListFilter) {
        self.listings
            .push(ListRecordingsSession::new(sid, k, from, count, filter));
    }

    /// Runs the listings; a listing whose session is gone ends.
    pub(super) fn run_listings(&mut self) -> usize {
        let mut work = 0;
        for l in self.listings.iter_mut() {
            match self.sessions.get_mut(&l.control_session_id) {
                Some(s) => work += l.do_work(&self.catalog, s),
                None => l.done = true,
            }
        }
        self.listings.retain(|l| !l.is_done());
        work
    }

    /// The recording subscriptions from `pseudo_index` on that record a
    /// stream (`stream_id` if `apply_stream_id`) on a channel containing
    /// `fragment` (Aeron's ListRecordingSubscriptions): a descriptor each,
    /// then SUBSCRIPTION_UNKNOWN if fewer than `count` were found.
    pub(super) fn list_recording_subscriptions(
        &mut self,
        sid: i64,
        k: i64,
        r: ListRecordingSubscriptionsRequest,
    ) {
        let fragment = strip_channel(&r.channel).unwrap_or(r.channel.clone());
        let apply_stream_id = r.apply_stream_id == boolean_type::TRUE;
        let found: Vec<Vec<u8>> = self
            .recording_subscriptions
            .iter()
            .filter(|s| !s.closing)
            .skip(r.pseudo_index.max(0) as usize)
            .filter(|s| {
                (!apply_stream_id || s.stream_id == r.stream_id)
                    && s.stripped_channel.contains(fragment.as_str())
            })
            .take(r.subscription_count.max(0) as usize)
            .map(|s| {
                RecordingSubscriptionDescriptor {
                    control_session_id: sid,
                    correlation_id: k,
                    subscription_id: s.subscription.registration_id(),
                    stream_id: s.stream_id,
                    stripped_channel: s.stripped_channel.clone(),
                }
                .encode()
            })
            .collect();
        let short = (found.len() as i32) < r.subscription_count;
        let session = self.session(sid);
        for m in found {
            session.queue(m);
        }
        if short {
            session.respond(
                k,
                r.pseudo_index as i64,
                response_code::SUBSCRIPTION_UNKNOWN,
                "",
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::tests::TempDir;
    use sulis_protocol::sbe::Header;

    struct NoSink;
    impl control_session::ResponseSink for NoSink {
        fn offer(&mut self, _: &[u8]) -> Result<(), OfferError> {
            Ok(())
        }
        fn is_connected(&self) -> bool {
            true
        }
    }

    fn catalog(dir: &TempDir, n: i32) -> Catalog {
        let mut c = Catalog::open(&dir.0, 1 << 20, 0).unwrap();
        for i in 0..n {
            c.add_recording(RecordingDescriptor {
                start_position: 0,
                stop_position: 64,
                initial_term_id: 1,
                segment_file_length: 1 << 20,
                term_buffer_length: 64 * 1024,
                mtu_length: 1408,
                stream_id: 10 + i % 2,
                stripped_channel: format!("aeron:ipc?alias=r{i}"),
                original_channel: "aeron:ipc".into(),
                source_identity: "aeron:ipc".into(),
                ..Default::default()
            })
            .unwrap();
        }
        c
    }

    fn session() -> ControlSession {
        let t = control_session::SessionTimeouts {
            connect_ns: 1,
            ping_interval_ns: 1,
        };
        ControlSession::new(5, 6, Box::new(NoSink), 0, 0, None, Vec::new(), 0, &t)
    }

    /// The recording ids of the descriptors queued, and the final response's (code, relevant id).
    fn drain(s: &mut ControlSession) -> (Vec<i64>, Option<(i32, i64)>) {
        let mut ids = Vec::new();
        let mut end = None;
        for m in s.outbox.drain(..) {
            match Header::decode(&m).unwrap().template_id {
                RecordingDescriptor::TEMPLATE_ID => {
                    ids.push(RecordingDescriptor::decode(&m).unwrap().recording_id)
                }
                ControlResponse::TEMPLATE_ID => {
                    let r = ControlResponse::decode(&m).unwrap();
                    end = Some((r.code, r.relevant_id));
                }
                t => panic!("template {t}"),
            }
        }
        (ids, end)
    }

    #[test]
    fn should_send_a_long_listing_a_batch_at_a_time_once_the_last_was_sent() {
        let dir = TempDir::new("list-batches");
        let c = catalog(&dir, 40);
        let mut s = session();
        let mut l = ListRecordingsSession::new(5, 6, 3, 1000, ListFilter::All);
        assert_eq!(l.do_work(&c, &mut s), BATCH);
        assert_eq!(
            l.do_work(&c, &mut s),
            0,
            "nothing more while the batch is unsent"
        );
        let (first, end) = drain(&mut s);
        assert_eq!((first, end), ((3..19).collect(), None));
        l.do_work(&c, &mut s);
        assert_eq!(drain(&mut s).0, (19..35).collect::<Vec<_>>());
        l.do_work(&c, &mut s);
        assert!(l.is_done());
        assert_eq!(
            drain(&mut s),
            (
                (35..40).collect(),
                Some((response_code::RECORDING_UNKNOWN, 40))
            ),
            "fewer than asked: the next id follows"
        );
    }

    #[test]
    fn should_stop_at_the_count_and_filter_by_stream_and_channel() {
        let dir = TempDir::new("list-filter");
        let c = catalog(&dir, 40);
        let mut s = session();
        let mut l = ListRecordingsSession::new(5, 6, 0, 3, ListFilter::All);
        l.do_work(&c, &mut s);
        assert!(l.is_done());
        assert_eq!(
            drain(&mut s),
            (vec![0, 1, 2], None),
            "exactly the count: no end marker"
        );
        let filter = ListFilter::ForUri {
            stream_id: 11,
            fragment: "alias=r3".into(),
        };
        let mut l = ListRecordingsSession::new(5, 6, 0, 10, filter);
        let (mut ids, mut end) = (Vec::new(), None);
        while end.is_none() {
            l.do_work(&c, &mut s);
            let (more, e) = drain(&mut s);
            ids.extend(more);
            end = e;
        }
        assert!(l.is_done());
        assert_eq!(ids, vec![3, 31, 33, 35, 37, 39]);
        assert_eq!(end, Some((response_code::RECORDING_UNKNOWN, 40)));
    }

    #[test]
    fn should_pass_over_deleted_recordings_and_end_after_the_last_entry() {
        let dir = TempDir::new("list-deleted");
        let mut c = catalog(&dir, 40);
        for id in (5..12).chain(33..40) {
            c.set_state(id, recording_state::DELETED).unwrap();
        }
        let mut s = session();
        let mut l = ListRecordingsSession::new(5, 6, 0, 100, ListFilter::All);
        let (ids, end, _) = run(&c, &mut s, &mut l);
        let valid: Vec<i64> = (0..5).chain(12..33).collect();
        assert_eq!(ids, valid);
        assert_eq!(
            end,
            Some((response_code::RECORDING_UNKNOWN, 40)),
            "the next recording id, past the deleted ones"
        );
        let mut l = ListRecordingsSession::new(5, 6, 0, 0, ListFilter::All);
        assert_eq!(run(&c, &mut s, &mut l), (vec![], None, 1), "a count of 0");
        let mut l = ListRecordingsSession::new(5, 6, 0, -1, ListFilter::All);
        assert_eq!(
            run(&c, &mut s, &mut l),
            (vec![], None, 1),
            "a negative count"
        );
    }

    /// Runs a listing to its end: the recording ids sent, the final
    /// response's (code, relevant id) and how many duty cycles it took.
    /// Every cycle until the end must count as work, or the conductor
    /// would idle between batches.
    fn run(
        c: &Catalog,
        s: &mut ControlSession,
        l: &mut ListRecordingsSession,
    ) -> (Vec<i64>, Option<(i32, i64)>, usize) {
        let (mut ids, mut end, mut cycles) = (Vec::new(), None, 0);
        while !l.is_done() {
            cycles += 1;
            assert!(l.do_work(c, s) > 0, "cycle {cycles}: no work counted");
            let (more, e) = drain(s);
            ids.extend(more);
            assert!(end.is_none() || e.is_none(), "two end markers");
            end = end.or(e);
        }
        (ids, end, cycles)
    }

    #[test]
    fn should_list_100_000_recordings_whole_and_in_slices_a_batch_per_cycle() {
        const N: i64 = 100_000;
        let dir = TempDir::new("list-100k");
        let started = std::time::Instant::now();
        let c = catalog(&dir, N as i32);
        let filled = started.elapsed();
        let mut s = session();
        let mut l = ListRecordingsSession::new(5, 6, 0, i32::MAX, ListFilter::All);
        let (ids, end, cycles) = run(&c, &mut s, &mut l);
        assert_eq!(ids.len() as i64, N, "every recording once");
        assert!(
            ids.iter().copied().eq(0..N),
            "in order, no gaps, no duplicates"
        );
        assert_eq!(end, Some((response_code::RECORDING_UNKNOWN, N)));
        assert_eq!(cycles, (N as usize).div_ceil(BATCH), "a batch per cycle");
        // From the middle, exactly the count: that slice and no end marker.
        let mut l = ListRecordingsSession::new(5, 6, 37_123, 25_000, ListFilter::All);
        let (ids, end, _) = run(&c, &mut s, &mut l);
        assert!(ids.iter().copied().eq(37_123..62_123), "the slice");
        assert_eq!(end, None);
        // Past the end of a slice reaching the last recording.
        let mut l = ListRecordingsSession::new(5, 6, N - 10, 25, ListFilter::All);
        let (ids, end, _) = run(&c, &mut s, &mut l);
        assert!(ids.iter().copied().eq(N - 10..N));
        assert_eq!(end, Some((response_code::RECORDING_UNKNOWN, N)));
        // A filter that matches few: cycles that send nothing still count.
        let filter = ListFilter::ForUri {
            stream_id: 11,
            fragment: "alias=r9999".into(),
        };
        let mut l = ListRecordingsSession::new(5, 6, 50_000, 100, filter);
        let (ids, end, cycles) = run(&c, &mut s, &mut l);
        assert_eq!(ids, vec![99_991, 99_993, 99_995, 99_997, 99_999]);
        assert_eq!(end, Some((response_code::RECORDING_UNKNOWN, N)));
        assert_eq!(
            cycles,
            50_000usize.div_ceil(SCAN),
            "at most SCAN entries a cycle"
        );
        eprintln!(
            "{N} recordings: catalog filled in {filled:?}, listed in {:?} (debug builds are slower)",
            started.elapsed() - filled
        );
    }
}
