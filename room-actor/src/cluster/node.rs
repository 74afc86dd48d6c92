//! A node in cluster mode: membership heartbeats, lease renewal, failover scans, lazy
//! activation of rooms it should own, and the bus loop that connects gateways on other
//! nodes to the rooms here (and rooms here to sessions there).

use crate::cluster::bus::{self, Envelope, NodeCmd, OpError, Publisher, Reply, RoomCmd};
use crate::cluster::lease::Leases;
use crate::cluster::membership::Membership;
use crate::cluster::outbox::{NodeOutbox, RemoteSession};
use crate::cluster::placement;
use crate::directory::{RoomHandle, RoomInfo};
use crate::error::{RebuildError, StoreError};
use crate::log::StoredGame;
use crate::messages::{
    Act, Close, GetInfo, Inspect, Kick, LeaveSeat, RoomOpError, RttSample, SessionId, Start, Subscribe, TakeSeat,
    ToClient, Unsubscribe,
};
use crate::redis_store::RedisStore;
use crate::room::{RoomActor, RoomDeps};
use crate::store::RoomStore;
use crate::wire;
use actix::prelude::*;
use engine::registry::{self, GameVisitor};
use engine::{Game, PlayerId};
use futures_util::StreamExt;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use tracing::{info, warn};

/// How long a node waits for another node's answer to a room request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Rooms handed over at once during a drain (each is one mailbox turn and one Redis call).
const HANDOVER_CONCURRENCY: usize = 64;

#[derive(Clone, Debug)]
pub struct ClusterConfig {
    pub node_id: String,
    pub redis_url: String,
    /// Key prefix (and bus channel prefix) shared by the nodes of one cluster.
    pub prefix: String,
    pub lease_ms: u64,
    pub heartbeat_ms: u64,
}

/// Where a room is now.
pub enum Owner {
    Here(RoomHandle),
    There(String),
    /// Nobody can take it right now (unknown room, or its lease is in transition).
    Unknown,
}

pub struct ClusterNode {
    pub config: ClusterConfig,
    pub store: RedisStore,
    pub leases: Leases,
    pub members: Membership,
    pub publisher: Publisher,
    deps: RoomDeps,
    /// Rooms whose lease this node holds, with the token.
    held: Mutex<HashMap<String, String>>,
    outboxes: Mutex<HashMap<String, Addr<NodeOutbox>>>,
    remotes: Mutex<HashMap<(String, u64), Addr<RemoteSession>>>,
    /// This node's own sockets, for messages arriving from rooms elsewhere.
    sessions: Mutex<HashMap<u64, Recipient<ToClient>>>,
    pending: Mutex<HashMap<u64, oneshot::Sender<Reply>>>,
    next_req: AtomicU64,
    pub draining: AtomicBool,
    activating: tokio::sync::Mutex<()>,
    /// Notified when an operator asks (over the bus) for this node to drain; the gateway
    /// then drains exactly as on SIGTERM.
    pub drain_request: Arc<tokio::sync::Notify>,
}

struct Restore {
    info: RoomInfo,
    stored: Option<StoredGame>,
    deps: RoomDeps,
    token: String,
}

impl GameVisitor for Restore {
    type Output = Result<RoomHandle, RebuildError>;
    fn visit<G: Game>(self) -> Self::Output {
        Ok(RoomActor::<G>::restore(self.info, self.stored, self.deps, Some(self.token))?.spawn())
    }
}

fn op_error(e: RoomOpError) -> OpError {
    OpError { status: e.status, code: e.code.to_owned(), reason: e.reason.to_owned() }
}

impl ClusterNode {
    /// `deps.store` must be `store` (the rooms of a cluster node persist to Redis).
    pub fn new(config: ClusterConfig, store: RedisStore, deps: RoomDeps) -> Arc<ClusterNode> {
        let keys = store.keys().clone();
        let conn = store.connection();
        Arc::new(ClusterNode {
            leases: Leases::new(conn.clone(), keys.clone(), &config.node_id, config.lease_ms),
            members: Membership::new(conn.clone(), keys, (config.heartbeat_ms * 3) as i64),
            publisher: Publisher::new(conn, &config.prefix),
            config,
            store,
            deps,
            held: Mutex::new(HashMap::new()),
            outboxes: Mutex::new(HashMap::new()),
            remotes: Mutex::new(HashMap::new()),
            sessions: Mutex::new(HashMap::new()),
            pending: Mutex::new(HashMap::new()),
            next_req: AtomicU64::new(1),
            draining: AtomicBool::new(false),
            activating: tokio::sync::Mutex::new(()),
            drain_request: Arc::new(tokio::sync::Notify::new()),
        })
    }

    pub fn id(&self) -> &str {
        &self.config.node_id
    }

    fn now_ms(&self) -> i64 {
        self.deps.clock.now_ms()
    }

    /// Live nodes that take rooms.
    async fn placeable(&self) -> Result<Vec<String>, StoreError> {
        let live = self.members.live(self.now_ms()).await?;
        Ok(live.into_iter().filter(|m| !m.draining).map(|m| m.id).collect())
    }

    /// Finds (and, when it should be here, activates) the room's owner.
    pub async fn locate(self: &Arc<Self>, room: &str) -> Result<Owner, StoreError> {
        if self.holds(room) {
            if let Some(handle) = self.deps.directory.handle(room) {
                return Ok(Owner::Here(handle));
            }
        }
        if let Some(token) = self.leases.holder(room).await? {
            let node = token.split('/').next().unwrap_or_default().to_owned();
            if node != self.id() {
                return Ok(Owner::There(node));
            }
            // Our own lease but no actor (it stopped): wait for the lease to lapse.
            return Ok(Owner::Unknown);
        }
        if self.store.room(room).await?.is_none() {
            return Ok(Owner::Unknown);
        }
        let nodes = self.placeable().await?;
        match placement::owner(room, nodes.iter().map(String::as_str)) {
            Some(owner) if owner == self.id() => match self.activate(room).await? {
                Some(handle) => Ok(Owner::Here(handle)),
                None => Ok(Owner::Unknown),
            },
            Some(owner) => Ok(Owner::There(owner.to_owned())),
            None => Ok(Owner::Unknown),
        }
    }

    fn holds(&self, room: &str) -> bool {
        self.held.lock().map(|h| h.contains_key(room)).unwrap_or(false)
    }

    /// Claims the room's lease and restores it here; `None` if another node holds it or
    /// the room is unknown.
    pub async fn activate(self: &Arc<Self>, room: &str) -> Result<Option<RoomHandle>, StoreError> {
        let _one_at_a_time = self.activating.lock().await;
        if self.holds(room) {
            if let Some(handle) = self.deps.directory.handle(room) {
                return Ok(Some(handle));
            }
        }
        let Some(token) = self.leases.claim(room).await? else { return Ok(None) };
        let Some(info) = self.store.room(room).await? else {
            self.leases.release(room, &token).await?;
            return Ok(None);
        };
        let stored = match &info.game_pk {
            Some(pk) => self.store.load(pk).await?,
            None => None,
        };
        let game = info.game.clone();
        let resumes_a_game = stored.is_some();
        let restore = Restore { info, stored, deps: self.deps.clone(), token: token.clone() };
        match registry::visit(&game, restore) {
            Some(Ok(handle)) => {
                if resumes_a_game {
                    self.deps.metrics.rooms_restored.inc();
                }
                if let Ok(mut held) = self.held.lock() {
                    held.insert(room.to_owned(), token);
                }
                info!(room, node = self.id(), "room activated");
                Ok(Some(handle))
            }
            Some(Err(e)) => {
                warn!(room, error = %e, "room cannot be restored");
                self.leases.release(room, &token).await?;
                Ok(None)
            }
            None => {
                self.leases.release(room, &token).await?;
                Ok(None)
            }
        }
    }

    /// A `Recipient` that delivers to `session` on `node`.
    pub fn remote_out(&self, node: &str, session: u64) -> Option<Recipient<ToClient>> {
        let mut remotes = self.remotes.lock().ok()?;
        if let Some(addr) = remotes.get(&(node.to_owned(), session)) {
            if addr.connected() {
                return Some(addr.clone().recipient());
            }
        }
        let outbox = {
            let mut outboxes = self.outboxes.lock().ok()?;
            outboxes
                .entry(node.to_owned())
                .or_insert_with(|| NodeOutbox::new(node, self.publisher.clone()).start())
                .clone()
        };
        let addr = RemoteSession { session, outbox }.start();
        remotes.insert((node.to_owned(), session), addr.clone());
        Some(addr.recipient())
    }

    pub fn register_session(&self, session: u64, out: Recipient<ToClient>) {
        if let Ok(mut sessions) = self.sessions.lock() {
            sessions.insert(session, out);
        }
    }

    pub fn unregister_session(&self, session: u64) {
        if let Ok(mut sessions) = self.sessions.lock() {
            sessions.remove(&session);
        }
    }

    /// Sends `cmd` for `room` to `node` and waits for its reply.
    pub async fn request(&self, node: &str, room: &str, make: impl FnOnce(u64) -> RoomCmd) -> Reply {
        let req = self.next_req.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        if let Ok(mut pending) = self.pending.lock() {
            pending.insert(req, tx);
        }
        let envelope = Envelope::Room { room: room.to_owned(), from: self.id().to_owned(), cmd: make(req) };
        let reply = match self.publisher.send(node, &envelope).await {
            Ok(()) => tokio::time::timeout(REQUEST_TIMEOUT, rx).await.ok().and_then(Result::ok),
            Err(_) => None,
        };
        if let Ok(mut pending) = self.pending.lock() {
            pending.remove(&req);
        }
        reply.unwrap_or(Reply::NotHere)
    }

    /// Sends a node command to `node` and waits for its reply (`NotHere` when it cannot
    /// be reached or does not answer in time).
    pub async fn request_node(&self, node: &str, make: impl FnOnce(u64) -> NodeCmd) -> Reply {
        let req = self.next_req.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        if let Ok(mut pending) = self.pending.lock() {
            pending.insert(req, tx);
        }
        let envelope = Envelope::Node { from: self.id().to_owned(), cmd: make(req) };
        let reply = match self.publisher.send(node, &envelope).await {
            Ok(()) => tokio::time::timeout(REQUEST_TIMEOUT, rx).await.ok().and_then(Result::ok),
            Err(_) => None,
        };
        if let Ok(mut pending) = self.pending.lock() {
            pending.remove(&req);
        }
        reply.unwrap_or(Reply::NotHere)
    }

    /// Sends a command that needs no reply.
    pub async fn tell(&self, node: &str, room: &str, cmd: RoomCmd) -> Result<(), StoreError> {
        self.publisher.send(node, &Envelope::Room { room: room.to_owned(), from: self.id().to_owned(), cmd }).await
    }

    async fn reply(&self, node: &str, req: u64, reply: Reply) {
        if let Err(e) = self.publisher.send(node, &Envelope::Reply { req, reply }).await {
            warn!(node, error = %e, "reply not delivered");
        }
    }

    /// Handles what arrives on this node's channel.
    async fn on_envelope(self: &Arc<Self>, envelope: Envelope) {
        match envelope {
            Envelope::Sessions { items } => {
                let Ok(sessions) = self.sessions.lock() else { return };
                for item in items {
                    if let Some(out) = sessions.get(&item.session) {
                        let _ = out.try_send(ToClient { text: item.text.into(), close: item.close });
                    }
                }
            }
            Envelope::Reply { req, reply } => {
                let waiting = self.pending.lock().ok().and_then(|mut p| p.remove(&req));
                if let Some(tx) = waiting {
                    let _ = tx.send(reply);
                }
            }
            Envelope::Room { room, from, cmd } => self.on_room_cmd(&room, &from, cmd).await,
            Envelope::Node { from, cmd: NodeCmd::Drain { req, by } } => {
                info!(node = self.id(), from = %from, by = %by, "drain requested by an operator");
                self.drain_request.notify_one();
                self.reply(&from, req, Reply::Accepted).await;
            }
        }
    }

    async fn on_room_cmd(self: &Arc<Self>, room: &str, from: &str, cmd: RoomCmd) {
        let handle = match self.locate(room).await {
            Ok(Owner::Here(handle)) => Some(handle),
            _ => None,
        };
        let Some(handle) = handle else {
            // Not ours (any more): the asking node looks the room up again.
            match cmd {
                RoomCmd::Info { req }
                | RoomCmd::TakeSeat { req, .. }
                | RoomCmd::LeaveSeat { req, .. }
                | RoomCmd::Start { req, .. }
                | RoomCmd::Close { req, .. }
                | RoomCmd::Kick { req, .. }
                | RoomCmd::Inspect { req } => {
                    self.reply(from, req, Reply::NotHere).await;
                }
                RoomCmd::Act { session, cs, .. } => {
                    if let Some(out) = self.remote_out(from, session) {
                        let text = wire::error(
                            "room_unavailable",
                            "잠시 후 같은 요청을 다시 보내 주세요",
                            Some(room),
                            Some(cs),
                        );
                        let _ = out.try_send(ToClient { text: text.into(), close: false });
                    }
                }
                RoomCmd::Subscribe { session, .. } => {
                    if let Some(out) = self.remote_out(from, session) {
                        let text = wire::error(
                            "room_moved",
                            "방이 다른 서버로 옮겨졌어요. 다시 접속해 주세요",
                            Some(room),
                            None,
                        );
                        let _ = out.try_send(ToClient { text: text.into(), close: false });
                    }
                }
                RoomCmd::Unsubscribe { .. } | RoomCmd::Rtt { .. } => {}
            }
            return;
        };
        match cmd {
            RoomCmd::Subscribe { session, user } => {
                if let Some(out) = self.remote_out(from, session) {
                    let _ = handle.subscribe.try_send(Subscribe {
                        session: SessionId(session),
                        user: PlayerId::from(user),
                        out,
                    });
                }
            }
            RoomCmd::Unsubscribe { session } => {
                let _ = handle.unsubscribe.try_send(Unsubscribe { session: SessionId(session) });
                if let Ok(mut remotes) = self.remotes.lock() {
                    remotes.remove(&(from.to_owned(), session));
                }
            }
            RoomCmd::Act { session, user, cs, action_json } => {
                let Some(out) = self.remote_out(from, session) else { return };
                let action = serde_json::from_str(&action_json).unwrap_or(serde_json::Value::Null);
                let act = Act {
                    session: SessionId(session),
                    user: PlayerId::from(user),
                    cs,
                    action,
                    out,
                    received: Instant::now(),
                };
                let _ = handle.act.try_send(act);
            }
            RoomCmd::Rtt { user, rtt_ms } => {
                let _ = handle.rtt.try_send(RttSample { user: PlayerId::from(user), rtt_ms });
            }
            RoomCmd::Info { req } => {
                let reply = match handle.info.send(GetInfo).await {
                    Ok(info) => Reply::Info(serde_json::to_string(&info).unwrap_or_default()),
                    Err(_) => Reply::NotHere,
                };
                self.reply(from, req, reply).await;
            }
            RoomCmd::TakeSeat { req, user, name, bot } => {
                let reply = match handle.take_seat.send(TakeSeat { user: PlayerId::from(user), name, bot }).await {
                    Ok(r) => Reply::Seat(r.map(|i| serde_json::to_string(&i).unwrap_or_default()).map_err(op_error)),
                    Err(_) => Reply::NotHere,
                };
                self.reply(from, req, reply).await;
            }
            RoomCmd::LeaveSeat { req, user } => {
                let reply = match handle.leave_seat.send(LeaveSeat { user: PlayerId::from(user) }).await {
                    Ok(r) => Reply::Seat(r.map(|i| serde_json::to_string(&i).unwrap_or_default()).map_err(op_error)),
                    Err(_) => Reply::NotHere,
                };
                self.reply(from, req, reply).await;
            }
            RoomCmd::Start { req, user } => {
                let reply = match handle.start.send(Start { user: PlayerId::from(user) }).await {
                    Ok(r) => Reply::Start(r.map_err(op_error)),
                    Err(_) => Reply::NotHere,
                };
                self.reply(from, req, reply).await;
            }
            RoomCmd::Close { req, reason } => {
                let reply = match handle.close.send(Close { reason }).await {
                    Ok(r) => Reply::Admin(r.map(|i| serde_json::to_string(&i).unwrap_or_default()).map_err(op_error)),
                    Err(_) => Reply::NotHere,
                };
                self.reply(from, req, reply).await;
            }
            RoomCmd::Kick { req, user, reason } => {
                let reply = match handle.kick.send(Kick { user: PlayerId::from(user), reason }).await {
                    Ok(r) => Reply::Admin(r.map(|i| serde_json::to_string(&i).unwrap_or_default()).map_err(op_error)),
                    Err(_) => Reply::NotHere,
                };
                self.reply(from, req, reply).await;
            }
            RoomCmd::Inspect { req } => {
                let reply = match handle.inspect.send(Inspect).await {
                    Ok(view) => Reply::Admin(Ok(serde_json::to_string(&view).unwrap_or_default())),
                    Err(_) => Reply::NotHere,
                };
                self.reply(from, req, reply).await;
            }
        }
    }

    /// Starts the bus loop, heartbeats, lease renewal and failover scans on the current
    /// actix system.
    pub fn run(self: &Arc<Self>) {
        let mut rx = bus::subscribe(
            self.config.redis_url.clone(),
            self.config.prefix.clone(),
            self.id().to_owned(),
            self.deps.metrics.clone(),
        );
        let node = self.clone();
        actix::spawn(async move {
            while let Some(envelope) = rx.recv().await {
                // Each envelope in order: commands to one room keep their order.
                node.on_envelope(envelope).await;
            }
        });

        let node = self.clone();
        actix::spawn(async move {
            let every = Duration::from_millis(node.config.heartbeat_ms.max(50));
            loop {
                let draining = node.draining.load(Ordering::Relaxed);
                if let Err(e) = node.members.heartbeat(node.id(), draining, node.now_ms()).await {
                    warn!(error = %e, "heartbeat failed");
                }
                tokio::time::sleep(every).await;
            }
        });

        let node = self.clone();
        actix::spawn(async move {
            let every = Duration::from_millis((node.config.lease_ms / 3).max(50));
            loop {
                tokio::time::sleep(every).await;
                let held: Vec<(String, String)> = node
                    .held
                    .lock()
                    .map(|h| h.iter().map(|(r, t)| (r.clone(), t.clone())).collect())
                    .unwrap_or_default();
                // A held room whose actor stopped (an ended room closed for want of
                // watchers) gives its lease back instead of holding it forever. Rooms
                // enter `held` only after their actor is in the directory.
                let (held, closed): (Vec<_>, Vec<_>) =
                    held.into_iter().partition(|(room, _)| node.deps.directory.handle(room).is_some());
                for (room, token) in closed {
                    if let Err(e) = node.leases.release(&room, &token).await {
                        warn!(room = %room, error = %e, "closed room's lease not released; it will expire");
                    }
                    if let Ok(mut h) = node.held.lock() {
                        if h.get(&room) == Some(&token) {
                            h.remove(&room);
                        }
                    }
                }
                match node.leases.renew(&held).await {
                    Ok(lost) => {
                        for room in lost {
                            // The room's next append will be fenced and stop the actor.
                            warn!(room = %room, "lease lost");
                            if let Ok(mut h) = node.held.lock() {
                                h.remove(&room);
                            }
                        }
                    }
                    Err(e) => warn!(error = %e, "lease renewal failed"),
                }
            }
        });

        let node = self.clone();
        actix::spawn(async move {
            let every = Duration::from_millis((node.config.lease_ms / 2).max(100));
            loop {
                tokio::time::sleep(every).await;
                if node.draining.load(Ordering::Relaxed) {
                    continue;
                }
                if let Err(e) = node.scan_orphans().await {
                    warn!(error = %e, "failover scan failed");
                }
            }
        });
    }

    /// Drain: stop taking rooms, then hand each room over after its last append and
    /// release its lease, so the nodes placement picks next restore them at once.
    /// Rooms are handed over `HANDOVER_CONCURRENCY` at a time; whatever is not done
    /// `within` is left to its lease, which expires and lets failover restore it.
    pub async fn hand_over_all(self: &Arc<Self>, within: Duration) {
        self.draining.store(true, Ordering::Relaxed);
        self.deps.metrics.drains.inc();
        if let Err(e) = self.members.heartbeat(self.id(), true, self.now_ms()).await {
            warn!(error = %e, "draining heartbeat failed");
        }
        let held: Vec<(String, String)> =
            self.held.lock().map(|h| h.iter().map(|(r, t)| (r.clone(), t.clone())).collect()).unwrap_or_default();
        let total = held.len();
        let done = AtomicU64::new(0);
        let hand_over = futures_util::stream::iter(held).for_each_concurrent(HANDOVER_CONCURRENCY, |(room, token)| {
            let done = &done;
            async move {
                if let Some(handle) = self.deps.directory.handle(&room) {
                    let _ = handle.handover.send(crate::messages::Handover).await;
                }
                if let Err(e) = self.leases.release(&room, &token).await {
                    warn!(room = %room, error = %e, "lease not released; it will expire");
                }
                if let Ok(mut h) = self.held.lock() {
                    h.remove(&room);
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
        });
        if tokio::time::timeout(within, hand_over).await.is_err() {
            warn!(node = self.id(), "drain deadline reached; the rooms left fail over when their leases expire");
        }
        let done = done.load(Ordering::Relaxed) as usize;
        info!(node = self.id(), handed_over = done, left = total - done, "drain handover finished");
    }

    /// Leaves the membership at once (after a drain).
    pub async fn leave(&self) {
        if let Err(e) = self.members.leave(self.id()).await {
            warn!(error = %e, "leave failed; the heartbeat will expire");
        }
    }

    /// Claims every open room that has no owner and that placement gives to this node,
    /// including rooms nobody is talking to (their timers must keep running).
    async fn scan_orphans(self: &Arc<Self>) -> Result<(), StoreError> {
        let nodes = self.placeable().await?;
        for info in self.store.open_rooms().await? {
            if self.holds(&info.room_id) {
                continue;
            }
            if placement::owner(&info.room_id, nodes.iter().map(String::as_str)) != Some(self.id()) {
                continue;
            }
            if self.leases.holder(&info.room_id).await?.is_none() {
                self.activate(&info.room_id).await?;
            }
        }
        Ok(())
    }
}
