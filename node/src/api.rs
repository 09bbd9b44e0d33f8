//! Loopback control API (JSON over HTTP). The dashboard and CLI subcommands will use the
//! same routes. Errors come back as `{"error": "..."}` with a 4xx/5xx status.

use std::net::SocketAddr;
use std::path::PathBuf;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use crate::handle::NodeHandle;

struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(json!({ "error": self.1 }))).into_response()
    }
}

fn bad(e: anyhow::Error) -> ApiError {
    ApiError(StatusCode::BAD_REQUEST, format!("{e:#}"))
}

type ApiResult = Result<Response, ApiError>;

fn ok<T: serde::Serialize>(v: T) -> ApiResult {
    Ok(Json(v).into_response())
}

pub fn router(handle: NodeHandle) -> Router {
    Router::new()
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
        .route("/v1/shutdown", post(shutdown))
        .with_state(handle)
}

pub async fn serve(listener: tokio::net::TcpListener, handle: NodeHandle) {
    let addr: Option<SocketAddr> = listener.local_addr().ok();
    if let Err(e) = axum::serve(listener, router(handle)).await {
        tracing::error!(?addr, error = %e, "control API stopped");
    }
}

async fn status(State(h): State<NodeHandle>) -> ApiResult {
    ok(h.status().await.map_err(bad)?)
}

async fn peers(State(h): State<NodeHandle>) -> ApiResult {
    ok(h.peers().await.map_err(bad)?)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PublishReq {
    topic: String,
    data_hex: String,
}

async fn publish(State(h): State<NodeHandle>, Json(r): Json<PublishReq>) -> ApiResult {
    let data = hex::decode(&r.data_hex)
        .map_err(|e| ApiError(StatusCode::BAD_REQUEST, format!("data_hex: {e}")))?;
    let id = h.publish(r.topic, data).await.map_err(bad)?;
    ok(json!({ "message_id": id }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TopicReq {
    topic: String,
}

async fn subscribe(State(h): State<NodeHandle>, Json(r): Json<TopicReq>) -> ApiResult {
    h.subscribe(r.topic).await.map_err(bad)?;
    ok(json!({}))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HeartbeatReq {
    topic: String,
    #[serde(default = "yes")]
    on: bool,
}

fn yes() -> bool {
    true
}

async fn heartbeat(State(h): State<NodeHandle>, Json(r): Json<HeartbeatReq>) -> ApiResult {
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

async fn heartbeats(State(h): State<NodeHandle>, Query(q): Query<HeartbeatsQuery>) -> ApiResult {
    ok(h.heartbeat_stats(q.raw, q.reset).await.map_err(bad)?)
}

#[derive(Deserialize)]
struct MessagesQuery {
    #[serde(default)]
    since: u64,
}

async fn messages(State(h): State<NodeHandle>, Query(q): Query<MessagesQuery>) -> ApiResult {
    ok(h.messages(q.since).await.map_err(bad)?)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AddBlobReq {
    path: PathBuf,
    tag: Option<String>,
}

async fn add_blob(State(h): State<NodeHandle>, Json(r): Json<AddBlobReq>) -> ApiResult {
    ok(h.add_blob(r.path, r.tag).await.map_err(bad)?)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FetchReq {
    hash: String,
    #[serde(default)]
    from: Vec<String>,
    tag: Option<String>,
    export: Option<PathBuf>,
}

async fn fetch_blob(State(h): State<NodeHandle>, Json(r): Json<FetchReq>) -> ApiResult {
    // Malformed requests are the caller's problem (400); transfer failures are 502.
    crate::blobs::parse_hash(&r.hash).map_err(bad)?;
    for p in &r.from {
        p.parse::<libp2p::PeerId>().map_err(|e| {
            ApiError(
                StatusCode::BAD_REQUEST,
                format!("{p:?} is not a peer id: {e}"),
            )
        })?;
    }
    let info = h
        .fetch_blob(&r.hash, r.from, r.tag, r.export)
        .await
        .map_err(|e| ApiError(StatusCode::BAD_GATEWAY, format!("{e:#}")))?;
    ok(info)
}

async fn blob_status(State(h): State<NodeHandle>, Path(hash): Path<String>) -> ApiResult {
    let size = h.blob_size(&hash).await.map_err(bad)?;
    ok(json!({ "hash": hash, "complete": size.is_some(), "size": size }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExportReq {
    path: PathBuf,
}

async fn export_blob(
    State(h): State<NodeHandle>,
    Path(hash): Path<String>,
    Json(r): Json<ExportReq>,
) -> ApiResult {
    let size = h.export_blob(&hash, r.path).await.map_err(bad)?;
    ok(json!({ "hash": hash, "size": size }))
}

async fn submit_job(
    State(h): State<NodeHandle>,
    Json(r): Json<crate::roles::SubmitRequest>,
) -> ApiResult {
    ok(h.submit_job(r).await.map_err(bad)?)
}

async fn job_status(State(h): State<NodeHandle>, Path(id): Path<String>) -> ApiResult {
    let job_id: gpuchain_protocol::JobId = id.parse().map_err(|e| {
        ApiError(
            StatusCode::BAD_REQUEST,
            format!("{id:?} is not a job id: {e}"),
        )
    })?;
    let Some(s) = h.job_status(job_id).await.map_err(bad)? else {
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
    }))
}

async fn shutdown(State(h): State<NodeHandle>) -> ApiResult {
    h.shutdown();
    ok(json!({}))
}
