//! The guard of every HTTP route a gpuchain process serves. Refused, in this order: a `Host`
//! that does not name the server (403: DNS rebinding), a foreign `Origin` (403: a web page in
//! the operator's browser calling across sites), a missing or wrong bearer token (401).
//! Routes that only show what the process sees may be opened without the token while the
//! server listens on loopback ([`guard_open`]); everything that acts needs it ([`guard`]).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use gpuchain_api::auth;
use serde_json::json;

/// Called with the status and the reason of each refusal (the node logs it as an event).
pub type OnRefuse = fn(u16, &str);

/// What the guard checks a request against.
#[derive(Clone)]
pub struct Access {
    token: Arc<str>,
    bound: SocketAddr,
    /// Where the operator finds the token, for the 401's message.
    token_hint: Arc<str>,
    on_refuse: Option<OnRefuse>,
}

impl Access {
    pub fn new(token: impl Into<String>, bound: SocketAddr, token_hint: impl Into<String>) -> Self {
        Self {
            token: token.into().into(),
            bound,
            token_hint: token_hint.into().into(),
            on_refuse: None,
        }
    }

    pub fn on_refuse(mut self, f: OnRefuse) -> Self {
        self.on_refuse = Some(f);
        self
    }

    pub fn bound(&self) -> SocketAddr {
        self.bound
    }

    /// The answer refusing `req`, if it is refused.
    fn refusal(&self, req: &Request, need_token: bool) -> Option<Response> {
        let headers = req.headers();
        let host = headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
            .or_else(|| req.uri().authority().map(ToString::to_string));
        if !host
            .as_deref()
            .is_some_and(|h| auth::host_allowed(h, self.bound))
        {
            return Some(self.refuse(
                StatusCode::FORBIDDEN,
                format!(
                    "Host {:?} does not name this server; use http://{} (or localhost with its port)",
                    host.unwrap_or_default(),
                    self.bound
                ),
            ));
        }
        let origin = header_str(headers, header::ORIGIN.as_str());
        if !auth::origin_allowed(origin, self.bound) {
            return Some(self.refuse(
                StatusCode::FORBIDDEN,
                format!(
                    "requests from the web page at {:?} are refused: only pages this server serves may call it",
                    origin.unwrap_or_default()
                ),
            ));
        }
        if need_token && !auth::bearer_matches(header_str(headers, auth::AUTH_HEADER), &self.token)
        {
            let mut r = self.refuse(
                StatusCode::UNAUTHORIZED,
                format!(
                    "missing or wrong API token: send `Authorization: Bearer <token>` with the token in {}",
                    self.token_hint
                ),
            );
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return Some(r);
        }
        None
    }

    fn refuse(&self, code: StatusCode, msg: String) -> Response {
        if let Some(f) = self.on_refuse {
            f(code.as_u16(), &msg);
        }
        (code, Json(json!({ "error": msg }))).into_response()
    }
}

fn header_str<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// Host, Origin and the token.
pub async fn guard(State(access): State<Access>, req: Request, next: Next) -> Response {
    match access.refusal(&req, true) {
        None => next.run(req).await,
        Some(r) => r,
    }
}

/// Host and Origin; the token only when the server listens beyond loopback. A page on this
/// machine may show what the process sees without holding the token; nothing it reaches
/// this way acts.
pub async fn guard_open(State(access): State<Access>, req: Request, next: Next) -> Response {
    let need_token = !access.bound.ip().is_loopback();
    match access.refusal(&req, need_token) {
        None => next.run(req).await,
        Some(r) => r,
    }
}
