//! A streaming query's retention hold (`retentionHold`): the archive's
//! retention never removes what the query still has to read. Between
//! micro-batches no replay runs, and a files-mode read is invisible to the
//! archive, so the Spark driver writes a hold (`sulis_archive::holds`) in
//! the archive's directory naming, per recording, the position the next
//! read starts from: the batch's start when a batch is planned, its end
//! once committed. An automatic hold is removed when the query stops, and
//! carries a lease (`retentionHoldLease`) so that one whose Spark driver
//! died, or whose stop Spark never passed on, lapses; the planner writes it
//! again at least every third of its lease (and every [`RENEW_S`]) while
//! Spark asks it anything. A hold named by the user stays, for the query's
//! next run, until the archive's `retention_hold_timeout`.
//!
//! Where the archive's directory is not readable from the Spark driver (a
//! remote archive read in replay mode), no hold can be written: that is
//! logged once, and the query is then protected only while it replays.

use std::collections::BTreeMap;

/// A live query writes its hold again at least this often (seconds).
pub const RENEW_S: f64 = 60.0;

/// `retentionHold`: `auto` (the default; a name per query run), `none`, or
/// a name that lasts across runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HoldSetting {
    /// A name of its own for each run, released when it stops.
    Auto,
    /// No hold.
    Off,
    /// This name, kept when the query stops.
    Named(String),
}

impl HoldSetting {
    /// Parses the option's value; an error says what the value may be.
    pub fn parse(value: Option<&str>) -> Result<HoldSetting, String> {
        match value.map(str::trim) {
            None | Some("") => Ok(HoldSetting::Auto),
            Some(v) if v.eq_ignore_ascii_case("auto") => Ok(HoldSetting::Auto),
            Some(v) if v.eq_ignore_ascii_case("none") || v.eq_ignore_ascii_case("false") => {
                Ok(HoldSetting::Off)
            }
            Some(v) => sulis_archive::holds::check_name(v)
                .map(|()| HoldSetting::Named(v.to_string()))
                .map_err(|e| format!("option retentionHold: {e}; or auto, or none")),
        }
    }
}

/// The hold one query's planner keeps.
pub struct RetentionHold {
    /// The hold's name (`None`: no hold).
    name: Option<String>,
    /// Released when the query stops; lapses after this lease.
    release_on_stop: bool,
    lease: Option<std::time::Duration>,
    /// What was written last, and when (planner seconds).
    written: Option<(BTreeMap<i64, i64>, f64)>,
    /// The directory it was written to.
    dir: Option<String>,
    said_no_dir: bool,
}

impl RetentionHold {
    /// The hold `setting` asks for; an automatic one with a lease of `lease_s`.
    pub fn new(setting: &HoldSetting, lease_s: f64) -> RetentionHold {
        let (name, release_on_stop) = match setting {
            HoldSetting::Off => (None, false),
            HoldSetting::Named(n) => (Some(n.clone()), false),
            HoldSetting::Auto => {
                let host = crate::archive_session::hostname();
                let host: String = host
                    .chars()
                    .map(|c| {
                        if c.is_ascii_alphanumeric() || c == '-' {
                            c
                        } else {
                            '_'
                        }
                    })
                    .collect();
                let id = sulis_concurrent::bit_util::generate_randomised_id() as u32;
                (
                    Some(format!("spark-{host}-{}-{id:08x}", std::process::id())),
                    true,
                )
            }
        };
        RetentionHold {
            name,
            lease: release_on_stop.then(|| std::time::Duration::from_secs_f64(lease_s.max(1.0))),
            release_on_stop,
            written: None,
            dir: None,
            said_no_dir: false,
        }
    }

    /// Its name, if it holds anything at all.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// Holds `positions` (recording id to the lowest position the query
    /// still reads) in the archive directory `dir` (`None`: not readable
    /// here), at `now`: written when they changed or the last write is
    /// [`RENEW_S`] old. Returns a line to log, if any: `Ok` to say, `Err`
    /// to warn of.
    pub fn hold(
        &mut self,
        dir: Option<&str>,
        positions: &BTreeMap<i64, i64>,
        now: f64,
    ) -> Option<Result<String, String>> {
        let name = self.name.clone()?;
        let Some(dir) = dir else {
            if self.said_no_dir {
                return None;
            }
            self.said_no_dir = true;
            return Some(Ok(format!(
                "sulis source: retention hold '{name}' not written: the archive's directory is not readable on this \
                 Spark driver (give archiveDir where it is); the archive's retention then spares only what a replay \
                 is reading"
            )));
        };
        let renew = self
            .lease
            .map_or(RENEW_S, |l| (l.as_secs_f64() / 3.0).min(RENEW_S));
        if let Some((held, at)) = &self.written {
            if held == positions && now - at < renew && self.dir.as_deref() == Some(dir) {
                return None;
            }
        }
        let held: Vec<(i64, i64)> = positions.iter().map(|(&r, &p)| (r, p)).collect();
        match sulis_archive::holds::write_hold(std::path::Path::new(dir), &name, &held, self.lease)
        {
            Ok(_) => {
                let first = self.written.is_none();
                self.written = Some((positions.clone(), now));
                self.dir = Some(dir.to_string());
                first.then(|| {
                    Ok(format!("sulis source: retention hold '{name}' in {dir}/holds keeps what this query has still to read"))
                })
            }
            Err(e) => Some(Err(format!("sulis source: {e}"))),
        }
    }

    /// Positions held last, if any (tests, logs).
    pub fn held(&self) -> Option<&BTreeMap<i64, i64>> {
        self.written.as_ref().map(|(h, _)| h)
    }

    /// The query stops: an automatic hold goes; a named one stays for the
    /// next run.
    pub fn stop(&mut self) {
        if !self.release_on_stop {
            return;
        }
        if let (Some(name), Some(dir)) = (&self.name, &self.dir) {
            let _ = sulis_archive::holds::release_hold(std::path::Path::new(dir), name);
        }
        self.written = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> String {
        let d =
            std::env::temp_dir().join(format!("sulis-spark-hold-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d.display().to_string()
    }

    fn read(dir: &str) -> Vec<(String, i64, i64)> {
        let (holds, problems) = sulis_archive::holds::read_holds(std::path::Path::new(dir));
        assert!(problems.is_empty(), "{problems:?}");
        holds
            .into_iter()
            .map(|h| (h.name, h.recording_id, h.position))
            .collect()
    }

    #[test]
    fn the_setting_is_auto_none_or_a_name() {
        assert_eq!(HoldSetting::parse(None), Ok(HoldSetting::Auto));
        assert_eq!(HoldSetting::parse(Some("AUTO")), Ok(HoldSetting::Auto));
        assert_eq!(HoldSetting::parse(Some("none")), Ok(HoldSetting::Off));
        assert_eq!(
            HoldSetting::parse(Some("prices-job")),
            Ok(HoldSetting::Named("prices-job".into()))
        );
        let e = HoldSetting::parse(Some("../x")).unwrap_err();
        assert!(
            e.starts_with("option retentionHold: hold name '../x'"),
            "{e}"
        );
    }

    #[test]
    fn an_automatic_hold_follows_the_query_and_goes_when_it_stops() {
        let d = dir("auto");
        let mut h = RetentionHold::new(&HoldSetting::Auto, 900.0);
        let name = h.name().unwrap().to_string();
        assert!(name.starts_with("spark-"), "{name}");
        let said = h.hold(Some(&d), &BTreeMap::from([(3, 0), (4, 4096)]), 0.0);
        assert!(said
            .unwrap()
            .unwrap()
            .contains("keeps what this query has still to read"));
        assert_eq!(read(&d), [(name.clone(), 3, 0), (name.clone(), 4, 4096)]);
        let (holds, _) = sulis_archive::holds::read_holds(std::path::Path::new(&d));
        assert_eq!(
            holds[0].lease_ms,
            Some(900_000),
            "an automatic hold lapses if not renewed"
        );
        // The same positions soon after: not written again; moved on: written.
        assert_eq!(
            h.hold(Some(&d), &BTreeMap::from([(3, 0), (4, 4096)]), 1.0),
            None
        );
        assert_eq!(
            h.hold(Some(&d), &BTreeMap::from([(3, 640), (4, 4096)]), 2.0),
            None
        );
        assert_eq!(read(&d), [(name.clone(), 3, 640), (name.clone(), 4, 4096)]);
        h.stop();
        assert_eq!(read(&d), []);
    }

    #[test]
    fn a_named_hold_stays_for_the_next_run_and_none_writes_nothing() {
        let d = dir("named");
        let mut h = RetentionHold::new(&HoldSetting::Named("prices".into()), 900.0);
        h.hold(Some(&d), &BTreeMap::from([(1, 64)]), 0.0);
        h.stop();
        assert_eq!(read(&d), [("prices".to_string(), 1, 64)]);
        let mut off = RetentionHold::new(&HoldSetting::Off, 900.0);
        assert_eq!(off.hold(Some(&d), &BTreeMap::from([(2, 0)]), 0.0), None);
        assert_eq!(read(&d).len(), 1);
    }

    #[test]
    fn with_no_directory_here_it_says_so_once() {
        let mut h = RetentionHold::new(&HoldSetting::Auto, 900.0);
        assert!(h
            .hold(None, &BTreeMap::new(), 0.0)
            .unwrap()
            .unwrap()
            .contains("not readable on this Spark driver"));
        assert_eq!(h.hold(None, &BTreeMap::new(), 1.0), None);
    }
}
