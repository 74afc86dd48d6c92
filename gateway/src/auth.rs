//! Bearer tokens: JWT (HS256) with `sub` = user id, `name`, `exp`. A service with its own
//! login can mint these with the shared secret instead of using guest sessions.
//!
//! Every claim the server relies on is checked, not only the signature: `sub` has the
//! shape of a user id and no reserved prefix (`bot_…`), `name` is a name a guest could
//! choose (`names`), `exp` is present and at most `auth.max_token_lifetime_s` ahead, and
//! `nbf`, when present, has passed. A header that names critical extensions (`crit`) is
//! refused: roomd understands none, and jsonwebtoken ignores the parameter.
//!
//! There is no built-in secret: without `ROOMD__AUTH__SECRET` the embedded node uses a
//! random one it generates on first start and keeps in its data directory
//! ([`load_or_create_secret`]).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use engine::PlayerId;
use jsonwebtoken::{decode, encode, Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Claims {
    pub sub: String,
    pub name: String,
    pub exp: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nbf: Option<u64>,
}

/// Clock skew tolerated on `exp` and `nbf` (s).
const LEEWAY_S: u64 = 5;

/// Longest token header read before the signature is checked, in base64url characters.
/// Ours is 36 (`{"typ":"JWT","alg":"HS256"}`); a few key ids and types fit many times.
const MAX_HEADER_B64_LEN: usize = 1024;

/// Why the token's header (its first segment) is refused before the signature is checked,
/// or `None`: it must be base64url JSON of at most [`MAX_HEADER_B64_LEN`] characters
/// without `crit`. RFC 7515 §4.1.11: a recipient that does not understand every extension
/// a header lists as critical must refuse the token; roomd understands none, and
/// jsonwebtoken's `Header` drops the parameter, so it is read here first.
fn header_refusal(token: &str) -> Option<HeaderRefusal> {
    let Some((header, _)) = token.split_once('.') else { return Some(HeaderRefusal::Unreadable) };
    if header.len() > MAX_HEADER_B64_LEN {
        return Some(HeaderRefusal::Unreadable);
    }
    let Ok(json) = URL_SAFE_NO_PAD.decode(header) else { return Some(HeaderRefusal::Unreadable) };
    match serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(&json) {
        Ok(fields) if fields.contains_key("crit") => Some(HeaderRefusal::Crit),
        Ok(_) => None,
        Err(_) => Some(HeaderRefusal::Unreadable),
    }
}

enum HeaderRefusal {
    /// Not a JWT header, or over [`MAX_HEADER_B64_LEN`]: a forged or broken token.
    Unreadable,
    /// Well formed with critical extensions: most likely another login service's tokens,
    /// which an operator should hear about.
    Crit,
}

pub struct Auth {
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
    ttl_s: u64,
    max_lifetime_s: u64,
}

impl Auth {
    pub fn new(secret: &str, ttl_s: u64, max_lifetime_s: u64) -> Auth {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = LEEWAY_S;
        validation.validate_nbf = true;
        validation.set_required_spec_claims(&["exp", "sub"]);
        Auth {
            encoding: EncodingKey::from_secret(secret.as_bytes()),
            decoding: DecodingKey::from_secret(secret.as_bytes()),
            validation,
            ttl_s: ttl_s.min(max_lifetime_s),
            max_lifetime_s,
        }
    }

    pub fn mint(&self, user_id: &str, name: &str) -> Result<String, jsonwebtoken::errors::Error> {
        let exp = jsonwebtoken::get_current_timestamp() + self.ttl_s;
        let claims = Claims { sub: user_id.into(), name: name.into(), exp, nbf: None };
        encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
    }

    /// The claims of a valid token signed with our secret: no `crit` in its header,
    /// unexpired, not before its `nbf`, `exp` within the longest lifetime, `sub` and `name`
    /// of the right shape (the name exactly as `names::clean_name` would store it).
    pub fn verify(&self, token: &str) -> Option<Claims> {
        match header_refusal(token) {
            None => {}
            Some(HeaderRefusal::Unreadable) => {
                tracing::debug!("token refused: header unreadable or over 1 KiB");
                return None;
            }
            Some(HeaderRefusal::Crit) => {
                tracing::info!("token refused: its header lists critical extensions (`crit`)");
                return None;
            }
        }
        let claims = match decode::<Claims>(token, &self.decoding, &self.validation) {
            Ok(d) => d.claims,
            Err(e) => {
                tracing::debug!(error = %e, "token refused");
                return None;
            }
        };
        let now = jsonwebtoken::get_current_timestamp();
        if claims.exp > now + self.max_lifetime_s + LEEWAY_S {
            tracing::info!(sub = %claims.sub.chars().take(64).collect::<String>(), "token refused: lifetime over auth.max_token_lifetime_s");
            return None;
        }
        if !crate::names::valid_user_id(&claims.sub)
            || crate::names::clean_name(&claims.name).as_deref() != Some(claims.name.as_str())
        {
            tracing::info!(
                sub_len = claims.sub.len(),
                name_len = claims.name.len(),
                "token refused: bad sub or name claim"
            );
            return None;
        }
        Some(claims)
    }
}

/// File in the data directory that holds the generated token secret.
pub const SECRET_FILE: &str = "auth-secret";

/// The token secret kept in `dir/auth-secret`, created (random, 256 bits, mode 0600)
/// if there is none yet; `(secret, path, created)`. The directory is created 0700, or
/// tightened to 0700 with an older secret file tightened to 0600 (`secure_data_dir`).
pub fn load_or_create_secret(dir: &Path) -> std::io::Result<(String, PathBuf, bool)> {
    room_actor::store::file::secure_data_dir(dir, &[SECRET_FILE])?;
    let path = dir.join(SECRET_FILE);
    match std::fs::read_to_string(&path) {
        Ok(s) if s.trim().len() >= 32 => return Ok((s.trim().to_owned(), path, false)),
        Ok(_) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{} holds fewer than 32 characters", path.display()),
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| std::io::Error::other(e.to_string()))?;
    let secret: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(&path) {
        Ok(mut file) => {
            file.write_all(secret.as_bytes())?;
            file.sync_all()?;
            Ok((secret, path, true))
        }
        // Another process created it first: use theirs.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let s = std::fs::read_to_string(&path)?;
            Ok((s.trim().to_owned(), path, false))
        }
        Err(e) => Err(e),
    }
}

/// The caller, from `Authorization: Bearer <token>` (extracted in `state.rs`).
#[derive(Clone, Debug)]
pub struct User {
    pub id: PlayerId,
    pub name: String,
}

impl From<Claims> for User {
    fn from(c: Claims) -> User {
        User { id: PlayerId::from(c.sub), name: c.name }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forge(secret: &str, claims: serde_json::Value) -> String {
        encode(&Header::default(), &claims, &EncodingKey::from_secret(secret.as_bytes())).unwrap()
    }

    #[test]
    fn every_claim_is_validated() {
        let auth = Auth::new("s3cret", 60, 3600);
        let now = jsonwebtoken::get_current_timestamp();
        let ok = serde_json::json!({"sub": "u_1", "name": "도윤", "exp": now + 60});
        assert!(auth.verify(&forge("s3cret", ok)).is_some());
        for bad in [
            // no exp
            serde_json::json!({"sub": "u_1", "name": "도윤"}),
            // exp beyond the longest lifetime
            serde_json::json!({"sub": "u_1", "name": "도윤", "exp": now + 7200}),
            // not yet valid
            serde_json::json!({"sub": "u_1", "name": "도윤", "exp": now + 60, "nbf": now + 600}),
            // a bot's id, an empty id, an overlong id
            serde_json::json!({"sub": "bot_r_1_1", "name": "도윤", "exp": now + 60}),
            serde_json::json!({"sub": "", "name": "도윤", "exp": now + 60}),
            serde_json::json!({"sub": "u".repeat(65), "name": "도윤", "exp": now + 60}),
            // names a guest could not choose
            serde_json::json!({"sub": "u_1", "name": "x".repeat(10_000), "exp": now + 60}),
            serde_json::json!({"sub": "u_1", "name": "\u{202e}evil", "exp": now + 60}),
            serde_json::json!({"sub": "u_1", "name": " padded ", "exp": now + 60}),
            serde_json::json!({"sub": "u_1", "name": "u_0123456789abcdef", "exp": now + 60}),
        ] {
            assert!(auth.verify(&forge("s3cret", bad.clone())).is_none(), "{bad}");
        }
        let passed_nbf = serde_json::json!({"sub": "u_1", "name": "도윤", "exp": now + 60, "nbf": now - 10});
        assert!(auth.verify(&forge("s3cret", passed_nbf)).is_some());
    }

    /// A token with exactly this header, signed with `secret` (jsonwebtoken's `Header`
    /// cannot carry `crit`).
    fn forge_with_header(secret: &str, header: serde_json::Value, claims: serde_json::Value) -> String {
        let message =
            format!("{}.{}", URL_SAFE_NO_PAD.encode(header.to_string()), URL_SAFE_NO_PAD.encode(claims.to_string()));
        let key = EncodingKey::from_secret(secret.as_bytes());
        let signature = jsonwebtoken::crypto::sign(message.as_bytes(), &key, Algorithm::HS256).unwrap();
        format!("{message}.{signature}")
    }

    #[test]
    fn a_header_with_crit_is_refused_even_when_signed_right() {
        let auth = Auth::new("s3cret", 60, 3600);
        let now = jsonwebtoken::get_current_timestamp();
        let claims = serde_json::json!({"sub": "u_1", "name": "도윤", "exp": now + 60});
        let plain = forge_with_header("s3cret", serde_json::json!({"alg": "HS256", "typ": "JWT"}), claims.clone());
        assert!(auth.verify(&plain).is_some(), "the hand-made token is valid without crit");
        for header in [
            serde_json::json!({"alg": "HS256", "typ": "JWT", "crit": ["exp"]}),
            serde_json::json!({"alg": "HS256", "crit": []}),
            serde_json::json!({"alg": "HS256", "kid": "k".repeat(2000)}),
        ] {
            assert!(auth.verify(&forge_with_header("s3cret", header.clone(), claims.clone())).is_none(), "{header}");
        }
    }

    #[test]
    fn a_name_claim_breaking_the_name_rules_is_refused() {
        let auth = Auth::new("s3cret", 60, 3600);
        let now = jsonwebtoken::get_current_timestamp();
        let long = format!("a{}", "\u{0301}".repeat(32_000));
        for name in [
            long.as_str(),
            "Alice\u{200b}",
            "ｕ_0123456789abcdef",
            "a\u{2028}b",
            // Not in NFC: a guest session would have stored "\u{e9}".
            "e\u{0301}",
            "🇰🇷🇰🇷🇰🇷🇰🇷🇰🇷🇰🇷🇰🇷🇰🇷🇰🇷",
        ] {
            let token = forge("s3cret", serde_json::json!({"sub": "u_1", "name": name, "exp": now + 60}));
            assert!(auth.verify(&token).is_none(), "{:?}", name.chars().take(12).collect::<String>());
        }
        let token = forge("s3cret", serde_json::json!({"sub": "u_1", "name": "\u{e9}", "exp": now + 60}));
        assert!(auth.verify(&token).is_some());
    }

    #[test]
    fn the_generated_secret_is_private_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let (first, path, created) = load_or_create_secret(&data).unwrap();
        assert!(created);
        assert!(first.len() >= 64, "{first}");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        }
        let (again, _, created) = load_or_create_secret(&data).unwrap();
        assert_eq!((again.as_str(), created), (first.as_str(), false));
        let other = tempfile::tempdir().unwrap();
        assert_ne!(load_or_create_secret(other.path()).unwrap().0, first);
    }

    /// Issue 55: an older node left its data directory 0755 and its secret readable by
    /// others; the next start tightens both.
    #[cfg(unix)]
    #[test]
    fn an_existing_secret_and_its_directory_are_tightened() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| format!("{:o}", std::fs::metadata(p).unwrap().permissions().mode() & 0o777);
        let set = |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
        let root = tempfile::tempdir().unwrap();
        let data = root.path().join("data");
        let (first, path, _) = load_or_create_secret(&data).unwrap();
        assert_eq!((mode(&data), mode(&path)), ("700".to_owned(), "600".to_owned()));
        set(&data, 0o755);
        set(&path, 0o644);
        let (again, _, created) = load_or_create_secret(&data).unwrap();
        assert_eq!((again.as_str(), created), (first.as_str(), false));
        assert_eq!((mode(&data), mode(&path)), ("700".to_owned(), "600".to_owned()));
    }

    #[test]
    fn minted_tokens_verify_and_tampered_ones_do_not() {
        let auth = Auth::new("s3cret", 60, 3600);
        let token = auth.mint("u_1", "도윤").unwrap();
        let claims = auth.verify(&token).unwrap();
        assert_eq!((claims.sub.as_str(), claims.name.as_str()), ("u_1", "도윤"));
        assert!(Auth::new("other", 60, 3600).verify(&token).is_none());
        let mut tampered = token.clone();
        tampered.pop();
        tampered.push('x');
        assert!(auth.verify(&tampered).is_none());
        assert!(auth.verify("garbage").is_none());
    }

    #[test]
    fn expired_tokens_are_refused() {
        let auth = Auth::new("s3cret", 60, 3600);
        let exp = jsonwebtoken::get_current_timestamp() - 3600;
        let token = encode(
            &Header::default(),
            &Claims { sub: "u_1".into(), name: "x".into(), exp, nbf: None },
            &EncodingKey::from_secret(b"s3cret"),
        )
        .unwrap();
        assert!(auth.verify(&token).is_none());
    }
}
