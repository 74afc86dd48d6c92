//! Sending room output to sessions on other nodes: a `RemoteSession` stands in for each
//! remote subscriber (so rooms keep talking to a `Recipient<ToClient>` whatever the
//! session's node), and one `NodeOutbox` per node gathers everything produced in one
//! turn of the arbiter into a single publish.

use crate::cluster::bus::{Envelope, Publisher, SessionText};
use crate::messages::ToClient;
use actix::prelude::*;
use std::time::Duration;
use tracing::warn;

/// Batches messages for one node.
pub struct NodeOutbox {
    node: String,
    publisher: Publisher,
    pending: Vec<SessionText>,
    scheduled: bool,
}

impl NodeOutbox {
    pub fn new(node: &str, publisher: Publisher) -> NodeOutbox {
        NodeOutbox { node: node.to_owned(), publisher, pending: Vec::new(), scheduled: false }
    }

    fn flush(&mut self, ctx: &mut Context<Self>) {
        self.scheduled = false;
        let items = std::mem::take(&mut self.pending);
        if items.is_empty() {
            return;
        }
        let publisher = self.publisher.clone();
        let node = self.node.clone();
        // In order: publishes from one outbox go out one at a time.
        ctx.wait(
            async move {
                if let Err(e) = publisher.send(&node, &Envelope::Sessions { items }).await {
                    warn!(node = %node, error = %e, "session messages not delivered");
                }
            }
            .into_actor(self),
        );
    }
}

impl Actor for NodeOutbox {
    type Context = Context<Self>;
}

#[derive(Message)]
#[rtype(result = "()")]
pub struct Outgoing {
    pub item: SessionText,
}

impl Handler<Outgoing> for NodeOutbox {
    type Result = ();

    fn handle(&mut self, msg: Outgoing, ctx: &mut Context<Self>) {
        self.pending.push(msg.item);
        if !self.scheduled {
            self.scheduled = true;
            ctx.run_later(Duration::ZERO, |act, ctx| act.flush(ctx));
        }
    }
}

/// A subscriber on another node, as a room sees it.
pub struct RemoteSession {
    pub session: u64,
    pub outbox: Addr<NodeOutbox>,
}

impl Actor for RemoteSession {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(1024);
    }
}

impl Handler<ToClient> for RemoteSession {
    type Result = ();

    fn handle(&mut self, msg: ToClient, ctx: &mut Context<Self>) {
        let item = SessionText {
            session: self.session,
            text: msg.text.to_string(),
            close: msg.close,
            stale_route: msg.stale_route.as_deref().map(str::to_owned),
        };
        self.outbox.do_send(Outgoing { item });
        if msg.close {
            ctx.stop();
        }
    }
}
