//! Summary statistics of latency samples.

use std::time::Duration;

/// Median, 95th percentile and extremes of a sample, in milliseconds.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Summary {
    /// Number of samples.
    pub n: usize,
    /// Median.
    pub p50_ms: f64,
    /// 95th percentile (nearest rank).
    pub p95_ms: f64,
    /// Fastest.
    pub min_ms: f64,
    /// Slowest.
    pub max_ms: f64,
}

/// The `q` quantile (nearest rank) of `sorted` values; 0 for none.
pub fn nearest_rank(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

impl Summary {
    /// Summarises durations (empty input gives zeros).
    pub fn of(samples: &[Duration]) -> Summary {
        let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
        ms.sort_by(f64::total_cmp);
        let rank = |q: f64| nearest_rank(&ms, q);
        Summary {
            n: ms.len(),
            p50_ms: rank(0.5),
            p95_ms: rank(0.95),
            min_ms: ms.first().copied().unwrap_or(0.0),
            max_ms: ms.last().copied().unwrap_or(0.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let d: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        let s = Summary::of(&d);
        assert_eq!(
            (s.p50_ms, s.p95_ms, s.min_ms, s.max_ms),
            (50.0, 95.0, 1.0, 100.0)
        );
    }
}
