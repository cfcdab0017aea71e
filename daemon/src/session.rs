//! Client sessions: each shim or CLI invocation registers its environment, default cwd and
//! policy once; later calls name the session by id.
//!
//! Clients choose the id and may open it again at any time (after a daemon restart the daemon
//! answers `unknown_session` and the client reopens transparently). Sessions idle for longer than
//! [`SESSION_IDLE_EXPIRY`] are forgotten; processes never belong to a session's lifetime.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use yieldshell_proto::errors::ErrorKind;
use yieldshell_proto::pb;
use yieldshell_proto::session_config::{bytes_os, os_bytes};

use crate::error::Error;
use crate::policy::redact::Redactor;
use crate::policy::{Policy, PolicyFloor};

/// Sessions unused for this long are dropped (their clients reopen them if they come back, at the
/// cost of one round trip). Every `yieldctl` invocation opens a session of its own, so a long
/// expiry would let a busy terminal pile them up.
pub const SESSION_IDLE_EXPIRY: Duration = Duration::from_secs(3600);

/// Longest accepted session id.
const MAX_SESSION_ID: usize = 128;

/// One client session.
#[derive(Debug)]
pub struct Session {
    /// Client-chosen id.
    pub id: String,
    /// `mcp-yieldshell`, `yieldctl`, …
    pub client_name: String,
    /// The client's environment; commands run with it.
    pub env: Vec<(OsString, OsString)>,
    /// Where commands run by default (as sent; resolved per exec).
    pub default_cwd: PathBuf,
    /// Compiled policy, shared by every session that sent the same one.
    pub policy: Arc<Policy>,
    last_used: Mutex<Instant>,
    redactor: std::sync::OnceLock<Option<Arc<Redactor>>>,
}

impl Session {
    /// The redactor for the session's environment (built on first use, then shared by every
    /// command that adds no variables of its own).
    pub fn redactor(&self) -> Option<Arc<Redactor>> {
        self.redactor
            .get_or_init(|| {
                let names = self.policy.redact_env.as_ref()?;
                let env: Vec<(Vec<u8>, Vec<u8>)> = self
                    .env
                    .iter()
                    .map(|(k, v)| (os_bytes(k), os_bytes(v)))
                    .collect();
                Redactor::from_env(names, env.iter().map(|(k, v)| (k.as_slice(), v.as_slice())))
            })
            .clone()
    }

    fn touch(&self) {
        *self.last_used.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    fn idle(&self) -> Duration {
        self.last_used
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .elapsed()
    }
}

/// All open sessions.
#[derive(Debug, Default)]
pub struct Sessions {
    map: Mutex<HashMap<String, Arc<Session>>>,
    /// Compiled policies by their encoded source: compiled regexes cost kilobytes, and nearly
    /// every session of a user sends the same policy.
    policies: Mutex<HashMap<Vec<u8>, Weak<Policy>>>,
}

impl Sessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Opens (or replaces) a session.
    pub fn open(
        &self,
        req: pb::OpenSessionRequest,
        floor: &PolicyFloor,
    ) -> Result<Arc<Session>, Error> {
        let invalid = |m: String| Error::new(ErrorKind::InvalidArgument, m);
        if req.session_id.is_empty() || req.session_id.len() > MAX_SESSION_ID {
            return Err(invalid(format!(
                "session_id must be 1..={MAX_SESSION_ID} characters"
            )));
        }
        let policy = self
            .compiled_policy(&req.policy.unwrap_or_default(), floor)
            .map_err(invalid)?;
        let session = Arc::new(Session {
            id: req.session_id.clone(),
            client_name: req.client_name,
            env: req
                .env
                .into_iter()
                .map(|v| (bytes_os(&v.name), bytes_os(&v.value)))
                .collect(),
            default_cwd: PathBuf::from(bytes_os(&req.default_cwd)),
            policy,
            last_used: Mutex::new(Instant::now()),
            redactor: std::sync::OnceLock::new(),
        });
        self.expire_idle();
        self.lock().insert(req.session_id, session.clone());
        Ok(session)
    }

    /// The compiled form of `source`, shared with live sessions that sent the same policy.
    fn compiled_policy(
        &self,
        source: &pb::SessionPolicy,
        floor: &PolicyFloor,
    ) -> Result<Arc<Policy>, String> {
        let key = prost::Message::encode_to_vec(source);
        let mut cache = self.policies.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(policy) = cache.get(&key).and_then(Weak::upgrade) {
            return Ok(policy);
        }
        let policy = Arc::new(Policy::compile(source, floor)?);
        cache.retain(|_, p| p.strong_count() > 0);
        cache.insert(key, Arc::downgrade(&policy));
        Ok(policy)
    }

    /// Forgets sessions idle for longer than [`SESSION_IDLE_EXPIRY`].
    pub fn expire_idle(&self) {
        self.lock().retain(|_, s| s.idle() < SESSION_IDLE_EXPIRY);
    }

    /// Looks a session up (and marks it used).
    pub fn get(&self, id: &str) -> Result<Arc<Session>, tonic::Status> {
        let session = self.lock().get(id).cloned().ok_or_else(|| {
            ErrorKind::UnknownSession.status(format!(
                "session {id:?} is not open in this daemon (it may have restarted); open it again"
            ))
        })?;
        session.touch();
        Ok(session)
    }

    /// Number of open sessions.
    pub fn count(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(id: &str, deny: Option<&str>) -> pb::OpenSessionRequest {
        pb::OpenSessionRequest {
            session_id: id.into(),
            policy: Some(pb::SessionPolicy {
                deny_command_regex: deny.map(str::to_string),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn sessions_share_a_compiled_policy_only_when_they_sent_the_same_one() {
        let sessions = Sessions::default();
        let floor = PolicyFloor::default();
        let a = sessions.open(request("a", Some("rm")), &floor).expect("a");
        let b = sessions.open(request("b", Some("rm")), &floor).expect("b");
        let c = sessions
            .open(request("c", Some("curl")), &floor)
            .expect("c");
        assert!(Arc::ptr_eq(&a.policy, &b.policy));
        assert!(!Arc::ptr_eq(&a.policy, &c.policy));
        // Each session still enforces exactly the rules it sent.
        assert!(a.policy.check_command(b"rm -rf x").is_err());
        assert!(a.policy.check_command(b"curl example.com").is_ok());
        assert!(c.policy.check_command(b"curl example.com").is_err());
        assert!(c.policy.check_command(b"rm -rf x").is_ok());
        // Once no session uses a policy, a new session compiles it afresh.
        drop((a, b));
        sessions.lock().clear();
        let d = sessions.open(request("d", Some("rm")), &floor).expect("d");
        assert!(d.policy.check_command(b"rm -rf x").is_err());
    }
}
