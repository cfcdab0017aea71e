//! docs/RELIABILITY.md L7: one client pipelining calls on one connection and not reading the
//! answers must not inflate the shared daemon's memory, and must not keep other clients waiting.
//!
//! The flooding client speaks HTTP/2 by hand over the daemon's socket (a gRPC library reads its
//! socket whatever the application does): it opens a window wide enough for every answer, sends
//! every request at once, and reads nothing until another client has been answered.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;

use prost::Message;
use yieldshell_proto::pb;

use crate::helper::{TestDaemon, hwm_kib, rss_kib};

/// Output of the process every call reads (the 9 MB process).
const OUTPUT_BYTES: u64 = 9 * 1024 * 1024;
/// What each pipelined `read` asks for (the 8 MB).
const READ_BYTES: u64 = 8 * 1024 * 1024;
/// Pipelined reads: unbounded, the daemon held one answer of each (650 MB measured).
const PIPELINED: usize = 64;
/// The daemon's peak may grow by at most this many times the output: a per-connection budget
/// of two such answers, another client's read, and their copies in encoding (130 MB measured
/// for 64 reads, 150 MB for 160, with the daemon's own 22 MB).
const CEILING_OUTPUTS: u64 = 24;

/// HTTP/2 frame types and flags used here (RFC 9113 §6).
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const SETTINGS: u8 = 0x4;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const MAX_WINDOW: u32 = 0x7fff_ffff;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A header block of literal fields without indexing (RFC 7541 §6.2.2), no Huffman coding.
fn header_block(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut block = Vec::new();
    for (name, value) in fields {
        assert!(name.len() < 127 && value.len() < 127);
        block.push(0x00);
        block.push(name.len() as u8);
        block.extend_from_slice(name.as_bytes());
        block.push(value.len() as u8);
        block.extend_from_slice(value.as_bytes());
    }
    block
}

/// The bytes of `count` pipelined `Read` calls, after the connection preface and settings that
/// let the daemon send every answer without waiting for a window update.
fn pipelined_reads(count: usize, req: &pb::ReadRequest) -> Vec<u8> {
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    let mut settings = vec![0x00, 0x04];
    settings.extend_from_slice(&MAX_WINDOW.to_be_bytes());
    out.extend(frame(SETTINGS, 0, 0, &settings));
    out.extend(frame(
        WINDOW_UPDATE,
        0,
        0,
        &(MAX_WINDOW - 65_535).to_be_bytes(),
    ));
    let headers = header_block(&[
        (":method", "POST"),
        (":scheme", "http"),
        (":path", "/yieldshell.v1.Control/Read"),
        (":authority", "localhost"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ]);
    let message = req.encode_to_vec();
    let mut body = vec![0];
    body.extend_from_slice(&(message.len() as u32).to_be_bytes());
    body.extend_from_slice(&message);
    for i in 0..count {
        let stream = 2 * i as u32 + 1;
        out.extend(frame(HEADERS, END_HEADERS, stream, &headers));
        out.extend(frame(DATA, END_STREAM, stream, &body));
    }
    out
}

/// Reads the connection until `count` calls have ended; the answer bytes each call received.
fn drain_answers(conn: &mut UnixStream, count: usize) -> Vec<u64> {
    let mut received = vec![0u64; count];
    let mut ended = 0;
    let mut head = [0u8; 9];
    let mut payload = Vec::new();
    while ended < count {
        conn.read_exact(&mut head).expect("frame header");
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let (kind, flags) = (head[3], head[4]);
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & MAX_WINDOW;
        payload.resize(len, 0);
        conn.read_exact(&mut payload).expect("frame payload");
        assert_ne!(kind, GOAWAY, "the daemon closed the flooding connection");
        let call = (stream as usize).saturating_sub(1) / 2;
        if kind == DATA && stream != 0 {
            received[call] += len as u64;
        }
        if (kind == DATA || kind == HEADERS) && stream != 0 && flags & END_STREAM != 0 {
            ended += 1;
        }
    }
    received
}

/// A client pipelines `PIPELINED` reads of 8 MB of a 9 MB output on one connection and reads
/// nothing: while it does, another client is answered, and however long the flood lasts the
/// daemon never holds more than a few answers (its peak resident memory grows by less than
/// `CEILING_OUTPUTS` times the output). Every pipelined call is answered in full once the client reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_pipelines_reads_and_reads_nothing_holds_a_bounded_number_of_answers() {
    let d = TestDaemon::start().await;
    let max = READ_BYTES.to_string();
    let vars = [("YIELDSHELL_MAX_OUTPUT_BYTES", max.as_str())];
    let (flooder, other) = (d.session_with(&vars), d.session_with(&vars));
    let r = flooder
        .exec(&format!(
            "head -c {OUTPUT_BYTES} /dev/zero | tr '\\0' x; echo"
        ))
        .await;
    let id = r.process.expect("process").process_id;
    flooder.wait_exit(&id).await;
    let before_kib = rss_kib(d.pid());

    let request = pb::ReadRequest {
        session_id: flooder.id(),
        process_id: id.clone(),
        since_seq: Some(1),
        max_output_bytes: Some(READ_BYTES),
        ..Default::default()
    };
    let mut conn = UnixStream::connect(&d.socket).expect("connect");
    // A few kilobytes: the kernel takes them whether or not the daemon reads.
    conn.write_all(&pipelined_reads(PIPELINED, &request))
        .expect("pipelined requests");

    // Another client, on its own connection, is answered during the flood.
    let answer = other
        .read(pb::ReadRequest {
            process_id: id.clone(),
            since_seq: Some(1),
            max_output_bytes: Some(READ_BYTES),
            ..Default::default()
        })
        .await
        .expect("another client's read during the flood");
    let got = answer.output.expect("output").stdout.len() as u64;
    assert_eq!(got, READ_BYTES, "another client's read during the flood");

    let received = tokio::task::spawn_blocking(move || drain_answers(&mut conn, PIPELINED))
        .await
        .expect("drain");
    for (call, bytes) in received.iter().enumerate() {
        assert!(
            *bytes > READ_BYTES,
            "pipelined read {call} was answered with {bytes} bytes, not its 8 MB page"
        );
    }
    let peak_kib = hwm_kib(d.pid());
    let ceiling_kib = before_kib + CEILING_OUTPUTS * OUTPUT_BYTES / 1024;
    eprintln!(
        "daemon: {before_kib} KiB before the flood, peak {peak_kib} KiB (ceiling {ceiling_kib} \
         KiB) over {PIPELINED} pipelined 8 MB reads"
    );
    assert!(
        peak_kib < ceiling_kib,
        "the daemon's peak memory reached {peak_kib} KiB (from {before_kib} KiB) while one \
         client pipelined {PIPELINED} reads of 8 MB without reading: answers are not bounded \
         per connection"
    );
}
