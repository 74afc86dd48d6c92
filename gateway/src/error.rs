//! HTTP errors: `{"code":"…","reason":"…"}` with a fitting status. `code` is stable
//! English for programs, `reason` Korean for people.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use room_actor::messages::RoomOpError;
use serde::Serialize;
use std::fmt;

#[derive(Clone, Debug, Serialize)]
pub struct ApiError {
    #[serde(skip)]
    pub status: StatusCode,
    pub code: String,
    pub reason: String,
    /// Sent as `Retry-After` (seconds) with a 429 or 503.
    #[serde(skip)]
    pub retry_after_s: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &str, reason: impl Into<String>) -> ApiError {
        ApiError { status, code: code.to_owned(), reason: reason.into(), retry_after_s: None }
    }

    pub fn bad_request(code: &str, reason: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, code, reason)
    }

    pub fn unauthorized() -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", "로그인이 필요해요")
    }

    /// A path that does not exist here (or is not served on this port).
    pub fn not_found() -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", "없는 주소예요")
    }

    pub fn unknown_room() -> ApiError {
        RoomOpError::unknown_room().into()
    }

    pub fn unavailable() -> ApiError {
        RoomOpError::unavailable().into()
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.status.as_u16(), self.code, self.reason)
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.status
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = HttpResponse::build(self.status);
        if let Some(s) = self.retry_after_s {
            response.insert_header((actix_web::http::header::RETRY_AFTER, s.to_string()));
        }
        response.json(self)
    }
}

impl From<RoomOpError> for ApiError {
    fn from(e: RoomOpError) -> ApiError {
        ApiError::new(StatusCode::from_u16(e.status).unwrap_or(StatusCode::CONFLICT), &e.code, e.reason)
    }
}
