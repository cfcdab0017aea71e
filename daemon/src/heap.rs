//! Giving freed heap memory back to the operating system once a burst of work is over.
//!
//! glibc's malloc keeps memory a program frees inside its arenas (one per thread that allocated)
//! for reuse, so a daemon that once ran a thousand processes or relayed an output flood would keep
//! that high-water mark resident for the rest of its life. The daemon lives for weeks; after each
//! burst (processes ending) and a short quiet period it calls `malloc_trim(0)`, which returns the
//! free pages of every arena. Other allocators and platforms return memory on their own terms;
//! there this is a no-op.

use std::time::Duration;

use tokio::sync::Notify;

/// How long the daemon must be quiet (no process ending) before it trims.
pub const QUIET: Duration = Duration::from_secs(1);

static ACTIVITY: Notify = Notify::const_new();

/// Records that work which freed memory just finished (a managed process ended).
pub fn note_activity() {
    // One stored permit coalesces a burst into a single trim.
    ACTIVITY.notify_one();
}

/// Runs forever: after each burst of activity and `quiet` without more, trims the heap.
pub async fn trim_when_idle(quiet: Duration) {
    loop {
        ACTIVITY.notified().await;
        while tokio::time::timeout(quiet, ACTIVITY.notified())
            .await
            .is_ok()
        {}
        // malloc_trim walks every arena under its lock: keep it off the runtime's workers.
        let _ = tokio::task::spawn_blocking(release_free_heap).await;
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn release_free_heap() {
    // SAFETY: malloc_trim only inspects and releases the allocator's own free memory.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn release_free_heap() {}
