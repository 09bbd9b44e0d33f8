//! The control API (JSON over HTTP), loopback unless the operator says otherwise. Every
//! request passes the guard of `gpuchain_web::access` first: the bearer token from the data
//! dir, a `Host` that names this node (no DNS rebinding), and no foreign `Origin` (no
//! cross-site requests from a web page in the operator's browser); the read-only views
//! (a client's dashboard) need no token on loopback. Paths in requests are confined to the data dir's
//! import and export folders. Errors come back as `{"error": "..."}` with a 4xx/5xx status.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use gpuchain_api::types::{
    AddBlobRequest, ExportBlobRequest, FetchBlobRequest, HeartbeatRequest, PublishRequest,
    TopicRequest,
};
use serde::Deserialize;
use serde_json::json;

use gpuchain_web::access::{guard, guard_open};
use gpuchain_web::{Access, Dashboard, Mode};

use crate::cli::Fault;
use crate::datadir::DataDir;
use crate::handle::NodeHandle;
use crate::roles::ctx::CheatSwitch;
use crate::roles::handle::RolesHandle;

/// What every handler can reach: the node, and the data dir's path rules.
#[derive(Clone)]
pub struct Api {
    handle: NodeHandle,
    /// The role runtime, on nodes started with a role.
    roles: Option<RolesHandle>,
    dir: Arc<DataDir>,
    /// On a testnet provider started with `--test-cheat-control` only.
    cheat: Option<Arc<CheatSwitch>>,
    /// On a testnet node started with `--test-partition-control` only.
    partition_control: bool,
}

impl Api {
    fn roles(&self) -> Result<&RolesHandle, ApiError> {
        self.roles.as_ref().ok_or_else(|| {
            ApiError(
                StatusCode::NOT_FOUND,
                "this node runs no role; start it with --role client (and --rpc-url, --escrow)"
                    .into(),
            )
        })
    }
}

struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(json!({ "error": self.1 }))).into_response()
    }
}

fn bad(e: anyhow::Error) -> ApiError {
    ApiError(StatusCode::BAD_REQUEST, format!("{e:#}"))
}

/// A path outside what the API may touch.
fn forbidden(e: anyhow::Error) -> ApiError {
    ApiError(StatusCode::FORBIDDEN, format!("{e:#}"))
}

type ApiResult = Result<Response, ApiError>;

fn ok<T: serde::Serialize>(v: T) -> ApiResult {
    Ok(Json(v).into_response())
}

pub fn router(
    handle: NodeHandle,
    roles: Option<RolesHandle>,
    dir: Arc<DataDir>,
    cheat: Option<Arc<CheatSwitch>>,
    partition_control: bool,
    access: Access,
) -> Router {
    let api = Api {
        handle,
        roles,
        dir,
        cheat,
        partition_control,
    };
    let dashboard = crate::events::feed().map(|feed| {
        Arc::new(Dashboard {
            feed,
            mode: Mode::Live,
            title: "this node's jobs".into(),
            controls: None,
        })
    });
    let private = Router::new()
        .route("/v1/status", get(status))
        .route("/v1/peers", get(peers))
        .route("/v1/publish", post(publish))
        .route("/v1/subscribe", post(subscribe))
        .route("/v1/heartbeat", post(heartbeat))
        .route("/v1/heartbeats", get(heartbeats))
        .route("/v1/messages", get(messages))
        .route("/v1/blobs", post(add_blob))
        .route("/v1/blobs/fetch", post(fetch_blob))
        .route("/v1/blobs/{hash}", get(blob_status))
        .route("/v1/blobs/{hash}/export", post(export_blob))
        .route("/v1/jobs", post(submit_job))
        .route("/v1/jobs/{id}", get(job_status))
        .route("/v1/provider/refusals", get(bid_refusals))
        .route("/v1/shutdown", post(shutdown))
        .route("/v1/test/cheat", post(arm_cheat))
        .route("/v1/test/partition", post(partition))
        .with_state(api.clone())
        .layer(axum::middleware::from_fn_with_state(access.clone(), guard));
    private.merge(
        open_routes(dashboard)
            .with_state(api)
            .layer(axum::middleware::from_fn_with_state(access, guard_open)),
    )
}

/// What a page or a scraper on this machine may read without the token (see
/// [`guard_open`]): only GETs that show what the node sees. A client node serves the
/// dashboard of its own jobs under `/dashboard/`.
fn open_routes(dashboard: Option<Arc<Dashboard>>) -> Router<Api> {
    let r = Router::new().route("/metrics", get(metrics));
    match dashboard {
        Some(d) => r.merge(gpuchain_web::dashboard::view_routes(d)),
        None => r,
    }
}

/// Prometheus scrapes: every series of [`crate::metrics`], as OpenMetrics text.
async fn metrics() -> Response {
    (
        [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
        crate::metrics::global().encode(),
    )
        .into_response()
}

pub async fn serve(
    listener: tokio::net::TcpListener,
    handle: NodeHandle,
    roles: Option<RolesHandle>,
    dir: Arc<DataDir>,
    cheat: Option<Arc<CheatSwitch>>,
    partition_control: bool,
    access: Access,
) {
    let addr: Option<SocketAddr> = listener.local_addr().ok();
    let app = router(handle, roles, dir, cheat, partition_control, access);
    if let Err(e) = axum::serve(listener, app).await {
        tracing::error!(?addr, error = %e, "control API stopped");
    }
}

async fn status(State(Api { handle: h, .. }): State<Api>) -> ApiResult {
    ok(h.status().await.map_err(bad)?)
}

async fn peers(State(Api { handle: h, .. }): State<Api>) -> ApiResult {
    ok(h.peers().await.map_err(bad)?)
}

async fn publish(
    State(Api { handle: h, .. }): State<Api>,
    Json(r): Json<PublishRequest>,
) -> ApiResult {
    let data = publish_data(&r).map_err(|e| ApiError(StatusCode::BAD_REQUEST, e))?;
    let id = h.publish(r.topic, data).await.map_err(bad)?;
    ok(json!({ "message_id": id }))
}

async fn subscribe(
    State(Api { handle: h, .. }): State<Api>,
    Json(r): Json<TopicRequest>,
) -> ApiResult {
    h.subscribe(r.topic).await.map_err(bad)?;
    ok(json!({}))
}

async fn heartbeat(
    State(Api { handle: h, .. }): State<Api>,
    Json(r): Json<HeartbeatRequest>,
) -> ApiResult {
    h.heartbeat(r.topic, r.on).await.map_err(bad)?;
    ok(json!({}))
}

#[derive(Deserialize)]
struct HeartbeatsQuery {
    #[serde(default)]
    raw: bool,
    #[serde(default)]
    reset: bool,
}

async fn heartbeats(
    State(Api { handle: h, .. }): State<Api>,
    Query(q): Query<HeartbeatsQuery>,
) -> ApiResult {
    ok(h.heartbeat_stats(q.raw, q.reset).await.map_err(bad)?)
}

#[derive(Deserialize)]
struct MessagesQuery {
    #[serde(default)]
    since: u64,
}

async fn messages(
    State(Api { handle: h, .. }): State<Api>,
    Query(q): Query<MessagesQuery>,
) -> ApiResult {
    ok(h.messages(q.since).await.map_err(bad)?)
}

async fn add_blob(State(a): State<Api>, Json(r): Json<AddBlobRequest>) -> ApiResult {
    let path = a.dir.import_path(&r.path).map_err(forbidden)?;
    ok(a.handle
        .add_blob(path, r.name, r.share)
        .await
        .map_err(bad)?)
}

async fn fetch_blob(State(a): State<Api>, Json(r): Json<FetchBlobRequest>) -> ApiResult {
    // Malformed requests are the caller's problem (400); transfer failures are 502.
    check_fetch(&r).map_err(|e| ApiError(StatusCode::BAD_REQUEST, e))?;
    let export = match &r.export {
        Some(p) => Some(a.dir.export_path(p).map_err(forbidden)?),
        None => None,
    };
    let info = a
        .handle
        .fetch_blob(&r.hash, r.from, export)
        .await
        .map_err(|e| ApiError(StatusCode::BAD_GATEWAY, format!("{e:#}")))?;
    ok(info)
}

async fn blob_status(
    State(Api { handle: h, .. }): State<Api>,
    Path(hash): Path<String>,
) -> ApiResult {
    let size = h.blob_size(&hash).await.map_err(bad)?;
    ok(json!({ "hash": hash, "complete": size.is_some(), "size": size }))
}

async fn export_blob(
    State(a): State<Api>,
    Path(hash): Path<String>,
    Json(r): Json<ExportBlobRequest>,
) -> ApiResult {
    let path = a.dir.export_path(&r.path).map_err(forbidden)?;
    let size = a
        .handle
        .export_blob(&hash, path.clone())
        .await
        .map_err(bad)?;
    ok(json!({ "hash": hash, "size": size, "path": path }))
}

async fn submit_job(State(a): State<Api>, Json(r): Json<crate::roles::SubmitRequest>) -> ApiResult {
    ok(a.roles()?.submit_job(r).await.map_err(bad)?)
}

async fn job_status(State(a): State<Api>, Path(id): Path<String>) -> ApiResult {
    let job_id: gpuchain_protocol::JobId = id.parse().map_err(|e| {
        ApiError(
            StatusCode::BAD_REQUEST,
            format!("{id:?} is not a job id: {e}"),
        )
    })?;
    let Some(s) = a.roles()?.job_status(job_id).await.map_err(bad)? else {
        return Err(ApiError(
            StatusCode::NOT_FOUND,
            format!("this client node does not know job {job_id}"),
        ));
    };
    ok(json!({
        "job_id": job_id.to_string(),
        "phase": format!("{:?}", s.phase),
        "epoch": s.epoch,
        "provider": s.provider.map(|p| p.to_string()),
        "last_accepted": s.last_accepted,
        "last_accepted_hash": s.last_accepted_hash.to_string(),
        "last_reported_step": s.last_reported_step,
        "excluded": s.excluded.iter().map(ToString::to_string).collect::<Vec<_>>(),
        // the providers given up on, and why ("lost" or "stalled")
        "detections": s.detections.iter().map(|d| json!({
            "epoch": d.epoch,
            "provider": d.provider.to_string(),
            "reason": d.reason.as_str(),
            "silent_for_ms": d.silent_for.as_millis() as u64,
        })).collect::<Vec<_>>(),
    }))
}

/// Bids the provider refused to make, by the rule that refused them.
async fn bid_refusals(State(a): State<Api>) -> ApiResult {
    let Some(counts) = a.roles()?.bid_refusals().await.map_err(bad)? else {
        return Err(ApiError(
            StatusCode::NOT_FOUND,
            "this node does not run the provider role".to_string(),
        ));
    };
    ok(json!({ "refused_bids": counts }))
}

async fn shutdown(State(Api { handle: h, .. }): State<Api>) -> ApiResult {
    h.shutdown();
    ok(json!({}))
}

/// `POST /v1/test/cheat` (testnet providers only).
#[derive(Debug, Deserialize)]
pub struct CheatRequest {
    pub fault: Fault,
}

/// TESTING ONLY: the testnet's break-it controls make this provider's next checkpoint cheat.
async fn arm_cheat(State(Api { cheat, .. }): State<Api>, Json(r): Json<CheatRequest>) -> ApiResult {
    let Some(cheat) = cheat else {
        return Err(ApiError(
            StatusCode::FORBIDDEN,
            "this node does not take cheats from its API: only a local testnet's provider started with --test-cheat-control does".into(),
        ));
    };
    cheat.arm(r.fault).map_err(bad)?;
    ok(json!({ "armed": format!("{:?}", r.fault) }))
}

/// `POST /v1/test/partition` (testnet nodes only).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartitionRequest {
    /// libp2p peer ids.
    pub peers: Vec<String>,
    /// Cut off (true) or heal (false).
    pub blocked: bool,
}

/// TESTING ONLY: a testnet's partition faults cut this node off from the given peers (every
/// connection closed, new ones refused, no blob fetched from them) and heal it.
async fn partition(
    State(Api {
        handle,
        partition_control,
        ..
    }): State<Api>,
    Json(r): Json<PartitionRequest>,
) -> ApiResult {
    if !partition_control {
        return Err(ApiError(
            StatusCode::FORBIDDEN,
            "this node takes no partitions from its API: only a local testnet's node started with --test-partition-control does".into(),
        ));
    }
    let peers = parse_peers(&r.peers).map_err(|e| ApiError(StatusCode::BAD_REQUEST, e))?;
    handle
        .partition(peers, r.blocked)
        .await
        .map_err(|e| ApiError(StatusCode::SERVICE_UNAVAILABLE, format!("{e:#}")))?;
    ok(json!({ "peers": r.peers, "blocked": r.blocked }))
}

// What the handlers check in a request body before acting on it, as pure functions: the
// handlers and the control-API fuzz target (`fuzz/`) share them. Each error is the text of a
// 400 answer.

/// `POST /v1/publish`: the message bytes in `data_hex`.
pub fn publish_data(r: &PublishRequest) -> Result<Vec<u8>, String> {
    hex::decode(&r.data_hex).map_err(|e| format!("data_hex: {e}"))
}

/// `POST /v1/blobs/fetch`: a well-formed hash and peer ids (the export path is the data
/// dir's business).
pub fn check_fetch(r: &FetchBlobRequest) -> Result<(), String> {
    crate::blobs::parse_hash(&r.hash).map_err(|e| format!("{e:#}"))?;
    parse_peers(&r.from).map(|_| ())
}

/// libp2p peer ids, as `POST /v1/blobs/fetch` and `POST /v1/test/partition` take them.
pub fn parse_peers(peers: &[String]) -> Result<Vec<libp2p::PeerId>, String> {
    peers
        .iter()
        .map(|p| {
            p.parse::<libp2p::PeerId>()
                .map_err(|e| format!("{p:?} is not a peer id: {e}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// JSON-ish bodies: mostly objects with the request fields, sometimes anything.
    fn body() -> impl Strategy<Value = Vec<u8>> {
        let value = prop_oneof![
            "\\PC{0,60}".prop_map(serde_json::Value::String),
            "[0-9a-fA-F]{0,66}".prop_map(serde_json::Value::String),
            Just(serde_json::json!(
                "12D3KooWD3eckifWpRn9wQpMG9R9hX3sD158z7EqHWmweQAJU5SA"
            )),
            any::<i64>().prop_map(|n| serde_json::json!(n)),
            any::<bool>().prop_map(serde_json::Value::Bool),
            proptest::collection::vec("[0-9a-zA-Z]{0,52}", 0..3).prop_map(|v| serde_json::json!(v)),
        ];
        let key = prop_oneof![
            proptest::sample::select(vec![
                "topic",
                "data_hex",
                "on",
                "path",
                "name",
                "share",
                "hash",
                "from",
                "export",
                "peers",
                "blocked",
                "fault",
                "spec_path",
                "budget",
                "quorum",
            ])
            .prop_map(str::to_string),
            "[a-z_]{1,8}",
        ];
        prop_oneof![
            4 => proptest::collection::btree_map(key, value, 0..5)
                .prop_map(|m| serde_json::to_vec(&m).expect("json")),
            1 => proptest::collection::vec(any::<u8>(), 0..80),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Every POST body type, as the `Json` extractor reads it, then the handler's checks:
        /// refused with an error or accepted consistently, never a panic (the fuzz target
        /// `api_json` runs the same for long).
        #[test]
        fn any_body_is_refused_or_checked(bytes in body()) {
            if let Ok(r) = serde_json::from_slice::<PublishRequest>(&bytes)
                && let Ok(data) = publish_data(&r)
            {
                prop_assert_eq!(hex::encode(data), r.data_hex.to_ascii_lowercase());
            }
            if let Ok(r) = serde_json::from_slice::<FetchBlobRequest>(&bytes)
                && check_fetch(&r).is_ok()
            {
                prop_assert_eq!(parse_peers(&r.from).map(|p| p.len()), Ok(r.from.len()));
            }
            if let Ok(r) = serde_json::from_slice::<PartitionRequest>(&bytes) {
                let _ = parse_peers(&r.peers);
            }
            let _ = serde_json::from_slice::<TopicRequest>(&bytes);
            let _ = serde_json::from_slice::<HeartbeatRequest>(&bytes);
            let _ = serde_json::from_slice::<AddBlobRequest>(&bytes);
            let _ = serde_json::from_slice::<ExportBlobRequest>(&bytes);
            let _ = serde_json::from_slice::<CheatRequest>(&bytes);
            let _ = serde_json::from_slice::<crate::roles::SubmitRequest>(&bytes);
        }
    }

    #[test]
    fn checks_refuse_what_handlers_refuse() {
        let r = PublishRequest {
            topic: "t".into(),
            data_hex: "0g".into(),
        };
        assert!(publish_data(&r).unwrap_err().starts_with("data_hex"));
        let r = FetchBlobRequest {
            hash: "00".repeat(32),
            from: vec!["nope".into()],
            export: None,
        };
        assert!(check_fetch(&r).unwrap_err().contains("is not a peer id"));
        let r = FetchBlobRequest {
            hash: "xyz".into(),
            ..Default::default()
        };
        assert!(check_fetch(&r).unwrap_err().contains("is not a blob hash"));
    }
}
