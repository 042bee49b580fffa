//! A running archive: the conductor on its own thread.

use crate::conductor::ArchiveConductor;
use crate::context::ArchiveContext;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use sulis_concurrent::agent::{run_agents, Agent, NanoClock, TrackedAgent};

/// What the archive thread shares with its owner.
#[derive(Default)]
struct Shared {
    errors: Mutex<Vec<String>>,
    error_count: AtomicU64,
    archive_id: AtomicI64,
}

/// The conductor as its thread runs it: after each duty cycle with new
/// errors, they are copied where the archive's owner reads them.
struct SharingErrors {
    conductor: ArchiveConductor,
    shared: Arc<Shared>,
    seen: u64,
}

impl SharingErrors {
    fn share(&mut self) {
        self.seen = self.conductor.error_count();
        self.shared.error_count.store(self.seen, Ordering::Release);
        *self.shared.errors.lock().unwrap() = self.conductor.errors().to_vec();
    }
}

impl Agent for SharingErrors {
    fn do_work(&mut self) -> usize {
        let work = self.conductor.do_work();
        if self.conductor.error_count() != self.seen {
            self.share();
        }
        work
    }

    fn on_close(&mut self) {
        self.conductor.close();
        self.share();
    }
}

/// An archive running on its own thread until closed or dropped.
pub struct Archive {
    running: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    shared: Arc<Shared>,
    ctx: ArchiveContext,
}

impl Archive {
    /// Opens the archive directory, connects to the driver and starts serving.
    pub fn launch(ctx: ArchiveContext) -> Result<Archive, crate::ArchiveStartError> {
        Self::launch_with(ctx, Box::new(crate::auth::AllowAllRequests))
    }

    /// As [`Archive::launch`], with `authoriser` deciding which requests
    /// each session may make.
    pub fn launch_with(
        ctx: ArchiveContext,
        authoriser: Box<dyn crate::auth::Authoriser>,
    ) -> Result<Archive, crate::ArchiveStartError> {
        let conductor = ArchiveConductor::with_authoriser(ctx.clone(), authoriser)?;
        let shared = Arc::new(Shared::default());
        shared
            .archive_id
            .store(conductor.archive_id(), Ordering::Release);
        let running = Arc::new(AtomicBool::new(true));
        let (r, s) = (running.clone(), shared.clone());
        let idle = ctx.idle_strategy;
        let tracker = conductor.duty_cycle_tracker();
        let agent = SharingErrors {
            conductor,
            shared: shared.clone(),
            seen: 0,
        };
        let thread = std::thread::Builder::new()
            .name("sulis-archive".into())
            .spawn(move || {
                let run = std::panic::AssertUnwindSafe(|| {
                    let agents: Vec<TrackedAgent> = vec![(Box::new(agent), tracker)];
                    run_agents(agents, idle, r, NanoClock::new());
                });
                if let Err(panic) = std::panic::catch_unwind(run) {
                    // A bug, not a condition: the archive stops and says so
                    // (its mark file stays as it was, so the next start
                    // recovers what it was recording).
                    let what = panic
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default();
                    let mut errors = s.errors.lock().unwrap();
                    errors.push(format!("the archive thread died: {what}"));
                    s.error_count.store(errors.len() as u64, Ordering::Release);
                }
            })
            .map_err(|e| crate::ArchiveStartError::io("cannot start the archive thread", &e))?;
        Ok(Archive {
            running,
            thread: Some(thread),
            shared,
            ctx,
        })
    }

    /// The archive's id.
    pub fn archive_id(&self) -> i64 {
        self.shared.archive_id.load(Ordering::Acquire)
    }

    /// The settings it runs with.
    pub fn context(&self) -> &ArchiveContext {
        &self.ctx
    }

    /// Errors recorded (most recent last).
    pub fn errors(&self) -> Vec<String> {
        self.shared.errors.lock().unwrap().clone()
    }

    /// Number of errors recorded.
    pub fn error_count(&self) -> u64 {
        self.shared.error_count.load(Ordering::Acquire)
    }

    /// True until closed, or until its thread died.
    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Stops the archive: recordings end with their stop positions written.
    pub fn close(&mut self) {
        self.running.store(false, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Archive {
    fn drop(&mut self) {
        self.close();
    }
}
