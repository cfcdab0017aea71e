//! Streaming secret redaction (README, "Security model": redaction).
//!
//! Values (at least [`MIN_SECRET_LEN`] bytes) of environment variables whose names match the
//! session's `YIELDSHELL_REDACT_ENV_REGEX` are replaced by `[REDACTED:NAME]` *before* output is
//! stored, so neither the ring, the spool on disk, nor any client ever sees them. Pipe reads split
//! output anywhere, so each stream keeps back the few trailing bytes that could be the start of a
//! secret until the next read (or EOF) decides: a value split across two reads is still caught.

use std::collections::HashSet;
use std::sync::Arc;

use aho_corasick::{AhoCorasick, MatchKind};

/// Shorter values are not redacted: they would match ordinary output far too often.
pub const MIN_SECRET_LEN: usize = 8;

/// The secrets of one process and how to find them.
pub struct Redactor {
    matcher: AhoCorasick,
    secrets: Vec<Vec<u8>>,
    replacements: Vec<Vec<u8>>,
    first_bytes: [bool; 256],
    longest: usize,
}

/// Shows how many secrets, never which: a process's handle holds its redactor, and a handle
/// that is logged must not log them.
impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Redactor({} secrets)", self.secrets.len())
    }
}

impl Redactor {
    /// Builds a redactor from `(name, value)` pairs whose names match `names`; `None` when there
    /// is nothing to redact (the common case costs nothing).
    pub fn from_env<'a>(
        names: &regex::Regex,
        env: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
    ) -> Option<Arc<Redactor>> {
        let mut secrets: Vec<Vec<u8>> = Vec::new();
        let mut replacements = Vec::new();
        // A set, not a search of `secrets`: an environment of many secrets stays linear.
        let mut seen: HashSet<&[u8]> = HashSet::new();
        for (name, value) in env {
            if value.len() < MIN_SECRET_LEN {
                continue;
            }
            let name = String::from_utf8_lossy(name);
            if !names.is_match(&name) || !seen.insert(value) {
                continue;
            }
            secrets.push(value.to_vec());
            replacements.push(format!("[REDACTED:{name}]").into_bytes());
        }
        Redactor::from_pairs(secrets.into_iter().zip(replacements).collect())
    }

    /// Builds a redactor from `(secret, replacement)` pairs, as [`Redactor::pairs`] gives them
    /// (a holder gets its process's secrets this way); `None` when there are none.
    pub fn from_pairs(pairs: Vec<(Vec<u8>, Vec<u8>)>) -> Option<Arc<Redactor>> {
        let (secrets, replacements): (Vec<Vec<u8>>, Vec<Vec<u8>>) =
            pairs.into_iter().filter(|(s, _)| !s.is_empty()).unzip();
        if secrets.is_empty() {
            return None;
        }
        let matcher = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(&secrets)
            .ok()?;
        let mut first_bytes = [false; 256];
        for s in &secrets {
            first_bytes[usize::from(s[0])] = true;
        }
        let longest = secrets.iter().map(Vec::len).max().unwrap_or(0);
        Some(Arc::new(Redactor {
            matcher,
            secrets,
            replacements,
            first_bytes,
            longest,
        }))
    }

    /// The secrets and their replacements, for [`Redactor::from_pairs`].
    pub fn pairs(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.secrets
            .iter()
            .zip(&self.replacements)
            .map(|(s, r)| (s.as_slice(), r.as_slice()))
    }

    /// `data` with every secret replaced, in one piece: for the command line and name of a
    /// process, stored and shown as its output is.
    pub fn redact(self: &Arc<Self>, data: &[u8]) -> Vec<u8> {
        let mut stream = RedactStream::new(self.clone());
        let mut out = Vec::with_capacity(data.len());
        stream.push(data, &mut out);
        stream.finish(&mut out);
        out
    }

    /// Where secrets are in `text` (leftmost-longest, not overlapping), each with its
    /// replacement: for text that is not a stream, such as a rendered terminal screen, whose
    /// cells get the replacement in place.
    pub fn find<'a>(
        &'a self,
        text: &'a [u8],
    ) -> impl Iterator<Item = (std::ops::Range<usize>, &'a [u8])> + 'a {
        self.matcher.find_iter(text).map(|m| {
            (
                m.range(),
                self.replacements[m.pattern().as_usize()].as_slice(),
            )
        })
    }

    /// Length of the longest suffix of `tail` that could still grow into a secret.
    fn partial_suffix(&self, tail: &[u8]) -> usize {
        let window = tail.len().min(self.longest - 1);
        let from = tail.len() - window;
        for i in from..tail.len() {
            if !self.first_bytes[usize::from(tail[i])] {
                continue;
            }
            let suffix = &tail[i..];
            if self.secrets.iter().any(|s| s.starts_with(suffix)) {
                return tail.len() - i;
            }
        }
        0
    }
}

/// Redaction state of one stream.
pub struct RedactStream {
    redactor: Arc<Redactor>,
    held: Vec<u8>,
}

/// Shows nothing of what is held back (it may be the start of a secret).
impl std::fmt::Debug for RedactStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RedactStream({:?}, {} bytes held)",
            self.redactor,
            self.held.len()
        )
    }
}

impl RedactStream {
    /// A stream with nothing held back.
    pub fn new(redactor: Arc<Redactor>) -> RedactStream {
        RedactStream {
            redactor,
            held: Vec::new(),
        }
    }

    /// Redacts `data`, appending what is safe to release to `out`.
    pub fn push(&mut self, data: &[u8], out: &mut Vec<u8>) {
        let mut buf = std::mem::take(&mut self.held);
        buf.extend_from_slice(data);
        let r = &self.redactor;
        let mut pos = 0;
        for m in r.matcher.find_iter(&buf) {
            out.extend_from_slice(&buf[pos..m.start()]);
            out.extend_from_slice(&r.replacements[m.pattern().as_usize()]);
            pos = m.end();
        }
        let hold = r.partial_suffix(&buf[pos..]);
        let release_to = buf.len() - hold;
        out.extend_from_slice(&buf[pos..release_to]);
        self.held = buf[release_to..].to_vec();
    }

    /// Releases whatever is held back (at EOF: a partial secret cannot complete any more).
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        out.append(&mut self.held);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redactor() -> Arc<Redactor> {
        let names = regex::Regex::new("TOKEN|KEY").expect("regex");
        let env: Vec<(&[u8], &[u8])> = vec![
            (b"API_TOKEN", b"s3cr3t-value-123"),
            (b"SHORT_KEY", b"abc"),
            (b"PATH", b"/usr/bin:/bin"),
        ];
        Redactor::from_env(&names, env).expect("has secrets")
    }

    fn run(chunks: &[&[u8]]) -> Vec<u8> {
        let mut s = RedactStream::new(redactor());
        let mut out = Vec::new();
        for c in chunks {
            s.push(c, &mut out);
        }
        s.finish(&mut out);
        out
    }

    #[test]
    fn replaces_whole_values_with_the_variable_name() {
        assert_eq!(
            run(&[b"key=s3cr3t-value-123 done\n"]),
            b"key=[REDACTED:API_TOKEN] done\n"
        );
    }

    #[test]
    fn catches_a_value_split_across_reads() {
        assert_eq!(
            run(&[b"a s3cr3t-", b"val", b"ue-123 b"]),
            b"a [REDACTED:API_TOKEN] b"
        );
    }

    #[test]
    fn short_values_and_unmatched_names_pass_through() {
        assert_eq!(run(&[b"abc /usr/bin:/bin"]), b"abc /usr/bin:/bin");
    }

    #[test]
    fn a_partial_prefix_at_eof_is_released() {
        assert_eq!(run(&[b"ends with s3cr3t"]), b"ends with s3cr3t");
    }

    #[test]
    fn redacts_a_whole_text_at_once() {
        assert_eq!(
            redactor().redact(b"curl -H 'auth: s3cr3t-value-123' x"),
            b"curl -H 'auth: [REDACTED:API_TOKEN]' x"
        );
    }

    #[test]
    fn nothing_to_redact_builds_no_redactor() {
        let names = regex::Regex::new("TOKEN").expect("regex");
        let env: Vec<(&[u8], &[u8])> = vec![(b"HOME", b"/home/someone")];
        assert!(Redactor::from_env(&names, env).is_none());
    }
}
