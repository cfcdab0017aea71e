//! Latency samples and their percentile summaries, for the load and client-fault tests' logs
//! and their bounds.

use std::time::Duration;

/// Latencies of repeated calls, for percentile reports.
#[derive(Debug, Default, Clone)]
pub struct Latencies(pub Vec<Duration>);

impl Latencies {
    /// Records one sample.
    pub fn push(&mut self, d: Duration) {
        self.0.push(d);
    }

    /// The `p`-th percentile (0–100), zero without samples.
    pub fn pct(&self, p: f64) -> Duration {
        let mut v = self.0.clone();
        v.sort_unstable();
        if v.is_empty() {
            return Duration::ZERO;
        }
        let i = ((p / 100.0) * (v.len() - 1) as f64).round() as usize;
        v[i.min(v.len() - 1)]
    }

    /// `n=…, p50=…, p99=…, max=…` for the test log.
    pub fn summary(&self) -> String {
        format!(
            "n={} p50={:?} p99={:?} max={:?}",
            self.0.len(),
            self.pct(50.0),
            self.pct(99.0),
            self.pct(100.0)
        )
    }
}
