//! The one client of the control API. Every caller (CLI commands, the testnet harness,
//! the tests) goes through it, so the token, the JSON conventions and the error messages
//! are the same everywhere.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::auth;
use crate::types::ErrorBody;

pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error(
        "no running node with a control API in {}: start `gpuchain node --data-dir {} --api 127.0.0.1:0 …` first",
        .dir.display(), .dir.display()
    )]
    NoNode { dir: PathBuf },
    #[error("{} holds {text:?}, not an address", .path.display())]
    BadAddrFile { path: PathBuf, text: String },
    #[error(
        "cannot read the node's API token {}: {source}; run as the user that runs the node, or pass the token file",
        .path.display()
    )]
    NoToken {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot reach the node's control API at {addr}: is the node running? ({source})")]
    Unreachable {
        addr: SocketAddr,
        source: reqwest::Error,
    },
    #[error("the node at {addr} did not answer {method} {path} within {timeout:?}")]
    Timeout {
        addr: SocketAddr,
        method: String,
        path: String,
        timeout: Duration,
    },
    #[error("{method} {path}: the node answered {status}: {message}")]
    Status {
        method: String,
        path: String,
        status: u16,
        message: String,
    },
    #[error("{method} {path}: cannot read the node's answer: {detail}")]
    Decode {
        method: String,
        path: String,
        detail: String,
    },
}

impl ApiError {
    /// The HTTP status, when the node answered with an error.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// A node's API address and token. Cheap to clone (the connection pool is shared).
#[derive(Debug, Clone)]
pub struct ApiClient {
    addr: SocketAddr,
    token: Option<String>,
    timeout: Duration,
    http: reqwest::Client,
}

/// One answer, whatever its status: for callers (tests, probes) that look at refusals too.
#[derive(Debug, Clone)]
pub struct RawReply {
    pub status: u16,
    pub body: Value,
}

impl ApiClient {
    pub fn new(addr: SocketAddr, token: Option<String>) -> Self {
        Self {
            addr,
            token,
            timeout: DEFAULT_TIMEOUT,
            http: reqwest::Client::builder()
                // The API is local: a system proxy would only see (and leak) the token.
                .no_proxy()
                .build()
                .unwrap_or_default(),
        }
    }

    /// The node running on `data_dir`: its bound address and its token, both read from
    /// the files it keeps there.
    pub fn for_data_dir(data_dir: &Path) -> Result<Self, ApiError> {
        let addr = addr_of(data_dir)?;
        let token = auth::read_token(data_dir).map_err(|source| ApiError::NoToken {
            path: auth::token_path(data_dir),
            source,
        })?;
        Ok(Self::new(addr, Some(token)))
    }

    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ApiError> {
        self.call("GET", path, None::<&()>).await
    }

    pub async fn post<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, ApiError> {
        self.call("POST", path, Some(body)).await
    }

    /// `GET /metrics`: the node's Prometheus metrics as OpenMetrics text. Loopback needs no
    /// token for it; one is sent when this client holds it.
    pub async fn metrics(&self) -> Result<String, ApiError> {
        let (method, path) = ("GET", "/metrics");
        let mut req = self
            .http
            .get(format!("http://{}{path}", self.addr))
            .timeout(self.timeout);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| self.transport(e, method, path))?;
        let status = resp.status().as_u16();
        let text = resp
            .text()
            .await
            .map_err(|e| self.transport(e, method, path))?;
        if status != 200 {
            return Err(ApiError::Status {
                method: method.to_string(),
                path: path.to_string(),
                status,
                message: text,
            });
        }
        Ok(text)
    }

    async fn call<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: Option<&B>,
    ) -> Result<T, ApiError> {
        let reply = self.send(method, path, body, &[]).await?;
        if !(200..300).contains(&reply.status) {
            let message = serde_json::from_value::<ErrorBody>(reply.body.clone())
                .map(|b| b.error)
                .unwrap_or_else(|_| reply.body.to_string());
            return Err(ApiError::Status {
                method: method.to_string(),
                path: path.to_string(),
                status: reply.status,
                message,
            });
        }
        serde_json::from_value(reply.body).map_err(|e| ApiError::Decode {
            method: method.to_string(),
            path: path.to_string(),
            detail: e.to_string(),
        })
    }

    /// Sends one request with extra headers and returns the answer whatever its status.
    /// The token goes along unless a header of the same name is given.
    pub async fn send<B: Serialize + ?Sized>(
        &self,
        method: &str,
        path: &str,
        body: Option<&B>,
        headers: &[(&str, &str)],
    ) -> Result<RawReply, ApiError> {
        let url = format!("http://{}{path}", self.addr);
        let m = reqwest::Method::from_bytes(method.as_bytes()).map_err(|_| ApiError::Decode {
            method: method.to_string(),
            path: path.to_string(),
            detail: "not an HTTP method".into(),
        })?;
        let mut req = self.http.request(m, &url).timeout(self.timeout);
        let overrides = |name: &str| headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(name));
        if let Some(t) = &self.token
            && !overrides(auth::AUTH_HEADER)
        {
            req = req.bearer_auth(t);
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| self.transport(e, method, path))?;
        let status = resp.status().as_u16();
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| self.transport(e, method, path))?;
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
        };
        Ok(RawReply { status, body })
    }

    fn transport(&self, e: reqwest::Error, method: &str, path: &str) -> ApiError {
        if e.is_timeout() {
            ApiError::Timeout {
                addr: self.addr,
                method: method.to_string(),
                path: path.to_string(),
                timeout: self.timeout,
            }
        } else {
            ApiError::Unreachable {
                addr: self.addr,
                source: e,
            }
        }
    }
}

/// The API address a running node wrote into its data dir.
pub fn addr_of(data_dir: &Path) -> Result<SocketAddr, ApiError> {
    let path = data_dir.join(auth::ADDR_FILE);
    let text = std::fs::read_to_string(&path).map_err(|_| ApiError::NoNode {
        dir: data_dir.to_path_buf(),
    })?;
    text.trim()
        .parse()
        .map_err(|_| ApiError::BadAddrFile { path, text })
}
