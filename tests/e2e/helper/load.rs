//! Sizing and serialising the load tests: light by default, full size under
//! `YIELDSHELL_TEST_HEAVY=1`, one flood at a time.

/// Whether the full-size reliability runs were asked for (`YIELDSHELL_TEST_HEAVY=1`).
pub fn heavy() -> bool {
    std::env::var("YIELDSHELL_TEST_HEAVY").is_ok_and(|v| v == "1")
}

/// `light` in the normal run, `full` under `YIELDSHELL_TEST_HEAVY=1`.
pub fn size(light: usize, full: usize) -> usize {
    if heavy() { full } else { light }
}

/// Serialises the load tests of one `cargo test` run (nextest runs them in its `heavy` test
/// group instead): two floods at once would measure each other.
pub async fn heavy_lock() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    LOCK.lock().await
}
