//! Request ids a client uses again while rmcp may still answer under them.
//!
//! rmcp keys each request it serves by the client's `id` alone. When a client cancels a request
//! (`notifications/cancelled`), rmcp forgets that id at once, but the cancelled handler runs on
//! until it notices; a new request that reuses the id right away is filed under the same key,
//! and whichever handler ends first answers for both: the cancelled one's result goes out as
//! the answer to the new request, and the new request's own answer is dropped — so it is never
//! answered. The same happens to two requests in flight with one id.
//!
//! The stdio transport therefore hands rmcp such a request under an alias (a fresh id) and turns
//! the alias back into the client's id in everything that goes out for it: the answer, and the
//! `subscriptionId` of a `subscriptions/listen` stream's notifications. A cancellation names the
//! client's id, so it goes to the latest request sent with that id. Requests whose id is free
//! (the usual case) pass unchanged.

use std::collections::{HashMap, HashSet, VecDeque};

use rmcp::RoleServer;
use rmcp::model::{ClientNotification, GetMeta, JsonRpcMessage, NumberOrString, RequestId};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};

/// Most cancelled ids remembered as taken. A cancelled request is never answered, so nothing
/// says when its handler has finished; past this many the oldest is forgotten (its handler has
/// long ended), so a client that cancels without end cannot grow the set without bound.
const MAX_CANCELLED_KEPT: usize = 4096;

/// The ids rmcp may still answer under, and the aliases of requests that reused one.
#[derive(Debug, Default)]
pub struct RequestIds {
    /// Client ids handed to rmcp unchanged whose answer has not gone out: in flight, or
    /// cancelled (a cancelled handler may still end and answer).
    taken: HashSet<RequestId>,
    /// The cancelled ones among `taken`, oldest first (see [`MAX_CANCELLED_KEPT`]).
    cancelled: VecDeque<RequestId>,
    /// Alias → the client's id.
    aliases: HashMap<RequestId, RequestId>,
    /// Client id → the alias of the latest request that reused it.
    latest: HashMap<RequestId, RequestId>,
    /// Number of the next alias.
    next: u64,
}

impl RequestIds {
    /// Readies an incoming message for rmcp: a request whose id is taken gets an alias (which
    /// is returned), a cancellation is pointed at the latest request with its id.
    pub fn incoming(&mut self, message: &mut RxJsonRpcMessage<RoleServer>) -> Option<RequestId> {
        match message {
            JsonRpcMessage::Request(request) => {
                if self.taken.insert(request.id.clone()) {
                    return None;
                }
                let alias = self.fresh_alias();
                self.aliases.insert(alias.clone(), request.id.clone());
                self.latest.insert(request.id.clone(), alias.clone());
                request.id = alias.clone();
                Some(alias)
            }
            JsonRpcMessage::Notification(notification) => {
                if let ClientNotification::CancelledNotification(cancelled) =
                    &mut notification.notification
                    && let Some(id) = cancelled.params.request_id.as_mut()
                {
                    self.cancel(id);
                }
                None
            }
            JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_) => None,
        }
    }

    /// Notes the cancellation of `id` and points it at the request rmcp knows it by.
    fn cancel(&mut self, id: &mut RequestId) {
        if let Some(alias) = self.latest.remove(id) {
            // rmcp never answers a cancelled request: the alias will not come back.
            self.aliases.remove(&alias);
            *id = alias;
        } else if self.taken.contains(id) {
            self.cancelled.push_back(id.clone());
            if self.cancelled.len() > MAX_CANCELLED_KEPT
                && let Some(oldest) = self.cancelled.pop_front()
            {
                self.taken.remove(&oldest);
            }
        }
    }

    /// Readies an outgoing message for the client: an alias becomes the client's id again, and
    /// an answered id is free for reuse.
    pub fn outgoing(
        &mut self,
        mut message: TxJsonRpcMessage<RoleServer>,
    ) -> TxJsonRpcMessage<RoleServer> {
        match &mut message {
            JsonRpcMessage::Response(response) => self.answered(&mut response.id),
            JsonRpcMessage::Error(error) => {
                if let Some(id) = error.id.as_mut() {
                    self.answered(id);
                }
            }
            JsonRpcMessage::Notification(notification) => {
                let meta = notification.notification.get_meta();
                if let Some(client_id) = meta
                    .subscription_id()
                    .and_then(|alias| self.aliases.get(&alias).cloned())
                {
                    notification
                        .notification
                        .get_meta_mut()
                        .set_subscription_id(client_id);
                }
            }
            JsonRpcMessage::Request(_) => {}
        }
        message
    }

    /// The answer to `id` is going out: an alias is turned back, a plain id is free again.
    fn answered(&mut self, id: &mut RequestId) {
        if let Some(client_id) = self.aliases.remove(id) {
            if self.latest.get(&client_id) == Some(id) {
                self.latest.remove(&client_id);
            }
            *id = client_id;
        } else {
            self.taken.remove(id);
        }
    }

    /// An id no request in play has: a client's own ids may be any string, so one is skipped
    /// if taken.
    fn fresh_alias(&mut self) -> RequestId {
        loop {
            self.next += 1;
            let alias = NumberOrString::String(format!("yieldshell-alias-{}", self.next).into());
            if !self.taken.contains(&alias) && !self.aliases.contains_key(&alias) {
                return alias;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rx(value: serde_json::Value) -> RxJsonRpcMessage<RoleServer> {
        serde_json::from_value(value).expect("client message")
    }

    fn request(id: serde_json::Value) -> RxJsonRpcMessage<RoleServer> {
        rx(json!({"jsonrpc": "2.0", "id": id, "method": "ping"}))
    }

    fn cancel(id: serde_json::Value) -> RxJsonRpcMessage<RoleServer> {
        rx(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id}}),
        )
    }

    fn id_of(message: &RxJsonRpcMessage<RoleServer>) -> RequestId {
        match message {
            JsonRpcMessage::Request(r) => r.id.clone(),
            other => panic!("not a request: {other:?}"),
        }
    }

    fn answer(ids: &mut RequestIds, id: RequestId) -> serde_json::Value {
        let out = ids.outgoing(JsonRpcMessage::response(
            rmcp::model::ServerResult::empty(()),
            id,
        ));
        serde_json::to_value(out).expect("json")["id"].clone()
    }

    #[test]
    fn a_free_id_passes_unchanged_and_an_answered_one_is_free_again() {
        let mut ids = RequestIds::default();
        let mut first = request(json!(5));
        assert_eq!(ids.incoming(&mut first), None);
        assert_eq!(answer(&mut ids, id_of(&first)), json!(5));
        let mut again = request(json!(5));
        assert_eq!(ids.incoming(&mut again), None);
        assert_eq!(id_of(&again), NumberOrString::Number(5));
    }

    #[test]
    fn an_id_reused_after_its_cancellation_is_aliased_and_answered_under_the_clients_id() {
        let mut ids = RequestIds::default();
        let mut first = request(json!(5));
        ids.incoming(&mut first);
        let mut cancelled = cancel(json!(5));
        ids.incoming(&mut cancelled);
        let mut second = request(json!(5));
        let alias = ids.incoming(&mut second).expect("aliased");
        assert_eq!(id_of(&second), alias);
        assert_eq!(answer(&mut ids, alias), json!(5));
        // A cancellation of the reused id reaches the latest request, under its alias.
        let mut third = request(json!(5));
        let alias = ids.incoming(&mut third).expect("aliased again");
        let mut cancelled = cancel(json!(5));
        ids.incoming(&mut cancelled);
        let JsonRpcMessage::Notification(n) = cancelled else {
            panic!("not a notification")
        };
        let ClientNotification::CancelledNotification(c) = n.notification else {
            panic!("not a cancellation")
        };
        assert_eq!(c.params.request_id, Some(alias));
    }

    #[test]
    fn cancelled_ids_kept_are_bounded() {
        let mut ids = RequestIds::default();
        for n in 0..(MAX_CANCELLED_KEPT as u64 + 10) {
            ids.incoming(&mut request(json!(n)));
            ids.incoming(&mut cancel(json!(n)));
        }
        assert_eq!(ids.taken.len(), MAX_CANCELLED_KEPT);
        assert_eq!(ids.cancelled.len(), MAX_CANCELLED_KEPT);
    }
}
