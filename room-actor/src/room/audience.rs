//! The audience: subscribed sessions, the frames fanned out to them (one view per
//! distinct viewer), and presence (who of the seated is away, and since when).

use super::{named, Phase, RoomActor};
use crate::messages::*;
use crate::wire;
use actix::prelude::*;
use engine::schedule::Presence;
use engine::{Game, PlayerId, ViewCtx};
use std::collections::{BTreeMap, HashSet};
use tracing::{error, warn};

pub(super) struct Sub {
    pub(super) user: PlayerId,
    pub(super) viewer: Option<PlayerId>,
    pub(super) out: Out,
}

#[derive(Default)]
pub(super) struct Audience {
    pub(super) subs: crate::FastMap<SessionId, Sub>,
    /// Open sessions per seated user; a seated human with none is disconnected.
    pub(super) sessions_of: crate::FastMap<PlayerId, usize>,
    pub(super) disconnected_since: BTreeMap<PlayerId, i64>,
    /// Players who left the running game: away for good, whatever their sockets do
    /// (watching again does not give their grace back).
    pub(super) gone: HashSet<PlayerId>,
    /// The players' round-trip times as their sessions measure them.
    pub(super) rtt: BTreeMap<PlayerId, u32>,
    /// Counts the changes of `rtt`.
    pub(super) rtt_version: u64,
    /// When each player last sent a quick-chat phrase (room time, ms).
    pub(super) chatted_at: crate::FastMap<PlayerId, i64>,
}

impl<G: Game> RoomActor<G> {
    /// Sends without waiting; `false` if the session's mailbox is full (a slow reader).
    pub(super) fn send(out: &Out, text: impl Into<ByteString>) -> bool {
        Self::send_frame(out, ToClient::frame(text))
    }

    /// [`Self::send`] for a frame with its flags (e.g. [`ToClient::stale`]).
    pub(super) fn send_frame(out: &Out, frame: ToClient) -> bool {
        !matches!(out.try_send(frame), Err(SendError::Full(_)))
    }

    /// Sends to every subscriber; a subscriber that cannot keep up is dropped and its
    /// socket told to close, rather than the room buffering for it without bound.
    pub(super) fn send_all(&mut self, mut text_for: impl FnMut(&Sub) -> ByteString) {
        self.send_all_frames(|sub| ToClient::frame(text_for(sub)));
    }

    /// [`Self::send_all`] for frames with their flags.
    pub(super) fn send_all_frames(&mut self, mut frame_for: impl FnMut(&Sub) -> ToClient) {
        let mut slow = Vec::new();
        for (session, sub) in &self.audience.subs {
            if !Self::send_frame(&sub.out, frame_for(sub)) {
                slow.push(*session);
            }
        }
        for session in slow {
            if let Some(sub) = self.audience.subs.remove(&session) {
                warn!(room = %self.id, user = %sub.user, "slow subscriber dropped");
                let text = wire::error(
                    "slow_consumer",
                    "연결이 너무 느려서 끊었어요. 다시 접속해 주세요",
                    Some(&self.id),
                    None,
                );
                // do_send ignores the mailbox bound: this last message always arrives.
                sub.out.do_send(ToClient::closing(text));
                // A seated player dropped is away from now on; the timer picks that up when
                // it is re-armed right after this broadcast (`commit`).
                let _ = self.left(sub.user);
            }
        }
    }

    /// Every watcher gets the error frame `code` and is unsubscribed (the room is about
    /// to stop).
    pub(super) fn dismiss_all(&mut self, code: &str, reason: &str) {
        self.dismiss_all_with(ToClient::frame(wire::error(code, reason, Some(&self.id), None)));
    }

    /// [`Self::dismiss_all`] with a frame of its own (e.g. a stale-route `room_moved`).
    pub(super) fn dismiss_all_with(&mut self, frame: ToClient) {
        self.send_all_frames(|_| frame.clone());
        self.audience.subs.clear();
    }

    fn view_json(&self, state: &G::State, viewer: Option<&PlayerId>, now: i64, full: bool) -> String {
        let ctx = ViewCtx { now, rtt: Some(&self.audience.rtt) };
        let result = if full {
            serde_json::to_string(&G::sync_view(state, viewer, &ctx))
        } else {
            serde_json::to_string(&G::view(state, viewer, &ctx))
        };
        result.unwrap_or_else(|e| {
            error!(room = %self.id, error = %e, "view does not serialize");
            "null".to_owned()
        })
    }

    /// Sends one subscriber the full picture: `sync`, and `result` if the game is over.
    fn sync_one(&self, sub: &Sub, now: i64) {
        match &self.phase {
            Phase::Waiting => {
                let info = serde_json::to_string(&self.info()).unwrap_or_else(|_| "null".into());
                Self::send(&sub.out, wire::sync(&self.id, 0, &info));
            }
            Phase::Playing(run) | Phase::Ended(run, _) => {
                Self::send(
                    &sub.out,
                    wire::sync(&self.id, run.seq, &self.view_json(&run.state, sub.viewer.as_ref(), now, true)),
                );
                if let Phase::Ended(_, result) = &self.phase {
                    let result_json =
                        serde_json::to_string(&named(result, &run.start)).unwrap_or_else(|_| "null".into());
                    Self::send(&sub.out, wire::result(&self.id, &run.game_pk, &result_json));
                }
            }
        }
    }

    pub(super) fn sync_all(&mut self, now: i64) {
        for sub in self.audience.subs.values() {
            self.sync_one(sub, now);
        }
    }

    /// One `update` per subscriber: the views of the distinct viewers built at once
    /// (`Game::views_json`: a game may serialize what they share once), and viewers shown
    /// the same update share one text (a remote node gets it once).
    pub(super) fn broadcast_update(&mut self, events: &[G::Event], now: i64) {
        let Phase::Playing(run) = &self.phase else { return };
        let events_json = G::events_json(events).unwrap_or_else(|e| {
            error!(room = %self.id, error = %e, "events do not serialize");
            "[]".to_owned()
        });
        let mut viewers: Vec<Option<&PlayerId>> = Vec::new();
        for sub in self.audience.subs.values() {
            if !viewers.contains(&sub.viewer.as_ref()) {
                viewers.push(sub.viewer.as_ref());
            }
        }
        let ctx = ViewCtx { now, rtt: Some(&self.audience.rtt) };
        let views = G::views_json(&run.state, &viewers, &ctx).unwrap_or_else(|e| {
            error!(room = %self.id, error = %e, "view does not serialize");
            vec!["null".to_owned(); viewers.len()]
        });
        // One frame per distinct view: viewers who see the same (a game without hidden
        // information, spectators of a public table) share one text, built once.
        let mut texts: Vec<(Option<PlayerId>, ByteString)> = Vec::with_capacity(viewers.len());
        let mut built: Vec<(String, ByteString)> = Vec::with_capacity(viewers.len());
        for (viewer, view) in viewers.iter().zip(views) {
            let shared = match built.iter().find(|(v, _)| *v == view) {
                Some((_, same)) => same.clone(),
                None => {
                    let text = ByteString::from(wire::update(&self.id, run.seq, &view, &events_json));
                    built.push((view, text.clone()));
                    text
                }
            };
            texts.push((viewer.cloned(), shared));
        }
        self.send_all(|sub| {
            texts.iter().find(|(viewer, _)| *viewer == sub.viewer).map(|(_, text)| text.clone()).unwrap_or_default()
        });
    }

    /// Who is away and since when, as the schedule reads it.
    pub(super) fn presence(&self) -> Presence<'_> {
        Presence {
            disconnected_since: &self.audience.disconnected_since,
            room_grace_ms: i64::from(self.config.grace_sec) * 1000,
            hold_until: self.time.hold_until,
        }
    }

    /// One session of `user` is gone; `true` if that made a seated human disconnected
    /// (the timer must then be re-armed for their grace).
    pub(super) fn left(&mut self, user: PlayerId) -> bool {
        let remaining = self.audience.sessions_of.get_mut(&user).map(|n| {
            *n = n.saturating_sub(1);
            *n
        });
        if remaining.unwrap_or(0) > 0 {
            return false;
        }
        self.audience.sessions_of.remove(&user);
        if self.is_seated(&user) && !self.is_bot(&user) && matches!(self.phase, Phase::Playing(_)) {
            // Away since now, unless already away for longer (a player who left the game
            // keeps the grace they were given as spent).
            let now = self.time.now();
            self.audience.disconnected_since.entry(user).or_insert(now);
            return true;
        }
        false
    }
}

impl<G: Game> Handler<FromSession<Subscribe>> for RoomActor<G> {
    type Result = ();

    fn handle(&mut self, msg: FromSession<Subscribe>, ctx: &mut Context<Self>) {
        if self.admin.kicked.contains(&msg.user) {
            Self::send(&msg.out, wire::error("kicked", super::lobby::KICKED_REASON, Some(&self.id), None));
            return;
        }
        let seated = self.is_seated(&msg.user);
        let viewer = (seated && !matches!(self.phase, Phase::Waiting)).then(|| msg.user.clone());
        let sub = Sub { user: msg.user.clone(), viewer, out: msg.out };
        let now = self.time.now();
        self.sync_one(&sub, now);
        if let Some(old) = self.audience.subs.insert(msg.session, sub) {
            // The same session subscribing again: count its presence once.
            if let Some(n) = self.audience.sessions_of.get_mut(&old.user) {
                *n = n.saturating_sub(1);
            }
        }
        *self.audience.sessions_of.entry(msg.user.clone()).or_insert(0) += 1;
        if let Some(h) = self.timers.close_timer.take() {
            ctx.cancel_future(h);
        }
        if !self.audience.gone.contains(&msg.user) && self.audience.disconnected_since.remove(&msg.user).is_some() {
            self.rearm(ctx);
        }
    }
}

impl<G: Game> Handler<FromSession<Unsubscribe>> for RoomActor<G> {
    type Result = ();

    fn handle(&mut self, msg: FromSession<Unsubscribe>, ctx: &mut Context<Self>) {
        let Some(sub) = self.audience.subs.remove(&msg.session) else { return };
        if self.left(sub.user) {
            self.rearm(ctx);
        }
        self.close_if_abandoned(ctx);
    }
}

impl<G: Game> Handler<FromSession<Rtt>> for RoomActor<G> {
    type Result = ();

    fn handle(&mut self, msg: FromSession<Rtt>, _ctx: &mut Context<Self>) {
        // While the start entry is being stored, the table stays as that entry records it
        // (the first views show it); the next sample comes with the next ping.
        if self.is_seated(&msg.user)
            && !self.lobby.starting
            && self.audience.rtt.insert(msg.user, msg.verb.rtt_ms) != Some(msg.verb.rtt_ms)
        {
            self.audience.rtt_version += 1;
        }
    }
}
