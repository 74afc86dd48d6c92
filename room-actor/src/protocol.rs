//! The one room protocol: how a room verb, written once as a message type in
//! `messages.rs` and handled once by the room actor, reaches a room here or on another
//! node.
//!
//! There are two kinds of verb, and `messages.rs` lists each kind once
//! (`room_requests!` and `session_verbs!`, defined here):
//!
//! - A **request** (`Ask`) is answered: `Result<Answer, RoomOpError>`. The HTTP API's
//!   and the operators' verbs (seats, start, close, kick, info, inspect).
//! - A **session verb** (`Tell`) comes from a WebSocket session and is answered on the
//!   session's `out` (subscribe, act, chat, RTT samples). It arrives wrapped in
//!   `FromSession`, which says who sent it and where its answers go.
//!
//! The lists generate the rest: the [`Request`](crate::messages::Request) and
//! [`SessionVerb`](crate::messages::SessionVerb) enums, which carry any verb of their
//! kind between nodes (bincode, inside a `RoomCmd`), the [`Answer`](crate::messages::Answer)
//! enum (JSON, inside a `Reply`), and the dispatch of an enum value to the room actor's
//! typed handler. [`RoomRef`](crate::room_ref::RoomRef) decides in one place whether a
//! verb goes to this node's actor or over the bus, and `cluster/node/serve.rs` turns
//! whatever arrives back into the same message, so neither names a verb.
//!
//! **Rolling upgrades.** A verb crosses between nodes as bytes of its own inside a
//! `RoomCmd`, so a node that does not know a verb (an older roomd) still decodes the
//! frame around it: a request it cannot read is answered at once with
//! `room_unavailable` (the caller may try again once the upgrade is done), a session
//! verb it cannot read is dropped alone and logged. Adding a verb therefore needs no
//! bus frame version bump; appending it last to its list keeps the others' bincode
//! numbers.
//!
//! This file holds the mechanism only (the macros, and the bytes a verb crosses as): it
//! names no verb and no type of `messages.rs`, whose lists expand to the verb enums there.
//! The macros name `Ask`, `Tell`, `Sender`, `FromSession` and `RoomOpError` as the caller
//! has them in scope (`messages.rs` defines them).

use serde::Serialize;

/// Bincode, as every bus envelope (the verbs hold no JSON values).
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    // Plain structs of strings and numbers: encoding into a `Vec` cannot fail.
    bincode::serde::encode_to_vec(value, bincode::config::standard()).unwrap_or_default()
}

/// Lists the request verbs: `Verb -> Answer`, in a fixed order (append new ones last:
/// an enum's bincode tag is its position). Generates `Ask` for each, the `Request` and
/// `Answer` enums, and `Request::send_to`, which hands a request to a room actor's
/// typed handler.
macro_rules! room_requests {
    ($($(#[$doc:meta])* $verb:ident -> $answer:ty),* $(,)?) => {
        /// Any request verb, as one value (between nodes: bincode inside `RoomCmd::Ask`).
        #[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
        pub enum Request {
            $($(#[$doc])* $verb($verb)),*
        }

        /// The answer to any request verb (between nodes: JSON inside `Reply::Answer`,
        /// since room info carries the game's options as JSON).
        #[derive(Debug, serde::Serialize, serde::Deserialize)]
        pub enum Answer {
            $($verb($answer)),*
        }

        $(impl Ask for $verb {
            type Answer = $answer;

            fn into_request(self) -> Request {
                Request::$verb(self)
            }

            fn from_answer(answer: Answer) -> Option<$answer> {
                #[allow(unreachable_patterns)]
                match answer {
                    Answer::$verb(answer) => Some(answer),
                    _ => None,
                }
            }
        })*

        /// Any request, as it came (from another node): answered with any answer.
        impl Ask for Request {
            type Answer = Answer;

            fn into_request(self) -> Request {
                self
            }

            fn from_answer(answer: Answer) -> Option<Answer> {
                Some(answer)
            }
        }

        impl Request {
            /// The verb's name, for logs.
            pub fn name(&self) -> &'static str {
                match self {
                    $(Request::$verb(_) => stringify!($verb)),*
                }
            }

            /// Sends the request to a room actor and awaits its answer; a stopped actor
            /// or a full mailbox is `room_unavailable`.
            pub fn send_to<A>(
                self,
                addr: &actix::Addr<A>,
            ) -> futures_util::future::LocalBoxFuture<'static, Result<Answer, RoomOpError>>
            where
                A: actix::Actor<Context = actix::Context<A>> $(+ actix::Handler<$verb>)*,
            {
                match self {
                    $(Request::$verb(verb) => {
                        let sent = addr.send(verb);
                        Box::pin(async move { sent.await?.map(Answer::$verb) })
                    })*
                }
            }
        }
    };
}
pub(crate) use room_requests;

/// Lists the session verbs, in a fixed order (append new ones last). Generates `Tell`
/// for each, the `SessionVerb` enum, and `SessionVerb::try_send_to`, which hands a verb
/// to a room actor's typed handler at once (a full mailbox refuses it).
macro_rules! session_verbs {
    ($($(#[$doc:meta])* $verb:ident),* $(,)?) => {
        /// Any session verb, as one value (between nodes: bincode inside `RoomCmd::Tell`).
        #[derive(Debug, serde::Serialize, serde::Deserialize)]
        pub enum SessionVerb {
            $($(#[$doc])* $verb($verb)),*
        }

        $(impl Tell for $verb {
            fn into_verb(self) -> SessionVerb {
                SessionVerb::$verb(self)
            }
        })*

        /// Any session verb, as it came (from another node).
        impl Tell for SessionVerb {
            fn into_verb(self) -> SessionVerb {
                self
            }
        }

        impl SessionVerb {
            /// The verb's name, for logs.
            pub fn name(&self) -> &'static str {
                match self {
                    $(SessionVerb::$verb(_) => stringify!($verb)),*
                }
            }

            /// Hands the verb to a room actor without waiting; `room_unavailable` when its
            /// mailbox is full or it stopped.
            pub fn try_send_to<A>(self, addr: &actix::Addr<A>, from: Sender) -> Result<(), RoomOpError>
            where
                A: actix::Actor<Context = actix::Context<A>> $(+ actix::Handler<FromSession<$verb>>)*,
            {
                match self {
                    $(SessionVerb::$verb(verb) => addr.try_send(from.with(verb)).map_err(|_| RoomOpError::unavailable())),*
                }
            }
        }
    };
}
pub(crate) use session_verbs;
