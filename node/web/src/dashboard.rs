//! The dashboard: one page (compiled in; it fetches nothing from elsewhere), the feed as
//! server-sent events, what kind of run it shows, and the break-it controls that a local
//! testnet's harness plugs in. Nothing here knows how a process is killed or a checkpoint
//! made to cheat; [`Controls`] does.
//!
//! The stream sends `reset` first, then every held line as a `line` event, then `live`, then
//! each new line as it comes. A page that falls too far behind is disconnected; its
//! `EventSource` reconnects and starts over from `reset`, so it never shows a gap.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::future::BoxFuture;
use futures::stream::{self, Stream, StreamExt};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;

use crate::access::{self, Access};
use crate::feed::Feed;

const INDEX_HTML: &str = include_str!("../assets/index.html");
const APP_JS: &str = include_str!("../assets/app.js");
const STYLE_CSS: &str = include_str!("../assets/style.css");

/// What the page shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// A run as it happens.
    Live,
    /// A recorded run, with a scrubber.
    Replay,
}

/// What can be done to one process of a local testnet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakAction {
    /// kill -9.
    Kill,
    /// SIGSTOP.
    Freeze,
    /// SIGCONT.
    Thaw,
    /// The provider's next checkpoint is random weights.
    CheatJunk,
    /// The provider's next checkpoint is the interval's starting state.
    CheatStale,
    /// The provider's next checkpoint holds a NaN.
    CheatNan,
    /// The provider's training stops while it keeps heartbeating (a hung GPU).
    Hang,
    /// SIGTERM: the node shuts down.
    Stop,
}

/// A process the controls can act on, and what they can do to it.
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    pub node: String,
    pub roles: Vec<String>,
    pub actions: Vec<BreakAction>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BreakRequest {
    pub node: String,
    pub action: BreakAction,
}

/// The break-it controls of a local testnet.
pub trait Controls: Send + Sync {
    /// The processes now running and what may be done to each.
    fn targets(&self) -> Vec<Target>;
    /// Does it; says what was done, or why not.
    fn act(&self, req: BreakRequest) -> BoxFuture<'static, Result<String, String>>;
}

/// One dashboard: a feed, how to show it, and the controls if the run is a local testnet.
pub struct Dashboard {
    pub feed: Arc<Feed>,
    pub mode: Mode,
    pub title: String,
    pub controls: Option<Arc<dyn Controls>>,
}

#[derive(Serialize)]
struct Info<'a> {
    mode: Mode,
    title: &'a str,
    /// Empty where there are no controls (a node's own dashboard, a replay).
    targets: Vec<Target>,
}

/// The routes that only show (guard them with [`access::guard_open`]): the page under
/// `/dashboard/`, its info and its stream.
pub fn view_routes<S: Clone + Send + Sync + 'static>(d: Arc<Dashboard>) -> Router<S> {
    Router::new()
        .route(
            "/dashboard",
            get(|| async { Redirect::permanent("/dashboard/") }),
        )
        .route(
            "/dashboard/",
            get(|| async { asset("text/html; charset=utf-8", INDEX_HTML) }),
        )
        .route(
            "/dashboard/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }),
        )
        .route(
            "/dashboard/style.css",
            get(|| async { asset("text/css; charset=utf-8", STYLE_CSS) }),
        )
        .route("/dashboard/info", get(info))
        .route("/dashboard/feed", get(feed))
        .with_state(d)
}

/// The routes that act (guard them with [`access::guard`]).
pub fn control_routes<S: Clone + Send + Sync + 'static>(d: Arc<Dashboard>) -> Router<S> {
    Router::new()
        .route("/dashboard/break", post(act))
        .with_state(d)
}

/// A server of its own for a dashboard (the testnet harness's, a replay's): the page at `/`
/// too, the views open on loopback, the controls behind the token.
pub fn router(d: Arc<Dashboard>, access: Access) -> Router {
    let open = view_routes(d.clone())
        .route("/", get(|| async { Redirect::temporary("/dashboard/") }))
        .layer(axum::middleware::from_fn_with_state(
            access.clone(),
            access::guard_open,
        ));
    let acting =
        control_routes(d).layer(axum::middleware::from_fn_with_state(access, access::guard));
    open.merge(acting)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
            // The page runs only its own script and talks only to this server.
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'",
            ),
        ],
        body,
    )
        .into_response()
}

async fn info(State(d): State<Arc<Dashboard>>) -> Response {
    let targets = d.controls.as_ref().map(|c| c.targets()).unwrap_or_default();
    Json(Info {
        mode: d.mode,
        title: &d.title,
        targets,
    })
    .into_response()
}

async fn feed(
    State(d): State<Arc<Dashboard>>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let (held, rx) = d.feed.subscribe();
    // Browsers drop an event whose data is empty: the markers carry their own name.
    let head = stream::iter(
        std::iter::once(Event::default().event("reset").data("reset"))
            .chain(
                held.into_iter()
                    .map(|l| Event::default().event("line").data(&*l)),
            )
            .chain(std::iter::once(Event::default().event("live").data("live"))),
    );
    let live = stream::unfold(rx, |mut rx| async move {
        match rx.recv().await {
            Ok(l) => Some((Event::default().event("line").data(&*l), rx)),
            // Fallen behind: end the stream; the page reconnects and gets everything.
            Err(RecvError::Lagged(_) | RecvError::Closed) => None,
        }
    });
    Sse::new(head.chain(live).map(Ok)).keep_alive(KeepAlive::default())
}

async fn act(State(d): State<Arc<Dashboard>>, Json(req): Json<BreakRequest>) -> Response {
    let Some(c) = d.controls.clone() else {
        return (
            StatusCode::NOT_FOUND,
            Json(json!({ "error": "this dashboard has no controls: they exist only on a local testnet's dashboard (gpuchain testnet up / demo)" })),
        )
            .into_response();
    };
    match c.act(req).await {
        Ok(done) => Json(json!({ "done": done })).into_response(),
        Err(e) => (StatusCode::BAD_REQUEST, Json(json!({ "error": e }))).into_response(),
    }
}
