//! Pushed task status (SEP-2663): a client that names task ids in the `taskIds` of a
//! `subscriptions/listen` request gets a `notifications/tasks` on that stream when each of those
//! tasks ends, so it need not poll `tasks/get`.
//!
//! rmcp 3.11 has the types but not this wire: its `SubscriptionFilter` has no `taskIds` (they
//! are dropped when the request is decoded, and its acknowledgement cannot name them) and its
//! subscription sink refuses `notifications/tasks`. So the pieces are put together here:
//!
//! 1. the stdio transport shows every incoming `subscriptions/listen` line to
//!    [`TaskSubscriptions::note_request`], which keeps its `taskIds` when the request declares
//!    the tasks extension in its `_meta` client capabilities (2026-07-28 era: listen exists only
//!    there, and every request carries its capabilities);
//! 2. the transport passes every outgoing frame through [`TaskSubscriptions::patch_frame`],
//!    which adds the accepted `taskIds` to rmcp's `notifications/subscriptions/acknowledged` for
//!    that stream;
//! 3. the server's `listen` handler ([`TaskSubscriptions::serve`]) registers the stream and makes
//!    sure a watcher runs for each task: one daemon `Wait` long-poll per live task in this shim,
//!    which sends the task's final state (as `tasks/get` would answer it) to every stream naming
//!    it, tagged with the stream's subscription id. A task that already ended is reported at
//!    once.
//!
//! A stream without `taskIds` (rmcp's own client, which would treat an unrequested notification
//! as a protocol violation) is acknowledged and never sent anything.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::RoleServer;
use rmcp::model::{
    GetMeta, RequestId, ServerNotification, TASKS_EXTENSION_ID, TaskStatusNotification,
    TaskStatusNotificationParams,
};
use rmcp::service::{Peer, SubscriptionContext};
use serde_json::Value;
use yieldshell_proto::errors::ErrorKind;
use yieldshell_proto::pb;

use crate::tool_set::ToolSet;

/// Longest single `Wait` of a watcher: between two, it checks that someone still listens.
const WATCH_SLICE_MS: u64 = 30_000;

/// How long a watcher waits before asking again after a failed `Wait` (the daemon restarting).
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Failed `Wait`s in a row after which a watcher gives up (the client can still poll).
const MAX_FAILURES: u32 = 30;

/// The `_meta` key of a notification's subscription id.
const SUBSCRIPTION_ID_KEY: &str = "io.modelcontextprotocol/subscriptionId";

/// The `_meta` key of a 2026-07-28 request's client capabilities.
const CLIENT_CAPABILITIES_KEY: &str = "io.modelcontextprotocol/clientCapabilities";

/// The task subscriptions of one shim, shared by its transport and its server handler.
#[derive(Clone)]
pub struct TaskSubscriptions(Arc<Mutex<Registry>>);

#[derive(Default)]
struct Registry {
    /// Whether the server offers tasks; when not, listen requests are never noted (rmcp refuses
    /// them, and nothing would forget their ids).
    enabled: bool,
    /// `taskIds` accepted per listen request, from the line's arrival until its stream ends.
    task_ids: HashMap<RequestId, Vec<String>>,
    /// Live streams: where to send, per listen request.
    streams: HashMap<RequestId, Peer<RoleServer>>,
    /// Tasks a watcher is following.
    watched: HashSet<String>,
}

impl TaskSubscriptions {
    /// The subscriptions of a server that offers tasks (`enabled`) or not.
    pub fn new(enabled: bool) -> TaskSubscriptions {
        TaskSubscriptions(Arc::new(Mutex::new(Registry {
            enabled,
            ..Registry::default()
        })))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Registry> {
        // A panic while holding this lock cannot leave it inconsistent (every update is one
        // insert or remove), so a poisoned lock is still usable.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Notes the `taskIds` of an incoming message when it is a `subscriptions/listen` request
    /// that declares the tasks extension. Called by the transport for every decoded line.
    pub fn note_request(&self, message: &Value) {
        if message.get("method").and_then(Value::as_str) != Some("subscriptions/listen") {
            return;
        }
        let Some(id) = message.get("id").and_then(request_id) else {
            return;
        };
        let params = message.get("params");
        let declared = params
            .and_then(|p| p.pointer("/_meta"))
            .and_then(|m| m.get(CLIENT_CAPABILITIES_KEY))
            .and_then(|c| c.get("extensions"))
            .and_then(|e| e.get(TASKS_EXTENSION_ID))
            .is_some();
        let ids: Vec<String> = params
            .and_then(|p| p.pointer("/notifications/taskIds"))
            .and_then(Value::as_array)
            .map(|ids| {
                ids.iter()
                    .filter_map(Value::as_str)
                    .filter(|id| !id.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        let mut registry = self.lock();
        if registry.enabled && declared && !ids.is_empty() {
            registry.task_ids.insert(id, ids);
        }
    }

    /// Adds the accepted `taskIds` to the acknowledgement of a stream that asked for some. Every
    /// outgoing frame passes here; all others are left as they are.
    pub fn patch_frame(&self, frame: &mut Value) {
        if frame.get("method").and_then(Value::as_str)
            != Some("notifications/subscriptions/acknowledged")
        {
            return;
        }
        let Some(id) = frame
            .pointer("/params/_meta")
            .and_then(|m| m.get(SUBSCRIPTION_ID_KEY))
            .and_then(request_id)
        else {
            return;
        };
        let Some(ids) = self.lock().task_ids.get(&id).cloned() else {
            return;
        };
        if let Some(filter) = frame
            .pointer_mut("/params/notifications")
            .and_then(Value::as_object_mut)
        {
            filter.insert(
                "taskIds".into(),
                Value::Array(ids.into_iter().map(Value::String).collect()),
            );
        }
    }

    /// Runs one established `subscriptions/listen` stream until the client ends it: registers
    /// it, starts the watchers of its tasks, and forgets it at the end.
    pub async fn serve(&self, tools: &Arc<dyn ToolSet>, context: SubscriptionContext) {
        let request = context.request_context();
        let id = request.id.clone();
        let ids = self.lock().task_ids.get(&id).cloned().unwrap_or_default();
        if !ids.is_empty() {
            self.lock().streams.insert(id.clone(), request.peer.clone());
            for task_id in ids {
                self.watch(tools, task_id);
            }
        }
        context.cancelled().await;
        let mut registry = self.lock();
        registry.streams.remove(&id);
        registry.task_ids.remove(&id);
    }

    /// Starts a watcher for `task_id` unless one runs.
    fn watch(&self, tools: &Arc<dyn ToolSet>, task_id: String) {
        if !self.lock().watched.insert(task_id.clone()) {
            return;
        }
        let subscriptions = self.clone();
        let tools = tools.clone();
        tokio::spawn(async move {
            if subscriptions.wait_for_end(tools.as_ref(), &task_id).await {
                subscriptions.announce(tools.as_ref(), &task_id).await;
            }
            subscriptions.lock().watched.remove(&task_id);
        });
    }

    /// The live streams that name `task_id`.
    fn naming(&self, task_id: &str) -> Vec<(RequestId, Peer<RoleServer>)> {
        let registry = self.lock();
        registry
            .streams
            .iter()
            .filter(|(id, _)| {
                registry
                    .task_ids
                    .get(*id)
                    .is_some_and(|ids| ids.iter().any(|t| t == task_id))
            })
            .map(|(id, peer)| (id.clone(), peer.clone()))
            .collect()
    }

    /// Whether any live stream names `task_id`.
    fn listened(&self, task_id: &str) -> bool {
        !self.naming(task_id).is_empty()
    }

    /// Long-polls the daemon until the task's process ends (`true`), or until nobody listens
    /// any more or it cannot be followed (`false`).
    async fn wait_for_end(&self, tools: &dyn ToolSet, task_id: &str) -> bool {
        let Some(session) = tools.task_session() else {
            return false;
        };
        let mut failures = 0;
        while self.listened(task_id) {
            let answer = session
                .wait(pb::WaitRequest {
                    process_id: task_id.to_string(),
                    timeout_ms: Some(WATCH_SLICE_MS),
                    ..Default::default()
                })
                .await;
            match answer {
                Ok(r) if r.result == pb::WaitResult::DeadlineReached as i32 => failures = 0,
                // Ended (or an unknown id: announced as the error `tasks/get` gives).
                Ok(_) => return true,
                Err(e) if e.kind() == ErrorKind::UnknownProcess => return false,
                Err(_) => {
                    failures += 1;
                    if failures >= MAX_FAILURES {
                        return false;
                    }
                    tokio::time::sleep(RETRY_AFTER).await;
                }
            }
        }
        false
    }

    /// Sends the task's state, as `tasks/get` answers it, to every stream naming it.
    async fn announce(&self, tools: &dyn ToolSet, task_id: &str) {
        let Ok(task) = super::detailed(tools, task_id).await else {
            return;
        };
        let targets = self.naming(task_id);
        for (subscription, peer) in targets {
            let mut notification = ServerNotification::TaskStatusNotification(
                TaskStatusNotification::new(TaskStatusNotificationParams::new(task.clone())),
            );
            notification
                .get_meta_mut()
                .set_subscription_id(subscription);
            // A client that went away is noticed by its stream ending; nothing else to do.
            let _ = peer.send_notification(notification).await;
        }
    }
}

/// A JSON-RPC id (a string or an integer).
fn request_id(v: &Value) -> Option<RequestId> {
    match v {
        Value::String(s) => Some(RequestId::String(s.as_str().into())),
        Value::Number(n) => n.as_i64().map(RequestId::Number),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn listen(id: u64, caps: Value, task_ids: Value) -> Value {
        json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen", "params": {
            "_meta": {CLIENT_CAPABILITIES_KEY: caps},
            "notifications": {"taskIds": task_ids}
        }})
    }

    fn ack(id: u64) -> Value {
        json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
               "params": {"_meta": {SUBSCRIPTION_ID_KEY: id}, "notifications": {}}})
    }

    #[test]
    fn the_acknowledgement_names_the_task_ids_of_a_stream_that_declared_tasks() {
        let subs = TaskSubscriptions::new(true);
        let tasks = json!({"extensions": {TASKS_EXTENSION_ID: {}}});
        subs.note_request(&listen(4, tasks.clone(), json!(["proc_a", "proc_b"])));
        let mut frame = ack(4);
        subs.patch_frame(&mut frame);
        assert_eq!(
            frame["params"]["notifications"],
            json!({"taskIds": ["proc_a", "proc_b"]})
        );

        // Without the extension declared, or for another stream, nothing is added.
        subs.note_request(&listen(5, json!({}), json!(["proc_a"])));
        for id in [5, 6] {
            let mut frame = ack(id);
            subs.patch_frame(&mut frame);
            assert_eq!(frame["params"]["notifications"], json!({}), "{id}");
        }
        // A server without tasks notes nothing.
        let without = TaskSubscriptions::new(false);
        without.note_request(&listen(7, tasks.clone(), json!(["proc_a"])));
        let mut frame = ack(7);
        without.patch_frame(&mut frame);
        assert_eq!(frame["params"]["notifications"], json!({}));
        // Other frames pass untouched.
        let mut other = json!({"jsonrpc": "2.0", "id": 4, "result": {}});
        subs.patch_frame(&mut other);
        assert_eq!(other, json!({"jsonrpc": "2.0", "id": 4, "result": {}}));
    }
}
