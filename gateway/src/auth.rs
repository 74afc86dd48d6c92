//! Bearer tokens: JWT (HS256) with `sub` = user id, `name`, `exp`. A service with its own
//! login can mint these with the shared secret instead of using guest sessions.

use crate::error::ApiError;
use actix_web::dev::Payload;
use actix_web::{web, FromRequest, HttpRequest};
use engine::PlayerId;
use jsonwebtoken::{decode, encode, Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use std::future::{ready, Ready};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Claims {
    pub sub: String,
    pub name: String,
    pub exp: u64,
}

pub struct Auth {
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
    ttl_s: u64,
}

impl Auth {
    pub fn new(secret: &str, ttl_s: u64) -> Auth {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = 5;
        Auth {
            encoding: EncodingKey::from_secret(secret.as_bytes()),
            decoding: DecodingKey::from_secret(secret.as_bytes()),
            validation,
            ttl_s,
        }
    }

    pub fn mint(&self, user_id: &str, name: &str) -> Result<String, jsonwebtoken::errors::Error> {
        let exp = jsonwebtoken::get_current_timestamp() + self.ttl_s;
        encode(&Header::new(Algorithm::HS256), &Claims { sub: user_id.into(), name: name.into(), exp }, &self.encoding)
    }

    /// The claims of a valid, unexpired token signed with our secret.
    pub fn verify(&self, token: &str) -> Option<Claims> {
        decode::<Claims>(token, &self.decoding, &self.validation).ok().map(|d| d.claims).filter(|c| !c.sub.is_empty())
    }
}

/// The caller, from `Authorization: Bearer <token>`.
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

impl FromRequest for User {
    type Error = ApiError;
    type Future = Ready<Result<User, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let user = (|| {
            let auth = req.app_data::<web::Data<crate::server::AppState>>()?;
            let header = req.headers().get("authorization")?.to_str().ok()?;
            let token = header.strip_prefix("Bearer ").or_else(|| header.strip_prefix("bearer "))?;
            auth.auth.verify(token.trim()).map(User::from)
        })();
        ready(user.ok_or_else(ApiError::unauthorized))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minted_tokens_verify_and_tampered_ones_do_not() {
        let auth = Auth::new("s3cret", 60);
        let token = auth.mint("u_1", "도윤").unwrap();
        let claims = auth.verify(&token).unwrap();
        assert_eq!((claims.sub.as_str(), claims.name.as_str()), ("u_1", "도윤"));
        assert!(Auth::new("other", 60).verify(&token).is_none());
        let mut tampered = token.clone();
        tampered.pop();
        tampered.push('x');
        assert!(auth.verify(&tampered).is_none());
        assert!(auth.verify("garbage").is_none());
    }

    #[test]
    fn expired_tokens_are_refused() {
        let auth = Auth::new("s3cret", 60);
        let exp = jsonwebtoken::get_current_timestamp() - 3600;
        let token = encode(
            &Header::default(),
            &Claims { sub: "u_1".into(), name: "x".into(), exp },
            &EncodingKey::from_secret(b"s3cret"),
        )
        .unwrap();
        assert!(auth.verify(&token).is_none());
    }
}
