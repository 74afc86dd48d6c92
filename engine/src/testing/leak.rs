//! The leak checker: does this JSON carry any of these secrets?

use crate::game::Secret;
use serde_json::Value;

/// How a field may hold card ids: a singular name (`id`, `card`, `…Id`, `…_id`) holds
/// one id as a number; a plural name (`ids`, `cards`, `…Ids`, `…_ids`) holds a list of
/// them. Numbers under plural names are counts (`"cards": 54` in a result row), and
/// numbers in any other field (counts, versions) are never ids.
#[derive(Clone, Copy, PartialEq, Eq)]
enum CardField {
    One,
    Many,
}

fn card_field(key: &str) -> Option<CardField> {
    if matches!(key, "ids" | "cards") || key.ends_with("Ids") || key.ends_with("_ids") {
        Some(CardField::Many)
    } else if matches!(key, "id" | "card") || key.ends_with("Id") || key.ends_with("_id") {
        Some(CardField::One)
    } else {
        None
    }
}

fn holds_card(field: CardField, value: &Value, card: u32) -> bool {
    let is_card = |v: &Value| matches!(v, Value::Number(n) if n.as_u64() == Some(u64::from(card)));
    match (field, value) {
        (CardField::One, v) => is_card(v),
        (_, Value::Array(items)) => items.iter().any(is_card),
        (CardField::Many, _) => false,
    }
}

/// A path segment, formatted only when a leak is reported (the walk runs on every
/// view of every step of the harness, and almost never finds anything).
enum Seg<'a> {
    Key(&'a str),
    Index(usize),
}

fn path_text(path: &[Seg<'_>]) -> String {
    let mut out = String::from("$");
    for seg in path {
        match seg {
            Seg::Key(k) => {
                out.push('.');
                out.push_str(k);
            }
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

fn walk<'a>(value: &'a Value, path: &mut Vec<Seg<'a>>, secrets: &[Secret], found: &mut Vec<String>) {
    for secret in secrets {
        if let Secret::Value(v) = secret {
            if v == value {
                found.push(format!("{}: hidden value {v}", path_text(path)));
            }
        }
    }
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                if let Some(field) = card_field(key) {
                    for secret in secrets {
                        if let Secret::Card(card) = secret {
                            if holds_card(field, child, *card) {
                                found.push(format!("{}.{key}: hidden card {card}", path_text(path)));
                            }
                        }
                    }
                }
                path.push(Seg::Key(key));
                walk(child, path, secrets, found);
                path.pop();
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                path.push(Seg::Index(i));
                walk(child, path, secrets, found);
                path.pop();
            }
        }
        _ => {}
    }
}

/// Every place in `json` that reveals one of `secrets`, as `path: what` lines (empty
/// when nothing leaks).
pub fn find_leaks(json: &Value, secrets: &[Secret]) -> Vec<String> {
    let mut found = Vec::new();
    if !secrets.is_empty() {
        walk(json, &mut Vec::new(), secrets, &mut found);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finds_card_ids_in_id_fields_and_arrays() {
        let view = json!({"hand": [{"id": 7, "kind": "rat"}], "pile": {"cardIds": [1, 2]}, "count": 7});
        let leaks = find_leaks(&view, &[Secret::Card(7), Secret::Card(2)]);
        assert_eq!(leaks.len(), 2, "{leaks:?}");
        assert!(leaks[0].contains("$.hand[0].id"));
        assert!(leaks[1].contains("$.pile.cardIds"));
    }

    #[test]
    fn counts_that_equal_a_card_id_are_not_leaks() {
        let view =
            json!({"deck": 7, "tableVersion": 7, "players": {"a": {"faceUpCount": 7}}, "ranking": [{"cards": 7}]});
        assert!(find_leaks(&view, &[Secret::Card(7)]).is_empty());
        // …but a list under the same plural name is a list of ids.
        assert_eq!(find_leaks(&json!({"cards": [7]}), &[Secret::Card(7)]).len(), 1);
    }

    #[test]
    fn finds_hidden_values_anywhere() {
        let view = json!({"events": [{"type": "peek", "card": {"kind": "rat"}}]});
        let leaks = find_leaks(&view, &[Secret::Value(json!({"kind": "rat"}))]);
        assert_eq!(leaks, vec!["$.events[0].card: hidden value {\"kind\":\"rat\"}".to_owned()]);
    }
}
