//! What `read`, `ps`, `wait` and `exec` report about a running process's tree right now:
//! whether it waits for input ([`super::input_wait`]) and which TCP addresses it listens on
//! ([`super::listening`]). Both are read from `/proc` in one task on the blocking pool, for all
//! the processes of an answer at once, and each answer is given again for [`ANSWER_TTL`], so a
//! client polling `read` in a loop costs one check per process per window, not one per call.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use yieldshell_proto::pb;

use super::tree::Identity;
use super::{input_wait, listening};

/// The youngest process `read` and `ps` judge: most commands are over before this, and checking
/// each of them would cost a busy daemon `/proc` reads for nothing. (An `exec` that yields early
/// has judged its command itself.)
const MIN_AGE: Duration = Duration::from_millis(250);

/// How fresh the facts of an answer must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// `read`, `ps`, `wait`: processes at least [`MIN_AGE`] old, an answer of the last
    /// [`ANSWER_TTL`] given again, members found in a pass taken since the newest process
    /// started.
    Reused,
    /// An `exec` returning at its `until` line ("the server is ready" is when an agent wants its
    /// address): any age, checked now, with every member found in a pass taken now (the server
    /// the shell forked a moment ago included).
    Now,
}

/// How long a check's result is given again.
const ANSWER_TTL: Duration = Duration::from_millis(100);

/// The facts of one tree.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Facts {
    waiting_for_input: Option<bool>,
    listening: Vec<String>,
}

/// When each shell was last checked, and what was found.
static ANSWERS: Mutex<Option<HashMap<Identity, (Instant, Facts)>>> = Mutex::new(None);

/// Fills in `waiting_for_input` and `listening` of each running [`ProcessInfo`](pb::ProcessInfo)
/// (see [`Freshness`] for which, and how fresh), with one check for all of them (`ps` asks for
/// many). Others keep them absent.
pub async fn annotate<'a>(
    freshness: Freshness,
    pairs: impl IntoIterator<Item = (&'a super::ManagedProcess, &'a mut pb::ProcessInfo)>,
) {
    let running = pb::ProcessStatus::Running as i32;
    let min_age = match freshness {
        Freshness::Reused => MIN_AGE,
        Freshness::Now => Duration::ZERO,
    };
    let mut newest_start = None;
    let (infos, shells): (Vec<_>, Vec<_>) = pairs
        .into_iter()
        .filter(|(proc, info)| info.status == running && proc.started.elapsed() >= min_age)
        .filter_map(|(proc, info)| {
            newest_start = newest_start.max(Some(proc.started));
            Some((info, proc.state().identity?))
        })
        .unzip();
    let (reuse, members_since) = match freshness {
        Freshness::Reused => (true, newest_start),
        Freshness::Now => (false, Some(Instant::now())),
    };
    for (info, facts) in infos
        .into_iter()
        .zip(recent(shells, reuse, members_since).await)
    {
        info.waiting_for_input = facts.waiting_for_input;
        info.listening = facts.listening;
    }
}

/// The facts of each shell's tree: with `reuse`, from [`ANSWERS`] when checked within
/// [`ANSWER_TTL`]; else checked now (together, off the runtime), with the members of every
/// session found in a pass taken since `members_since`.
async fn recent(shells: Vec<Identity>, reuse: bool, members_since: Option<Instant>) -> Vec<Facts> {
    let mut answers = vec![Facts::default(); shells.len()];
    let mut missing = Vec::new();
    if !reuse {
        missing.extend(0..shells.len());
    } else {
        let mut cache = ANSWERS.lock().unwrap_or_else(|e| e.into_inner());
        let cache = cache.get_or_insert_with(Default::default);
        cache.retain(|_, (at, _)| at.elapsed() < ANSWER_TTL);
        for (i, shell) in shells.iter().enumerate() {
            match cache.get(shell) {
                Some((_, facts)) => answers[i] = facts.clone(),
                None => missing.push(i),
            }
        }
    }
    if missing.is_empty() || !input_wait::SUPPORTED {
        return answers;
    }
    let to_check: Vec<Identity> = missing.iter().map(|&i| shells[i]).collect();
    let n = to_check.len();
    let checked = input_wait::off_runtime(move || {
        #[cfg(target_os = "linux")]
        if let Some(since) = members_since {
            super::sessions::expire_before(since);
        }
        #[cfg(not(target_os = "linux"))]
        let _ = members_since;
        let waiting = input_wait::check_many(&to_check);
        let listening = listening::check_many(&to_check);
        waiting
            .into_iter()
            .zip(listening)
            .map(|(waiting_for_input, listening)| Facts {
                waiting_for_input,
                listening,
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_else(|| vec![Facts::default(); n]);
    let now = Instant::now();
    let mut cache = ANSWERS.lock().unwrap_or_else(|e| e.into_inner());
    let cache = cache.get_or_insert_with(Default::default);
    for (i, facts) in missing.into_iter().zip(checked) {
        cache.insert(shells[i], (now, facts.clone()));
        answers[i] = facts;
    }
    answers
}
