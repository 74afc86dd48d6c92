//! The type-erased list of games: the catalog for `/api/games`, and dispatch from a game
//! id to code generic over [`Game`] (the server spawns `RoomActor<G>` through it).

use crate::game::Game;
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
        }
    }
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
    }
}
