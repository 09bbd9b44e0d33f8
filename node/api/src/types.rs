//! Request bodies of the control API, shared by the server (which rejects unknown fields)
//! and every caller.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// `POST /v1/publish`: raw bytes of an encoded protocol message; receivers validate.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublishRequest {
    pub topic: String,
    pub data_hex: String,
}

/// `POST /v1/subscribe`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicRequest {
    pub topic: String,
}

/// `POST /v1/heartbeat`: start (`on`, the default) or stop heartbeats on a job's heartbeat
/// topic (named by it or by the job's topic).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatRequest {
    pub topic: String,
    #[serde(default = "yes")]
    pub on: bool,
}

fn yes() -> bool {
    true
}

/// `POST /v1/blobs`: import a file from the node's import directory.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddBlobRequest {
    /// Absolute, or relative to the import directory.
    pub path: PathBuf,
    /// A name for the tag under the node's own prefix (letters, digits, `-_./`).
    #[serde(default)]
    pub name: Option<String>,
    /// Serve it to peers. Off by default: importing a file is not publishing it.
    #[serde(default)]
    pub share: bool,
}

/// `POST /v1/blobs/fetch`: fetch by hash, from the named peers first.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FetchBlobRequest {
    pub hash: String,
    #[serde(default)]
    pub from: Vec<String>,
    /// Also write it to this file in the node's export directory.
    #[serde(default)]
    pub export: Option<PathBuf>,
}

/// `POST /v1/blobs/{hash}/export`: write a blob to a file in the node's export directory.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportBlobRequest {
    /// Absolute, or relative to the export directory.
    pub path: PathBuf,
}

/// The body of every error answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
}
