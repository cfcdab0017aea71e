//! Client sessions: each shim or CLI invocation registers its environment, default cwd and
//! policy once; later calls name the session by id.
//!
//! Clients choose the id and may open it again at any time (after a daemon restart the daemon
//! answers `unknown_session` and the client reopens transparently). Sessions idle for longer than
//! [`SESSION_IDLE_EXPIRY`] are forgotten; processes never belong to a session's lifetime.

use std::collections::HashMap;
use std::ffi::OsString;
use std::hash::{Hash, Hasher};
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

/// Most variables an `exec` overlay (or a session's environment) may carry.
pub const MAX_ENV_VARS: usize = 100_000;
/// Most bytes (names and values) an `exec` overlay (or a session's environment) may carry.
pub const MAX_ENV_BYTES: usize = 8 * 1024 * 1024;
/// Refuses an environment of more than [`MAX_ENV_VARS`] variables or [`MAX_ENV_BYTES`] bytes.
pub fn check_env_size<'a>(
    field: &str,
    vars: impl ExactSizeIterator<Item = (&'a [u8], &'a [u8])>,
) -> Result<(), String> {
    if vars.len() > MAX_ENV_VARS {
        return Err(format!(
            "{field} has {} variables; at most {MAX_ENV_VARS}",
            vars.len()
        ));
    }
    let bytes: usize = vars.map(|(k, v)| k.len() + v.len()).sum();
    if bytes > MAX_ENV_BYTES {
        return Err(format!(
            "{field} has {bytes} bytes of names and values; at most {MAX_ENV_BYTES}"
        ));
    }
    Ok(())
}

/// Longest accepted session id.
const MAX_SESSION_ID: usize = 128;

/// One environment variable, name and value.
pub type EnvVar = (OsString, OsString);

/// An environment as a session holds it: immutable, and shared by content.
pub type SharedEnv = Arc<[EnvVar]>;

/// One client session.
#[derive(Debug)]
pub struct Session {
    /// Client-chosen id.
    pub id: String,
    /// `mcp-yieldshell`, `yieldctl`, …
    pub client_name: String,
    /// The client's environment; commands run with it. Shared by every open session that sent
    /// the same one (see [`Sessions`]).
    pub env: SharedEnv,
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
    /// Environments by a hash of their content: every `yieldctl` invocation opens a session
    /// with the user's whole environment (tens of kilobytes), nearly always the same one, and
    /// sessions live for [`SESSION_IDLE_EXPIRY`]. One copy serves them all.
    envs: Mutex<HashMap<u64, Weak<[EnvVar]>>>,
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
        check_env_size("env", req.env.iter().map(|v| (&v.name[..], &v.value[..])))
            .map_err(invalid)?;
        let policy = self
            .compiled_policy(&req.policy.unwrap_or_default(), floor)
            .map_err(invalid)?;
        let session = Arc::new(Session {
            id: req.session_id.clone(),
            client_name: req.client_name,
            env: self.shared_env(
                req.env
                    .into_iter()
                    .map(|v| (bytes_os(&v.name), bytes_os(&v.value)))
                    .collect(),
            ),
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

    /// `env` as an open session with the same content already holds it, or else as a new
    /// shared copy.
    fn shared_env(&self, env: Vec<EnvVar>) -> SharedEnv {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        env.hash(&mut hasher);
        let key = hasher.finish();
        let mut cache = self.envs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(shared) = cache.get(&key).and_then(Weak::upgrade)
            && *shared == *env
        {
            return shared;
        }
        // A hash collision with another live environment simply keeps its own copy.
        let shared: SharedEnv = env.into();
        cache.retain(|_, e| e.strong_count() > 0);
        cache.insert(key, Arc::downgrade(&shared));
        shared
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

    fn with_env(id: &str, vars: &[(&str, &str)]) -> pb::OpenSessionRequest {
        pb::OpenSessionRequest {
            session_id: id.into(),
            env: vars
                .iter()
                .map(|(k, v)| pb::EnvVar {
                    name: k.as_bytes().to_vec(),
                    value: v.as_bytes().to_vec(),
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn sessions_with_the_same_environment_hold_one_copy_of_it() {
        let sessions = Sessions::default();
        let floor = PolicyFloor::default();
        let big = "x".repeat(20_000);
        let vars = [("HOME", "/home/u"), ("BIG", big.as_str())];
        let a = sessions.open(with_env("a", &vars), &floor).expect("a");
        let b = sessions.open(with_env("b", &vars), &floor).expect("b");
        let c = sessions
            .open(with_env("c", &[("HOME", "/home/v")]), &floor)
            .expect("c");
        assert!(Arc::ptr_eq(&a.env, &b.env));
        assert!(!Arc::ptr_eq(&a.env, &c.env));
        assert_eq!(c.env.len(), 1);
        assert_eq!(c.env[0], ("HOME".into(), "/home/v".into()));
        // Reopening a session replaces it; the shared copy lives while any session holds it.
        let a2 = sessions
            .open(with_env("a", &vars), &floor)
            .expect("a again");
        assert!(Arc::ptr_eq(&a2.env, &b.env));
        drop((a, a2, b));
        sessions.lock().clear();
        assert!(
            sessions
                .envs
                .lock()
                .expect("envs")
                .values()
                .all(|e| e.upgrade().is_none_or(|e| e.len() == 1)),
            "only c's environment is still alive"
        );
    }

    #[test]
    fn an_oversized_environment_is_refused() {
        let sessions = Sessions::default();
        let huge = "x".repeat(MAX_ENV_BYTES);
        let err = sessions
            .open(
                with_env("a", &[("BIG", huge.as_str())]),
                &PolicyFloor::default(),
            )
            .expect_err("refused");
        assert_eq!(err.kind, ErrorKind::InvalidArgument);
        assert!(err.message.contains("env has"), "{}", err.message);
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
