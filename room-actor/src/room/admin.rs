//! What operators do to a room: close it (a running game ends with no ranking), kick a
//! user out for good, and inspect its last inputs.

use super::{Phase, RoomActor};
use crate::directory::RoomInfo;
use crate::log::LogEntry;
use crate::messages::*;
use crate::wire;
use actix::prelude::*;
use engine::{Actor as GameActor, Game, GameResult, PlayerId};
use std::collections::VecDeque;
use tracing::info;

/// The largest operator reason kept (characters).
const MAX_ADMIN_REASON: usize = 200;

#[derive(Default)]
pub(super) struct AdminState {
    /// Users an operator kicked (they may not sit or watch here again).
    pub(super) kicked: Vec<PlayerId>,
    /// An operator closed the room before its game started: it reports `ended`.
    pub(super) closed: bool,
    /// An operator is closing the running game: once its record is stored the room
    /// tells its watchers why and stops.
    pub(super) closing: Option<String>,
    /// The last applied inputs, for operators ([`Inspect`]), kept as they were logged:
    /// an operator's view of them is made only when one asks (every input passes here,
    /// and almost none is ever inspected).
    pub(super) recent: VecDeque<Recent>,
}

/// One applied input as [`Inspect`] will show it.
pub(super) struct Recent {
    seq: u64,
    at: i64,
    actor: GameActor,
    input_json: String,
    auto: bool,
}

impl From<LogEntry> for Recent {
    fn from(entry: LogEntry) -> Recent {
        Recent { seq: entry.seq, at: entry.at, actor: entry.actor, input_json: entry.input_json, auto: entry.auto }
    }
}

impl From<&LogEntry> for Recent {
    fn from(entry: &LogEntry) -> Recent {
        Recent {
            seq: entry.seq,
            at: entry.at,
            actor: entry.actor.clone(),
            input_json: entry.input_json.clone(),
            auto: entry.auto,
        }
    }
}

impl AdminState {
    /// Keeps `entry` among the last [`RECENT_ENTRIES`] applied inputs.
    pub(super) fn remember(&mut self, entry: impl Into<Recent>) {
        if self.recent.len() >= RECENT_ENTRIES {
            self.recent.pop_front();
        }
        self.recent.push_back(entry.into());
    }
}

/// The kind of a logged input for operators: `client:<type>` / `system:<type>` from its
/// JSON (`{"client":{"type":"flip",…}}`), never any other field.
fn input_kind(input_json: &str) -> String {
    let value: serde_json::Value = serde_json::from_str(input_json).unwrap_or(serde_json::Value::Null);
    let Some((side, inner)) = value.as_object().and_then(|o| o.iter().next()) else { return "unknown".to_owned() };
    let kind = match inner {
        serde_json::Value::String(s) => s.as_str(),
        serde_json::Value::Object(o) => o.get("type").and_then(serde_json::Value::as_str).unwrap_or("?"),
        _ => "?",
    };
    // Only short identifier-like kinds are shown (a game that tagged an action with data
    // would otherwise leak it here).
    let kind: String = kind.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '_').take(32).collect();
    format!("{side}:{kind}")
}

fn recent_entry(recent: &Recent) -> RecentEntry {
    RecentEntry {
        seq: recent.seq,
        at: recent.at,
        actor: match &recent.actor {
            GameActor::Player(p) => format!("player:{p}"),
            GameActor::Server => "system".to_owned(),
        },
        kind: input_kind(&recent.input_json),
        auto: recent.auto,
    }
}

/// The result of a game an operator ended: no ranking, the reason in the summary.
pub(super) fn operator_result(reason: &str) -> GameResult {
    let summary = if reason.is_empty() {
        "운영자가 게임을 끝냈어요".to_owned()
    } else {
        format!("운영자가 게임을 끝냈어요: {reason}")
    };
    GameResult {
        ranking: Vec::new(),
        scores: None,
        summary,
        reason: engine::ResultReason::Abandoned,
        details: serde_json::json!({"closedBy": "operator", "reason": reason}),
    }
}

fn admin_reason(reason: &str) -> String {
    let reason: String = reason.trim().chars().filter(|c| !c.is_control()).take(MAX_ADMIN_REASON).collect();
    if reason.is_empty() {
        "운영 정책".to_owned()
    } else {
        reason
    }
}

impl<G: Game> RoomActor<G> {
    /// An operator closed the room: every watcher is told why, the room is saved as ended
    /// (it leaves the open-room set) and the actor stops.
    pub(super) fn close_now(&mut self, ctx: &mut Context<Self>, reason: &str) {
        self.admin.closed = true;
        self.publish_info();
        self.dismiss_all("room_closed", &format!("운영자가 방을 닫았어요: {reason}"));
        info!(room = %self.id, reason, "room closed by an operator");
        ctx.stop();
    }
}

impl<G: Game> Handler<Close> for RoomActor<G> {
    type Result = Result<RoomInfo, RoomOpError>;

    fn handle(&mut self, msg: Close, ctx: &mut Context<Self>) -> Self::Result {
        let reason = admin_reason(&msg.reason);
        if self.admin.closing.is_some() || self.admin.closed {
            return Err(RoomOpError::new(409, "already_closed", "이미 닫힌 방이에요"));
        }
        if self.lobby.starting || self.pipeline.appending {
            // The start entry or an input is being stored: a moment later the room is in
            // a definite state.
            return Err(RoomOpError::new(409, "busy", "잠시 후 다시 시도해 주세요"));
        }
        if matches!(self.phase, Phase::Playing(_)) {
            let result = operator_result(&reason);
            let now = self.time.now();
            self.admin.closing = Some(reason);
            self.finish(ctx, result, now);
        } else {
            self.close_now(ctx, &reason);
        }
        Ok(self.ended_info())
    }
}

impl<G: Game> Handler<Kick> for RoomActor<G> {
    type Result = Result<RoomInfo, RoomOpError>;

    fn handle(&mut self, msg: Kick, ctx: &mut Context<Self>) -> Self::Result {
        let reason = admin_reason(&msg.reason);
        let watching: Vec<SessionId> =
            self.audience.subs.iter().filter(|(_, sub)| sub.user == msg.user).map(|(session, _)| *session).collect();
        let seated = self.is_seated(&msg.user) && !self.is_bot(&msg.user);
        if !seated && watching.is_empty() {
            return Err(RoomOpError::new(404, "not_in_room", "이 방에 없는 사용자예요"));
        }
        if !self.admin.kicked.contains(&msg.user) {
            self.admin.kicked.push(msg.user.clone());
        }
        let text: ByteString =
            wire::error("kicked", &format!("운영자가 이 방에서 내보냈어요: {reason}"), Some(&self.id), None).into();
        for session in watching {
            if let Some(sub) = self.audience.subs.remove(&session) {
                sub.out.do_send(ToClient::frame(text.clone()));
                if self.left(sub.user) {
                    self.rearm(ctx);
                }
            }
        }
        info!(room = %self.id, user = %msg.user, reason, "user kicked by an operator");
        if seated
            && (matches!(self.phase, Phase::Playing(_))
                || (matches!(self.phase, Phase::Waiting) && !self.lobby.starting))
        {
            // The seat goes exactly as if they had left (a forfeit or a spent grace in a
            // running game); that also saves the info with the kicked list. The leave is
            // done when `handle` returns (its future only waits for the save): the
            // operator is answered either way, as before.
            drop(<Self as Handler<LeaveSeat>>::handle(self, LeaveSeat { user: msg.user }, ctx));
            return Ok(self.info());
        }
        self.publish_info();
        Ok(self.info())
    }
}

impl<G: Game> Handler<Unkick> for RoomActor<G> {
    type Result = Result<RoomInfo, RoomOpError>;

    fn handle(&mut self, msg: Unkick, _ctx: &mut Context<Self>) -> Self::Result {
        let before = self.admin.kicked.len();
        self.admin.kicked.retain(|user| user != &msg.user);
        if self.admin.kicked.len() == before {
            return Err(RoomOpError::new(404, "not_kicked", "이 방에서 내보낸 적 없는 사용자예요"));
        }
        info!(room = %self.id, user = %msg.user, "kick lifted by an operator");
        // Saved with the room's info, so the room forgets the kick on every node.
        self.publish_info();
        Ok(self.info())
    }
}

impl<G: Game> Handler<Inspect> for RoomActor<G> {
    type Result = Result<AdminView, RoomOpError>;

    fn handle(&mut self, _msg: Inspect, _ctx: &mut Context<Self>) -> Self::Result {
        let seq = match &self.phase {
            Phase::Waiting => 0,
            Phase::Playing(run) | Phase::Ended(run, _) => run.seq,
        };
        Ok(AdminView {
            info: self.info(),
            seq,
            subscribers: self.audience.subs.len(),
            recent: self.admin.recent.iter().map(recent_entry).collect(),
        })
    }
}

#[cfg(test)]
mod admin_tests {
    use super::*;

    #[test]
    fn input_kinds_name_the_action_type_and_nothing_else() {
        assert_eq!(input_kind(r#"{"client":{"type":"offer","cardId":17,"claim":"rat"}}"#), "client:offer");
        assert_eq!(input_kind(r#"{"system":"timeout"}"#), "system:timeout");
        assert_eq!(input_kind(r#"{"system":{"type":"tick","hand":[1,2]}}"#), "system:tick");
        assert_eq!(input_kind(r#"{"client":{"type":"a\"b{c}"}}"#), "client:abc");
        assert_eq!(input_kind("garbage"), "unknown");
    }
}
