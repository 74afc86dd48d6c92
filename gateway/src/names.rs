//! Display names and user ids: what a guest may call themselves (and what a token's
//! `name` may say), and what a token's `sub` may be.
//!
//! A name is trimmed and put in NFC (so one spelling of a name is stored and compared),
//! then it is 1–20 grapheme clusters in at most [`MAX_NAME_BYTES`] bytes of UTF-8, each
//! cluster at most [`MAX_GRAPHEME_CODE_POINTS`] code points (no pile of combining marks
//! on one letter), with no control, line or paragraph separator, bidi-embedding/override/
//! isolate or mark, zero-width or blank-filler character anywhere in it (a variation
//! selector only right after a symbol, where it picks the emoji or text style), and it
//! does not look like an id (`u_…`, `bot_…`, `r_…`, `n_…`) even after NFKC folds
//! fullwidth and other compatibility look-alikes, so nobody can pass for another user in
//! a lobby.

use unicode_normalization::UnicodeNormalization;
use unicode_segmentation::UnicodeSegmentation;

/// Longest name, in grapheme clusters (what a person counts as characters).
pub const MAX_NAME_GRAPHEMES: usize = 20;
/// Longest name in bytes of UTF-8 after NFC: 20 Hangul syllables (60 bytes) fit, and a
/// name can no longer weigh kilobytes in every lobby page and token that carries it.
pub const MAX_NAME_BYTES: usize = 64;
/// Most code points in one grapheme cluster after NFC: a letter with a few marks, a flag,
/// an emoji with a skin tone; never a letter under thousands of combining marks.
pub const MAX_GRAPHEME_CODE_POINTS: usize = 4;
/// Longest input looked at, in bytes, before normalising it. NFC shrinks text by a
/// factor of 3 at most (three 3-byte Hangul jamo compose into one 3-byte syllable), so
/// nothing longer can fit [`MAX_NAME_BYTES`], and normalising a long input is skipped.
const MAX_RAW_NAME_BYTES: usize = 4 * MAX_NAME_BYTES;
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

/// Line and paragraph separators (the controls among them, `\n` and U+0085, are caught
/// as controls): a name is one line wherever it is shown.
fn is_line_break(c: char) -> bool {
    matches!(c, '\u{2028}' | '\u{2029}')
}

/// Characters that render as nothing, or as a blank the width of a letter, wherever they
/// stand: zero-width spaces and joiners, invisible operators, format characters, Hangul
/// and braille fillers, tags. One of them after `Alice` makes a second `Alice`.
fn is_hidden(c: char) -> bool {
    matches!(
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
            | '\u{FEFF}'
            | '\u{FFA0}'
            | '\u{1D173}'..='\u{1D17A}'
            | '\u{E0000}'..='\u{E0FFF}'
    )
}

fn is_variation_selector(c: char) -> bool {
    matches!(c, '\u{FE00}'..='\u{FE0F}')
}

/// Symbols whose emoji or text style a variation selector picks (`❤️`, `☺️`, `🏳️`):
/// there it shows, while after a letter or a digit it renders as nothing.
fn takes_variation_selector(c: char) -> bool {
    matches!(c, '\u{2000}'..='\u{2BFF}' | '\u{3030}' | '\u{303D}' | '\u{3297}' | '\u{3299}' | '\u{1F000}'..='\u{1FAFF}')
}

/// Looks like one of our ids (`u_…`, `bot_…`, `r_…`, `n_…`): refused as a name.
fn looks_like_id(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    ["u_", "bot_", "r_", "n_"]
        .iter()
        .any(|p| lower.strip_prefix(p).is_some_and(|rest| rest.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')))
}

/// The name as it will be shown and stored (trimmed, NFC), or `None` if it is not
/// acceptable.
pub fn clean_name(raw: &str) -> Option<String> {
    if raw.len() > MAX_RAW_NAME_BYTES {
        return None;
    }
    let nfc: String = raw.nfc().collect();
    let name = nfc.trim();
    if name.len() > MAX_NAME_BYTES {
        return None;
    }
    let mut graphemes = 0;
    for grapheme in name.graphemes(true) {
        graphemes += 1;
        if graphemes > MAX_NAME_GRAPHEMES || grapheme.chars().count() > MAX_GRAPHEME_CODE_POINTS {
            return None;
        }
    }
    if graphemes == 0 {
        return None;
    }
    let mut previous = None;
    for c in name.chars() {
        if c.is_control() || is_bidi_control(c) || is_line_break(c) || is_hidden(c) {
            return None;
        }
        if is_variation_selector(c) && !previous.is_some_and(takes_variation_selector) {
            return None;
        }
        previous = Some(c);
    }
    // Compatibility forms fold here: fullwidth `ｕ＿０１…` is `u_01…` to a reader.
    let folded: String = name.nfkc().collect();
    if looks_like_id(&folded) {
        return None;
    }
    Some(name.to_owned())
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

    /// The name `raw` becomes, or `None` when it is refused.
    fn check(raw: &str) -> Option<String> {
        clean_name(raw)
    }

    #[test]
    fn ordinary_names_pass_trimmed() {
        for (raw, shown) in [
            ("도윤", "도윤"),
            ("  Alice  ", "Alice"),
            ("김 민 준", "김 민 준"),
            ("🇰🇷 가족", "🇰🇷 가족"),
            ("x", "x"),
            ("user_1", "user_1"),
        ] {
            assert_eq!(check(raw).as_deref(), Some(shown), "{raw:?}");
        }
        // 8 flags are 8 characters (16 code points, 64 bytes).
        let flags = "🇰🇷".repeat(8);
        assert_eq!(check(&flags), Some(flags.clone()));
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
            assert_eq!(check(bad), None, "{bad:?}");
        }
        assert_eq!(check(&"가".repeat(MAX_NAME_GRAPHEMES + 1)), None);
        assert_eq!(check(&"x".repeat(10_000)), None);
    }

    #[test]
    fn names_are_capped_in_bytes_after_nfc() {
        // 20 Hangul syllables are 60 bytes: the longest Korean name still fits.
        assert!(check(&"가".repeat(20)).is_some());
        // Decomposed jamo (U+1100 U+1161, 6 bytes each) are composed before they count.
        assert_eq!(check(&"\u{1100}\u{1161}".repeat(20)), Some("가".repeat(20)));
        assert_eq!(check("e\u{0301}"), Some("\u{e9}".to_owned()));
        // Flags are 8 bytes each: 8 fit in 64 bytes, 9 do not (9 characters to a person).
        assert!(check(&"🇰🇷".repeat(8)).is_some());
        assert_eq!(check(&"🇰🇷".repeat(9)), None);
        assert_eq!(check(&"😀".repeat(17)), None);
    }

    #[test]
    fn a_character_is_at_most_four_code_points() {
        // The finding: one grapheme of 32,001 code points, a 64 KB name.
        assert!(check(&format!("a{}", "\u{0301}".repeat(32_000))).is_none());
        // Marks that do not compose: a base and three marks pass, a fourth mark does not.
        assert!(check("a\u{0310}\u{0311}\u{0312}").is_some());
        assert_eq!(check("a\u{0310}\u{0311}\u{0312}\u{0313}"), None);
        assert!(check("👍🏽").is_some());
    }

    #[test]
    fn zero_width_characters_are_refused_anywhere() {
        for bad in [
            "Alice\u{200b}",
            "Al\u{200c}ice",
            "Al\u{200d}ice",
            "\u{2060}Alice",
            "Alice\u{feff}",
            "Alice\u{3164}",
            "Ali\u{00ad}ce",
            "Alice\u{fe0f}",
            "Alice\u{e0041}",
            // A ZWJ sequence is joined by U+200D too (and is 7 code points).
            "👩\u{200d}👩\u{200d}👧\u{200d}👦 가족",
        ] {
            assert_eq!(check(bad), None, "{bad:?}");
        }
        // A variation selector that picks an emoji's style is not hidden.
        assert!(check("❤\u{fe0f} 하트").is_some());
    }

    #[test]
    fn line_and_paragraph_separators_are_refused_anywhere() {
        for bad in ["a\u{2028}b", "a\u{2029}b", "a\nb", "a\r\nb", "a\u{0085}b", "a\u{000b}b"] {
            assert_eq!(check(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn fullwidth_look_alikes_of_ids_are_id_shaped() {
        for bad in ["ｕ_0123456789abcdef", "ｕ＿０１２３４５６７８９ａｂｃｄｅｆ", "Ｕ_ABC", "ｂｏｔ_r_1_1", "ｒ＿0123"]
        {
            assert_eq!(check(bad), None, "{bad:?}");
        }
        // Fullwidth letters that shape no id are a name like any other.
        assert_eq!(check("ｕｓｅｒ"), Some("ｕｓｅｒ".to_owned()));
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
