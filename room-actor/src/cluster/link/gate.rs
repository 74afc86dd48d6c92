//! The receiver's side of the order rule ([`Gate`]): a link's frames wait for its mark
//! through Redis, and what a link its sender gave up still brings is dropped. Apart
//! because it is plain state with no socket: the node's receive loop keeps it and feeds
//! it the links' frames and the marks from Redis.

use crate::cluster::bus::Delivered;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};
use tracing::warn;

/// How long a link's frames wait for its mark before they are delivered anyway (the mark
/// was lost with a Redis subscription that dropped).
pub const MARK_WAIT: Duration = Duration::from_secs(1);

/// The receiver's side of the order rule: a link's frames wait until its mark has come
/// through Redis (everything the dialer published before it has been handed on), or
/// [`MARK_WAIT`] has passed; and once its sender's `Unlink` has come through Redis, what
/// the link still brings is dropped ([`Gate::is_cut`]).
#[derive(Default)]
pub struct Gate {
    open: HashSet<u64>,
    held: HashMap<u64, (Instant, Vec<Delivered>)>,
    /// Links their sender gave up, until they close.
    cut: HashSet<u64>,
}

impl Gate {
    /// The mark for `link` came through Redis: its held frames, in order, to deliver now.
    pub fn mark(&mut self, link: u64) -> Vec<Delivered> {
        self.open.insert(link);
        self.held.remove(&link).map(|(_, frames)| frames).unwrap_or_default()
    }

    /// A frame from `link`: to deliver now, or held for its mark (`None` too when the link
    /// was cut: check [`Gate::is_cut`] first to count it).
    pub fn frame(&mut self, link: u64, delivered: Delivered, now: Instant) -> Option<Delivered> {
        if self.cut.contains(&link) {
            return None;
        }
        if self.open.contains(&link) {
            return Some(delivered);
        }
        self.held.entry(link).or_insert_with(|| (now, Vec::new())).1.push(delivered);
        None
    }

    /// `link` closed: whatever it still held, to deliver now (late beats lost).
    pub fn closed(&mut self, link: u64) -> Vec<Delivered> {
        self.open.remove(&link);
        self.cut.remove(&link);
        self.held.remove(&link).map(|(_, frames)| frames).unwrap_or_default()
    }

    /// `link`'s sender gave it up and said so through Redis (`Envelope::Unlink`): what it
    /// held (sent before the mark, so before everything after it) to deliver now, and from
    /// now on its frames are dropped until it closes. A link that already closed (its
    /// receiver saw the end before the mark came) is not remembered.
    pub fn cut(&mut self, link: u64) -> Vec<Delivered> {
        let held = self.held.remove(&link).map(|(_, frames)| frames);
        if self.open.remove(&link) || held.is_some() {
            self.cut.insert(link);
        }
        held.unwrap_or_default()
    }

    /// Whether `link` was cut: a frame from it is to be dropped, not delivered.
    pub fn is_cut(&self, link: u64) -> bool {
        self.cut.contains(&link)
    }

    /// Links that waited [`MARK_WAIT`] for their mark: opened, their frames to deliver now.
    pub fn expired(&mut self, now: Instant) -> Vec<Delivered> {
        let late: Vec<u64> = self
            .held
            .iter()
            .filter(|(_, (since, _))| now.duration_since(*since) >= MARK_WAIT)
            .map(|(l, _)| *l)
            .collect();
        let mut out = Vec::new();
        for link in late {
            warn!(link, "a peer link's mark did not come through Redis; its frames go on without it");
            out.extend(self.mark(link));
        }
        out
    }

    pub fn holding(&self) -> bool {
        !self.held.is_empty()
    }
}
