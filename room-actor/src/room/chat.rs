//! Quick chat (`PROTOCOL.md`, Cockroach Poker `quickChat`): a seated player sends one of
//! the game's fixed phrases and every subscriber, spectators included, sees it by the
//! sender's seat. Not an input: it never reaches the log, so replays do not show it and
//! it costs no store write. A room on another node reaches its watchers the way updates
//! do (each subscriber's `out`).

use super::RoomActor;
use crate::messages::{ByteString, Chat, FromSession, ToClient};
use crate::wire;
use actix::prelude::*;
use engine::Game;

/// One phrase per player per this long (`PROTOCOL.md`: "beyond one per 2 s").
pub(super) const CHAT_EVERY_MS: i64 = 2_000;

impl<G: Game> Handler<FromSession<Chat>> for RoomActor<G> {
    type Result = ();

    fn handle(&mut self, msg: FromSession<Chat>, _ctx: &mut Context<Self>) {
        let refuse = |code: &str, reason: &str| {
            let _ = msg.out.try_send(ToClient::frame(wire::error(code, reason, Some(&self.id), None)));
        };
        if !G::chat_on(&self.config.options) {
            return refuse("chat_off", "이 방은 빠른 대화를 쓰지 않아요");
        }
        if !G::chat_phrases().iter().any(|p| p.key == msg.verb.phrase) {
            return refuse("bad_message", "없는 빠른 대화 문구예요");
        }
        // Players only: spectators watch, and a player who left the game is one of them.
        if !self.is_seated(&msg.user) || self.is_bot(&msg.user) || self.audience.gone.contains(&msg.user) {
            return refuse("not_seated", "자리에 앉은 사람만 빠른 대화를 할 수 있어요");
        }
        let now = self.time.now();
        if self.audience.chatted_at.get(&msg.user).is_some_and(|&at| now - at < CHAT_EVERY_MS) {
            return refuse("rate_limited", "빠른 대화는 2초에 한 번만 보낼 수 있어요");
        }
        self.audience.chatted_at.insert(msg.user.clone(), now);
        self.deps.metrics.chat_phrases.inc();
        let text = ByteString::from(wire::chat(&self.id, msg.user.as_str(), &msg.verb.phrase));
        self.send_all(|_| text.clone());
    }
}
