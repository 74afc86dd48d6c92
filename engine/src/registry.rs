//! The type-erased list of games: the catalog for `/api/games`, and dispatch from a game
//! id to code generic over [`Game`] (the server spawns `RoomActor<G>` through it).

use crate::game::{ChatPhrase, Game};
use crate::games::cockroach_poker::CockroachPoker;
use crate::games::halli_galli::HalliGalli;
use crate::games::tally::Tally;
use crate::options::{defaults_json, OptionMeta};
use serde::Serialize;

/// Code to run for one game type, chosen at run time by id.
pub trait GameVisitor {
    type Output;
    fn visit<G: Game>(self) -> Self::Output;
}

/// The ids of all games, in catalog order. Adding a game = one line here and one in
/// [`visit`].
pub fn game_ids() -> Vec<&'static str> {
    vec![HalliGalli::ID, CockroachPoker::ID, Tally::ID]
}

/// Runs `visitor` for the game with this id; `None` for an unknown id.
pub fn visit<V: GameVisitor>(id: &str, visitor: V) -> Option<V::Output> {
    if id == HalliGalli::ID {
        return Some(visitor.visit::<HalliGalli>());
    }
    if id == CockroachPoker::ID {
        return Some(visitor.visit::<CockroachPoker>());
    }
    if id == Tally::ID {
        return Some(visitor.visit::<Tally>());
    }
    None
}

/// One catalog entry (`GET /api/games`).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CatalogEntry {
    pub id: &'static str,
    pub name_ko: &'static str,
    pub min_players: usize,
    pub max_players: usize,
    pub state_version: u32,
    pub default_options: serde_json::Value,
    pub options: Vec<OptionMeta>,
    /// Quick-chat phrases, on games that have quick chat only (`Game::chat_phrases`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chat_phrases: Option<&'static [ChatPhrase]>,
}

struct Describe;

impl GameVisitor for Describe {
    type Output = CatalogEntry;
    fn visit<G: Game>(self) -> CatalogEntry {
        let options = G::options_meta();
        CatalogEntry {
            id: G::ID,
            name_ko: G::NAME_KO,
            min_players: G::MIN_PLAYERS,
            max_players: G::MAX_PLAYERS,
            state_version: G::STATE_VERSION,
            default_options: defaults_json(&options),
            options,
            chat_phrases: Some(G::chat_phrases()).filter(|phrases| !phrases.is_empty()),
        }
    }
}

struct Listed;

impl GameVisitor for Listed {
    type Output = bool;
    fn visit<G: Game>(self) -> bool {
        G::LISTED
    }
}

/// Whether a room of game `id` is in the players' lobby when its creator did not say
/// ([`Game::LISTED`]); `false` for an unknown game.
pub fn listed_by_default(id: &str) -> bool {
    visit(id, Listed).unwrap_or(false)
}

/// The whole catalog.
pub fn catalog() -> Vec<CatalogEntry> {
    game_ids().into_iter().filter_map(|id| visit(id, Describe)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_game_is_reachable_by_its_id_and_described() {
        let catalog = catalog();
        assert_eq!(catalog.len(), game_ids().len());
        for entry in &catalog {
            assert!(!entry.name_ko.is_empty());
            assert!(entry.min_players >= 1 && entry.min_players <= entry.max_players);
            for option in &entry.options {
                assert!(!option.title.is_empty(), "{}.{} has no title", entry.id, option.key);
                assert!(option.choices.iter().all(|c| !c.label.is_empty()), "{}.{}", entry.id, option.key);
                assert!(
                    option.choices.iter().any(|c| c.value == option.default),
                    "{}.{} default",
                    entry.id,
                    option.key
                );
            }
        }
        assert!(visit("no-such-game", Describe).is_none());
    }

    #[test]
    fn player_games_are_listed_by_default_and_tally_is_not() {
        assert!(listed_by_default("halli-galli"));
        assert!(listed_by_default("cockroach-poker"));
        assert!(!listed_by_default("tally"));
        assert!(!listed_by_default("no-such-game"));
    }

    #[test]
    fn catalog_json_uses_protocol_names() {
        let json = serde_json::to_value(catalog()).unwrap();
        let tally = json.as_array().unwrap().iter().find(|g| g["id"] == "tally").unwrap();
        for key in ["id", "nameKo", "minPlayers", "maxPlayers", "defaultOptions", "options"] {
            assert!(tally.get(key).is_some(), "missing {key}");
        }
        let option = &tally["options"][0];
        for key in ["key", "title", "choices", "default"] {
            assert!(option.get(key).is_some(), "missing option {key}");
        }
        assert!(option["choices"][0].get("label").is_some());
        // Quick chat: only games that have it name their phrases, each a key and a label.
        assert!(tally.get("chatPhrases").is_none());
        let cockroach = json.as_array().unwrap().iter().find(|g| g["id"] == "cockroach-poker").unwrap();
        let phrases = cockroach["chatPhrases"].as_array().unwrap();
        for (key, label) in [("really", "정말이야!"), ("doubt", "의심스러운데?")] {
            assert!(phrases.iter().any(|p| p["key"] == key && p["label"] == label), "missing phrase {key}");
        }
    }
}
