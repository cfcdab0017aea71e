//! Bounded polling: every wait in the tests checks a condition until it holds or one generous
//! [`TIMEOUT`] passes, so nothing sleeps and hopes.

use std::future::Future;
use std::time::{Duration, Instant};

/// The one timeout every poll uses: generous, because CI machines are slow and shared.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// Polls `check` until it returns `Some` or [`TIMEOUT`] passes.
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Blocking variant of [`eventually`].
pub fn eventually_blocking<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}
