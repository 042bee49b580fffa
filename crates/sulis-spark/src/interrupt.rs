//! Signals during the waits of the sources and sinks.
//!
//! A Python process installs its signal check here once (the binding does,
//! at import): every wait of this crate then runs it, so Ctrl-C or SIGTERM
//! ends a read, a plan or a write at once rather than after its timeout. The
//! clients this crate opens (media driver, archive) get it too. The JVM
//! installs none: its tasks are stopped by Spark's own interrupts.

use std::sync::OnceLock;
use sulis_client::Interrupt;

static HOOK: OnceLock<Interrupt> = OnceLock::new();

/// Installs the process' signal check (the first one stays).
pub fn install(check: Interrupt) {
    let _ = HOOK.set(check);
}

/// The installed check, for a client's context.
pub fn hook() -> Option<Interrupt> {
    HOOK.get().cloned()
}

/// Whether a signal ended the wait (its handler raised, say
/// KeyboardInterrupt): the caller returns an error naming `what` it waited
/// for, and the binding raises the handler's exception in its place.
pub fn interrupted() -> bool {
    HOOK.get().is_some_and(|i| (i.0)())
}

/// The text of the error a wait for `what` returns when interrupted.
pub fn text(what: &str) -> String {
    format!("interrupted while waiting for {what}")
}
