//! The table and the targets of issue 4, each a ratio measured in the same run.

use std::collections::BTreeMap;

use serde_json::{Value, json};

/// Every figure of one server (or of the floor), by name.
pub type Figures = BTreeMap<String, Value>;

fn p50(f: Option<&Figures>, key: &str) -> Option<f64> {
    f?.get(key)?.get("p50_ms")?.as_f64()
}

fn p95(f: Option<&Figures>, key: &str) -> Option<f64> {
    f?.get(key)?.get("p95_ms")?.as_f64()
}

fn num(f: Option<&Figures>, key: &str) -> Option<f64> {
    f?.get(key)?.as_f64()
}

fn cell(v: Option<f64>, unit: &str) -> String {
    match v {
        Some(x) if x >= 100.0 => format!("{x:.0} {unit}"),
        Some(x) if x >= 10.0 => format!("{x:.1} {unit}"),
        Some(x) => format!("{x:.2} {unit}"),
        None => "—".into(),
    }
}

/// One line of the table: metric, ours, original, floor, ratio ours/original.
struct Row {
    name: String,
    ours: Option<f64>,
    orig: Option<f64>,
    floor: Option<f64>,
    unit: &'static str,
}

fn rows(r: &BTreeMap<&str, Figures>) -> Vec<Row> {
    let (o, g, fl) = (r.get("yieldshell"), r.get("original"), r.get("floor"));
    let mut rows = Vec::new();
    let mut lat = |name: &str, key: &str, floor_key: Option<&str>| {
        rows.push(Row {
            name: format!("{name} p50"),
            ours: p50(o, key),
            orig: p50(g, key),
            floor: floor_key.and_then(|k| p50(fl, k)),
            unit: "ms",
        });
        rows.push(Row {
            name: format!("{name} p95"),
            ours: p95(o, key),
            orig: p95(g, key),
            floor: floor_key.and_then(|k| p95(fl, k)),
            unit: "ms",
        });
    };
    lat("cold start (daemon running)", "cold_start", None);
    lat(
        "cold start incl. daemon auto-start",
        "cold_start_autostart",
        None,
    );
    lat("exec `true`", "exec_true", Some("sh_spawn"));
    lat(
        "  `sh -c true` spawn, sampled alongside",
        "exec_true_floor",
        None,
    );
    lat("exec `echo hi`", "exec_echo", Some("sh_spawn"));
    lat(
        "exec `true`, both servers interleaved",
        "exec_true_paired",
        Some("sh_spawn_paired"),
    );
    lat(
        "exec `true` over gRPC, no MCP",
        "exec_true_grpc",
        Some("sh_spawn"),
    );
    lat("read", "read", Some("mcp_echo"));
    lat("ps", "ps", Some("mcp_echo"));
    lat("stop (SIGTERM-obeying sh)", "stop", None);
    lat("timeout_ms overshoot (300 ms)", "timeout_overshoot", None);
    for n in ["20", "50", "100", "1000"] {
        for (label, key) in [
            (format!("ps (defaults) with {n} running"), format!("ps_{n}")),
            (format!("ps listing all {n} running"), format!("ps_all_{n}")),
        ] {
            if o.is_some_and(|f| f.contains_key(&key)) {
                lat(&label, &key, None);
            }
        }
    }
    lat("exec `true`, many clients", "clients_exec", None);
    let mut plain = |name: &str, key: &str, floor_key: Option<&str>, unit: &'static str| {
        rows.push(Row {
            name: name.to_string(),
            ours: num(o, key),
            orig: num(g, key),
            floor: floor_key.and_then(|k| num(fl, k)),
            unit,
        });
    };
    plain(
        "flood 200 MB throughput",
        "flood_mb_s",
        Some("flood_mb_s"),
        "MB/s",
    );
    plain(
        "  floor through one more pipe (`| cat`)",
        "-",
        Some("flood_hop_mb_s"),
        "MB/s",
    );
    plain(
        "flood 200 MB daemon peak RSS",
        "flood_peak_rss_mib",
        None,
        "MiB",
    );
    plain(
        "flood 1 GiB throughput",
        "flood_1g_mb_s",
        Some("flood_1g_mb_s"),
        "MB/s",
    );
    plain(
        "  floor through one more pipe (`| cat`)",
        "-",
        Some("flood_1g_hop_mb_s"),
        "MB/s",
    );
    plain(
        "flood 1 GiB daemon peak RSS",
        "flood_1g_peak_rss_mib",
        None,
        "MiB",
    );
    for n in ["20", "50", "100", "1000"] {
        plain(
            &format!("start rate, {n} processes"),
            &format!("start_rate_{n}_per_s"),
            None,
            "/s",
        );
        plain(
            &format!("daemon RSS, {n} running"),
            &format!("rss_{n}_mib"),
            None,
            "MiB",
        );
        plain(
            &format!("daemon RSS, idle after those {n}"),
            &format!("rss_after_{n}_mib"),
            None,
            "MiB",
        );
    }
    plain(
        "many clients throughput",
        "clients_execs_per_s",
        None,
        "exec/s",
    );
    plain(
        "idle RSS, MCP server process",
        "idle_rss_shim_mib",
        None,
        "MiB",
    );
    plain("idle RSS, daemon", "idle_rss_daemon_mib", None, "MiB");
    rows.retain(|r| r.ours.is_some() || r.orig.is_some() || r.floor.is_some());
    rows
}

/// A target: description, measured value, limit, met.
type Target = (String, Option<f64>, Option<f64>, Option<bool>);

fn targets(r: &BTreeMap<&str, Figures>) -> Vec<Target> {
    let (o, g, fl) = (r.get("yieldshell"), r.get("original"), r.get("floor"));
    let mut t = Vec::new();
    let mut check = |what: &str, value: Option<f64>, limit: Option<f64>, at_most: bool| {
        let met = match (value, limit) {
            (Some(v), Some(l)) => Some(if at_most { v <= l } else { v >= l }),
            _ => None,
        };
        t.push((what.to_string(), value, limit, met));
    };
    // Judged on the interleaved samples when the original was measured (same moments of the
    // machine for both servers and the floor), else on the suite's own.
    let paired = p50(o, "exec_true_paired").is_some() && p50(g, "exec_true_paired").is_some();
    let (exec, exec_orig, sh_floor) = if paired {
        (
            p50(o, "exec_true_paired"),
            p50(g, "exec_true_paired"),
            p50(fl, "sh_spawn_paired"),
        )
    } else {
        (
            p50(o, "exec_true"),
            p50(g, "exec_true"),
            p50(o, "exec_true_floor").or_else(|| p50(fl, "sh_spawn")),
        )
    };
    check(
        "exec p50 ≤ ½ original",
        exec,
        exec_orig.map(|x| x / 2.0),
        true,
    );
    let floor_exec = match (sh_floor, p50(fl, "mcp_echo")) {
        (Some(a), Some(b)) => Some(a + b + 0.5),
        _ => None,
    };
    check(
        "exec p50 ≤ floor (sh spawn + MCP echo) + 0.5 ms",
        exec,
        floor_exec,
        true,
    );
    check(
        "cold start p50 ≤ 1/20 original",
        p50(o, "cold_start"),
        p50(g, "cold_start").map(|x| x / 20.0),
        true,
    );
    check("stop p50 ≤ 50 ms", p50(o, "stop"), Some(50.0), true);
    let ps_many = p50(o, "ps_1000").or_else(|| p50(o, "ps_100"));
    check(
        "ps (defaults) over 1000 processes ≤ 10 ms",
        ps_many,
        Some(10.0),
        true,
    );
    let flood = num(o, "flood_mb_s");
    check(
        "flood ≥ 2× original MB/s",
        flood,
        num(g, "flood_mb_s").map(|x| 2.0 * x),
        false,
    );
    check(
        "flood ≥ 70 % of floor",
        flood,
        num(fl, "flood_mb_s").map(|x| 0.7 * x),
        false,
    );
    let ring_mib = 262_144.0 / 1048576.0;
    check(
        "flood daemon peak RSS ≤ ring + 16 MiB",
        match (
            num(o, "flood_peak_rss_mib"),
            num(o, "flood_1g_peak_rss_mib"),
        ) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        },
        Some(ring_mib + 16.0),
        true,
    );
    check(
        "idle RSS shim ≤ 10 MiB",
        num(o, "idle_rss_shim_mib"),
        Some(10.0),
        true,
    );
    check(
        "idle RSS daemon ≤ 16 MiB",
        num(o, "idle_rss_daemon_mib"),
        Some(16.0),
        true,
    );
    t
}

/// Prints the table and the targets.
pub fn print(r: &BTreeMap<&str, Figures>) {
    println!(
        "{:<40} {:>12} {:>12} {:>12} {:>10}",
        "metric", "yieldshell", "original", "floor", "ys/orig"
    );
    for row in rows(r) {
        let ratio = match (row.ours, row.orig) {
            (Some(a), Some(b)) if b > 0.0 => format!("{:.3}", a / b),
            _ => "—".into(),
        };
        println!(
            "{:<40} {:>12} {:>12} {:>12} {:>10}",
            row.name,
            cell(row.ours, row.unit),
            cell(row.orig, row.unit),
            cell(row.floor, row.unit),
            ratio
        );
    }
    println!();
    println!(
        "{:<50} {:>12} {:>12} {:>8}",
        "target", "measured", "limit", "met"
    );
    for (what, value, limit, met) in targets(r) {
        println!(
            "{:<50} {:>12} {:>12} {:>8}",
            what,
            cell(value, ""),
            cell(limit, ""),
            match met {
                Some(true) => "yes",
                Some(false) => "NO",
                None => "n/a",
            }
        );
    }
}

/// The JSON document written next to the table.
pub fn document(r: &BTreeMap<&str, Figures>) -> Value {
    json!({
        "results": r,
        "targets": targets(r).into_iter().map(|(what, value, limit, met)| json!({
            "target": what, "measured": value, "limit": limit, "met": met,
        })).collect::<Vec<_>>(),
    })
}
