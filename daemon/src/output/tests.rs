//! Unit tests of the output log: paging, latest views, UTF-8 cuts, the spool and its gaps,
//! memory release of ended processes.

use super::spool::SpoolPiece;
use super::*;

/// Appends stdout bytes whose spool batch is lost, as a failed write loses it: in the ring,
/// counted, marked missing, never on disk.
fn append_lost(log: &OutputLog, bytes: &[u8]) {
    let mut inner = log.lock();
    let start = inner.next_seq;
    let spool = inner.spool.as_mut().expect("spool");
    spool.append(Stream::Stdout, bytes);
    drop(spool.take());
    inner.next_seq += bytes.len() as u64;
    inner.ring.push(Stream::Stdout, bytes);
    log.lock_files()
        .expect("files")
        .mark_missing_for_test(start);
}

fn q(since: Option<u64>, max: usize) -> ReadQuery {
    ReadQuery {
        since,
        max_bytes: max,
        streams: StreamFilter::Both,
        tail_lines: None,
    }
}

#[test]
fn a_fresh_log_starts_at_seq_1() {
    let log = OutputLog::new(100, None, 0);
    let r = log.read(&q(Some(1), 10));
    assert_eq!((r.first_seq, r.next_seq, r.truncated), (1, 1, false));
    assert_eq!(log.end().next_seq, 1);
}

#[test]
fn paging_by_next_seq_returns_every_byte_once() {
    let log = OutputLog::new(1 << 20, None, 0);
    let mut expected = Vec::new();
    for i in 0..200u32 {
        let (s, data) = if i % 3 == 0 {
            (Stream::Stderr, format!("e{i}\n"))
        } else {
            (Stream::Stdout, format!("out line {i}\n"))
        };
        log.append(s, data.as_bytes());
        expected.push((s, data));
    }
    for page in [1usize, 7, 64, 1000] {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let mut seq = 1;
        loop {
            let r = log.read(&q(Some(seq), page));
            assert!(!r.truncated);
            out.extend_from_slice(&r.stdout);
            err.extend_from_slice(&r.stderr);
            assert!(r.next_seq > seq || !r.has_more);
            seq = r.next_seq;
            if !r.has_more {
                break;
            }
        }
        let want_out: String = expected
            .iter()
            .filter(|(s, _)| *s == Stream::Stdout)
            .map(|(_, d)| d.as_str())
            .collect();
        let want_err: String = expected
            .iter()
            .filter(|(s, _)| *s == Stream::Stderr)
            .map(|(_, d)| d.as_str())
            .collect();
        assert_eq!(
            String::from_utf8(out).expect("utf8"),
            want_out,
            "page {page}"
        );
        assert_eq!(
            String::from_utf8(err).expect("utf8"),
            want_err,
            "page {page}"
        );
    }
}

#[test]
fn evicted_since_sets_truncated_and_resumes_at_ring_start() {
    let log = OutputLog::new(10, None, 0);
    log.append(Stream::Stdout, b"0123456789abcdef");
    let r = log.read(&q(Some(1), 100));
    assert!(r.truncated);
    assert_eq!(r.first_seq, 7);
    assert_eq!(r.stdout, b"6789abcdef");
    let again = log.read(&q(Some(r.next_seq), 100));
    assert!(!again.truncated);
    assert!(again.stdout.is_empty());
}

#[test]
fn latest_view_returns_the_end_with_truncated() {
    let log = OutputLog::new(100, None, 0);
    log.append(Stream::Stdout, b"aaaa");
    log.append(Stream::Stderr, b"EE");
    log.append(Stream::Stdout, b"bbbb");
    let r = log.read(&q(None, 5));
    // Walking back: "bbbb" (4 of 5), "EE" (2 of 5), then stdout has 1 byte left: "a".
    assert_eq!(r.stdout, b"abbbb");
    assert_eq!(r.stderr, b"EE");
    assert_eq!((r.first_seq, r.next_seq), (4, 11));
    assert!(r.truncated);
    let all = log.read(&q(None, 100));
    assert!(!all.truncated);
    assert_eq!(all.first_seq, 1);
}

#[test]
fn stream_filter_skips_other_bytes_but_advances_seq() {
    let log = OutputLog::new(100, None, 0);
    log.append(Stream::Stdout, b"out");
    log.append(Stream::Stderr, b"err");
    let r = log.read(&ReadQuery {
        streams: StreamFilter::Stderr,
        ..q(Some(1), 100)
    });
    assert_eq!(r.stderr, b"err");
    assert!(r.stdout.is_empty());
    assert_eq!(r.next_seq, 7);
}

#[test]
fn tail_lines_counts_lines_of_the_selected_streams() {
    let log = OutputLog::new(1000, None, 0);
    log.append(Stream::Stdout, b"one\ntwo\nthree\nfour\n");
    let r = log.read(&ReadQuery {
        tail_lines: Some(2),
        ..q(None, 1000)
    });
    assert_eq!(r.stdout, b"three\nfour\n");
    log.append(Stream::Stdout, b"partial");
    let r = log.read(&ReadQuery {
        tail_lines: Some(2),
        ..q(None, 1000)
    });
    assert_eq!(r.stdout, b"four\npartial");
}

#[test]
fn pages_never_split_a_utf8_character() {
    let log = OutputLog::new(100, None, 0);
    log.append(Stream::Stdout, "aé€".as_bytes()); // 1 + 2 + 3 bytes
    let r = log.read(&q(Some(1), 2));
    assert_eq!(r.stdout, b"a");
    assert_eq!(r.next_seq, 2);
    let r = log.read(&q(Some(2), 4));
    assert_eq!(r.stdout, "é".as_bytes());
    let latest = log.read(&q(None, 4));
    assert_eq!(latest.stdout, "€".as_bytes());
}

#[test]
fn binary_is_cut_exactly() {
    let log = OutputLog::new(100, None, 0);
    log.append(Stream::Stdout, b"\xff\xfe\xfd");
    let r = log.read(&q(Some(1), 2));
    assert_eq!(r.stdout, b"\xff\xfe");
}

#[test]
fn totals_count_bytes_and_lines() {
    let log = OutputLog::new(100, None, 0);
    log.append(Stream::Stdout, b"a\nb");
    let (out, err) = log.totals();
    assert_eq!((out.bytes, out.lines), (3, 2));
    log.append(Stream::Stdout, b"\n");
    assert_eq!(log.totals().0.lines, 2);
    assert_eq!(err.lines, 0);
}

#[test]
fn spool_serves_what_the_ring_evicted_and_restores_after_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = OutputLog::new(8, Some(dir.path()), 1 << 30);
    log.append(Stream::Stdout, b"first-");
    log.append(Stream::Stderr, b"second-");
    log.append(Stream::Stdout, b"third");
    // The disk has what the ring lost; the page goes on into the ring.
    let r = log.read(&q(Some(1), 1000));
    assert!(!r.truncated);
    assert_eq!(r.stdout, b"first-third");
    assert_eq!(r.stderr, b"second-");
    assert!(!r.has_more);
    // A small page stops in the disk part; the next one continues exactly there.
    let small = log.read(&q(Some(1), 4));
    assert_eq!(small.stdout, b"firs");
    let rest = log.read(&q(Some(small.next_seq), 1000));
    assert_eq!(rest.stdout, b"t-third");
    assert_eq!(rest.stderr, b"second-");
    drop(log);

    let restored = OutputLog::restore(8, dir.path());
    assert!(restored.end().closed);
    assert_eq!(restored.end().next_seq, 19);
    assert_eq!(restored.read(&q(None, 100)).stdout, b"third");
    let (out, err) = restored.totals();
    assert_eq!((out.bytes, err.bytes), (11, 7));
    let all = restored.read(&q(Some(1), 1000));
    assert_eq!(all.stdout, b"first-third");
}

fn on_disk(dir: &Path) -> Vec<u8> {
    let reader = SpoolReader::open(dir).expect("open");
    reader
        .read(1, 1 << 20)
        .expect("read")
        .into_iter()
        .flat_map(|p| match p {
            SpoolPiece::Run(_, _, b) => b,
            SpoolPiece::Missing(..) => Vec::new(),
        })
        .collect()
}

/// Issue 16 item 5: a process printing a line every 30 ms never pauses long enough for a
/// quiet-time write; its bytes still reach the disk once the oldest is `FLUSH_AGE` old.
#[test]
fn a_chatty_process_reaches_the_disk_within_the_flush_age() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = OutputLog::new(1 << 20, Some(dir.path()), 1 << 30);
    log.append(Stream::Stdout, b"line 1\n");
    assert!(
        on_disk(dir.path()).is_empty(),
        "a fresh line waits for more"
    );
    log.lock()
        .spool
        .as_mut()
        .expect("spool")
        .age_by(spool::FLUSH_AGE);
    log.append(Stream::Stdout, b"line 2\n");
    assert_eq!(on_disk(dir.path()), b"line 1\nline 2\n");
}

/// Issue 16 item 6: a page never jumps over bytes that are retained nowhere without saying
/// so. Here the spool has none of the evicted bytes (it was turned off by its cap of one
/// segment long ago); the read that asks for them is `truncated`, starts after the gap, and
/// paging on from it reaches the end.
#[test]
fn a_spool_read_past_what_the_disk_has_reports_the_gap() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = OutputLog::new(8, Some(dir.path()), 1 << 30);
    log.append(Stream::Stdout, b"0123456789");
    log.flush_spool();
    // Lose the disk copy, as a full disk would have.
    std::fs::remove_file(dir.path().join("out.0")).expect("rm");
    let r = log.read(&q(Some(1), 100));
    assert!(r.truncated, "{r:?}");
    assert_eq!(r.first_seq, 3);
    assert_eq!(r.stdout, b"23456789");
    let runs = log.read_runs(1, 100, StreamFilter::Both);
    assert_eq!(runs.gap, Some((1, 3)));
    assert_eq!(runs.next, 11);
}

/// A gap in the middle of the spool ends the page before it; the next page starts with it,
/// `truncated`, so a client paging by `next_seq` is told exactly where bytes are missing.
#[test]
fn a_gap_inside_the_spool_is_reported_by_the_page_that_reaches_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = OutputLog::new(4, Some(dir.path()), 1 << 30);
    log.append(Stream::Stdout, b"aaaa");
    log.flush_spool();
    // A batch ("bbbb", 5..=8) that never reached the disk.
    append_lost(&log, b"bbbb");
    log.append(Stream::Stdout, b"cccc");
    log.append(Stream::Stdout, b"dddd");
    log.flush_spool();
    let mut seq = 1;
    let mut pages = Vec::new();
    loop {
        let r = log.read(&q(Some(seq), 100));
        pages.push((
            r.truncated,
            r.first_seq,
            String::from_utf8(r.stdout.clone()).expect("utf8"),
        ));
        seq = r.next_seq;
        if !r.has_more {
            break;
        }
    }
    assert_eq!(
        pages,
        vec![
            (false, 1, "aaaa".to_string()),
            (true, 9, "ccccdddd".to_string()),
        ]
    );
}

/// Issue 16 item 7: an ended process's ring is released once cold, and every read answers
/// exactly as before: forward pages, latest views of any size, tails.
#[test]
fn released_memory_reads_exactly_as_before() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = OutputLog::new(200_000, Some(dir.path()), 1 << 30);
    for i in 0..6000u32 {
        let (s, line) = if i % 7 == 0 {
            (Stream::Stderr, format!("warning {i}\n"))
        } else {
            (Stream::Stdout, format!("output line number {i} ü\n"))
        };
        log.append(s, line.as_bytes());
    }
    log.close();
    let queries = [
        q(Some(1), 1 << 20),
        q(Some(100_000), 5000),
        q(Some(150_001), 333),
        q(None, 20_000),
        q(None, 150_000),
        ReadQuery {
            tail_lines: Some(3000),
            ..q(None, 1 << 20)
        },
        ReadQuery {
            streams: StreamFilter::Stderr,
            ..q(Some(120_000), 4096)
        },
        q(Some(1), 100_000),
    ];
    let before: Vec<ReadResult> = queries.iter().map(|q| log.read(q)).collect();
    let pages_before = log.read_runs(90_000, 50_000, StreamFilter::Both);
    assert!(log.release_memory());
    assert!(log.lock().ring.len() <= COLD_TAIL_BYTES);
    assert!(!log.release_memory(), "released once");
    for (q, want) in queries.iter().zip(&before) {
        let got = log.read(q);
        // Compared field by field: a failing assert of whole pages would print megabytes.
        assert!(got.stdout == want.stdout, "stdout differs for {q:?}");
        assert!(got.stderr == want.stderr, "stderr differs for {q:?}");
        assert_eq!(
            (got.first_seq, got.next_seq, got.truncated, got.has_more),
            (want.first_seq, want.next_seq, want.truncated, want.has_more),
            "{q:?}"
        );
    }
    let pages_after = log.read_runs(90_000, 50_000, StreamFilter::Both);
    // Runs may be cut differently (disk runs vs ring chunks); their bytes may not.
    let merged = |runs: &[Run]| {
        let mut out: Vec<Run> = Vec::new();
        for (seq, stream, bytes) in runs {
            match out.last_mut() {
                Some((s, st, b)) if st == stream && *s + b.len() as u64 == *seq => {
                    b.extend_from_slice(bytes)
                }
                _ => out.push((*seq, *stream, bytes.clone())),
            }
        }
        out
    };
    assert!(
        merged(&pages_after.runs) == merged(&pages_before.runs),
        "runs differ"
    );
    assert_eq!(pages_after.next, pages_before.next);
    assert_eq!(pages_after.gap, pages_before.gap);
}

#[test]
fn a_running_log_or_one_without_a_spool_keeps_its_memory() {
    let log = OutputLog::new(1 << 20, None, 0);
    log.append(Stream::Stdout, &vec![b'x'; 100_000]);
    log.close();
    assert!(!log.release_memory(), "no spool: the ring is the only copy");
    let dir = tempfile::tempdir().expect("tempdir");
    let live = OutputLog::new(1 << 20, Some(dir.path()), 1 << 30);
    live.append(Stream::Stdout, &vec![b'x'; 100_000]);
    assert!(!live.release_memory(), "still running");
}

/// Found in review: a disk read that crosses a missing range may run past the ring's start; the
/// bytes from there on are the ring's, and a page must not jump over them.
#[test]
fn a_disk_read_never_jumps_over_bytes_the_ring_holds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = OutputLog::new(6, Some(dir.path()), 1 << 30);
    log.append(Stream::Stdout, b"aaaa");
    log.flush_spool();
    // "bbbb" (5..=8) never reaches the disk.
    append_lost(&log, b"bbbb");
    log.append(Stream::Stdout, b"cccc");
    log.flush_spool();
    // The ring holds 7..=12 ("bbcccc"); 5..=6 are missing.
    let r = log.read(&q(Some(5), 100));
    assert!(r.truncated);
    assert_eq!(r.first_seq, 7);
    assert_eq!(r.stdout, b"bbcccc");
    let runs = log.read_runs(5, 100, StreamFilter::Both);
    assert_eq!(runs.gap, Some((5, 7)));
    let bytes: Vec<u8> = runs.runs.iter().flat_map(|(_, _, b)| b.clone()).collect();
    assert_eq!(bytes, b"bbcccc");
}

/// Found in review: a ring older than what the spool's cap kept is not released (its bytes
/// exist nowhere else).
#[test]
fn a_ring_older_than_the_spool_keeps_its_memory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let seg = usize::try_from(spool::SEGMENT_BYTES).expect("segment");
    // A ring of two segments, a spool capped at one.
    let log = OutputLog::new(2 * seg, Some(dir.path()), spool::SEGMENT_BYTES);
    log.append(Stream::Stdout, &vec![b'x'; seg + 1000]);
    log.append(Stream::Stdout, &vec![b'y'; seg / 2]);
    log.close();
    assert!(!log.release_memory());
    assert_eq!(log.read(&q(Some(1), 10)).stdout, b"xxxxxxxxxx");
}

/// A page of one rare stream from the start of a large spool reads at most
/// `DISK_BYTES_PER_PAGE` from disk and says `has_more`; paging on reaches the rare bytes, with
/// nothing skipped and nothing `truncated`.
#[test]
fn a_page_of_a_rare_stream_reads_a_bounded_amount_of_disk() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = OutputLog::new(1 << 16, Some(dir.path()), 1 << 30);
    let block = vec![b'o'; 1 << 20];
    for _ in 0..40 {
        log.append(Stream::Stdout, &block);
    }
    log.append(Stream::Stderr, b"the error\n");
    log.close();
    let stderr_only = |since| ReadQuery {
        streams: StreamFilter::Stderr,
        ..q(Some(since), 100)
    };
    let first = log.read(&stderr_only(1));
    assert!(first.stderr.is_empty() && first.has_more && !first.truncated);
    assert!(
        first.next_seq - 1 <= DISK_BYTES_PER_PAGE as u64,
        "{}",
        first.next_seq
    );
    let mut seq = first.next_seq;
    let mut pages = 1;
    let found = loop {
        let r = log.read(&stderr_only(seq));
        assert!(!r.truncated);
        pages += 1;
        if !r.stderr.is_empty() {
            break r;
        }
        assert!(r.has_more && r.next_seq > seq);
        seq = r.next_seq;
    };
    assert_eq!(found.stderr, b"the error\n");
    assert_eq!(found.first_seq, seq);
    assert!(pages >= 3, "{pages}");
}
