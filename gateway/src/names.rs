//! Display names and user ids: what a guest may call themselves (and what a token's
//! `name` may say), and what a token's `sub` may be.
//!
//! A name is trimmed, 1–20 grapheme clusters, has no control, bidi-embedding/override/
//! isolate or mark characters, shows at least one visible character (not only spaces,
//! zero-width or filler characters like U+200B or U+3164), and does not look like an id
//! (`u_…`, `bot_…`, `r_…`), so nobody can pass for another user in a lobby.

use unicode_segmentation::UnicodeSegmentation;

/// Longest name, in grapheme clusters (what a person counts as characters).
pub const MAX_NAME_GRAPHEMES: usize = 20;
/// Longest user id a token may carry.
pub const MAX_ID_LEN: usize = 64;
/// Id prefixes only the server hands out to non-users (bots play under `bot_<room>_<n>`).
pub const RESERVED_ID_PREFIXES: &[&str] = &["bot_"];

/// Why a name is refused: `(code, Korean reason)`.
pub const BAD_NAME: (&str, &str) = ("bad_name", "이름은 보이는 글자 1~20자로 정해 주세요");

/// Bidi controls: embeddings, overrides, isolates and marks.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{200E}' | '\u{200F}' | '\u{061C}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// Characters that render as nothing (or as blank space) on their own.
fn is_invisible(c: char) -> bool {
    c.is_whitespace()
        || matches!(
            c,
            '\u{00AD}'
                | '\u{034F}'
                | '\u{115F}'
                | '\u{1160}'
                | '\u{17B4}'
                | '\u{17B5}'
                | '\u{180B}'..='\u{180F}'
                | '\u{200B}'..='\u{200D}'
                | '\u{2060}'..='\u{2064}'
                | '\u{206A}'..='\u{206F}'
                | '\u{2800}'
                | '\u{3164}'
                | '\u{FE00}'..='\u{FE0F}'
                | '\u{FEFF}'
                | '\u{FFA0}'
                | '\u{1D173}'..='\u{1D17A}'
                | '\u{E0000}'..='\u{E0FFF}'
        )
}

/// Looks like one of our ids (`u_…`, `bot_…`, `r_…`, `n_…`): refused as a name.
fn looks_like_id(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    ["u_", "bot_", "r_", "n_"]
        .iter()
        .any(|p| lower.strip_prefix(p).is_some_and(|rest| rest.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')))
}

/// The name as it will be shown (trimmed), or `None` if it is not acceptable.
pub fn clean_name(raw: &str) -> Option<&str> {
    let name = raw.trim();
    let graphemes = name.graphemes(true).count();
    if graphemes == 0 || graphemes > MAX_NAME_GRAPHEMES {
        return None;
    }
    if name.chars().any(|c| c.is_control() || is_bidi_control(c)) {
        return None;
    }
    if name.chars().all(is_invisible) || looks_like_id(name) {
        return None;
    }
    Some(name)
}

/// A token's `sub`: 1–64 ASCII letters, digits, `_`, `-`, `.`, `@` or `:`, not with a
/// reserved prefix.
pub fn valid_user_id(sub: &str) -> bool {
    !sub.is_empty()
        && sub.len() <= MAX_ID_LEN
        && sub.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '@' | ':'))
        && !RESERVED_ID_PREFIXES.iter().any(|p| sub.to_ascii_lowercase().starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_names_pass_trimmed() {
        for (raw, shown) in [
            ("도윤", "도윤"),
            ("  Alice  ", "Alice"),
            ("김 민 준", "김 민 준"),
            ("👩‍👩‍👧‍👦 가족", "👩‍👩‍👧‍👦 가족"),
            ("x", "x"),
            ("user_1", "user_1"),
        ] {
            assert_eq!(clean_name(raw), Some(shown), "{raw:?}");
        }
        // 20 grapheme clusters, each several code points, is still 20.
        let flags = "🇰🇷".repeat(MAX_NAME_GRAPHEMES);
        assert_eq!(clean_name(&flags), Some(flags.as_str()));
    }

    #[test]
    fn invisible_overlong_bidi_and_id_like_names_are_refused() {
        for bad in [
            "",
            "   ",
            "\u{200b}",
            "\u{3164}",
            "\u{3164}\u{200b} \u{FEFF}",
            "\u{202e}evil",
            "a\u{2066}b",
            "a\u{200f}",
            "tab\there",
            "nul\u{0}",
            "u_0123456789abcdef",
            "U_ABC",
            "bot_r_1_1",
            "r_0123456789ab",
        ] {
            assert_eq!(clean_name(bad), None, "{bad:?}");
        }
        assert_eq!(clean_name(&"가".repeat(MAX_NAME_GRAPHEMES + 1)), None);
        assert_eq!(clean_name(&"x".repeat(10_000)), None);
    }

    #[test]
    fn user_ids_have_a_shape_and_bots_are_reserved() {
        assert!(valid_user_id("u_0123456789abcdef"));
        assert!(valid_user_id("alice@example.com"));
        assert!(!valid_user_id(""));
        assert!(!valid_user_id("bot_r_1_1"));
        assert!(!valid_user_id("BOT_x"));
        assert!(!valid_user_id(&"a".repeat(MAX_ID_LEN + 1)));
        assert!(!valid_user_id("has space"));
        assert!(!valid_user_id("\u{202e}x"));
    }
}
