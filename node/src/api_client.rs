//! A minimal HTTP/1.1 client for the node's loopback control API, so CLI commands can talk
//! to a running node without an HTTP stack of their own.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The API address a running node wrote into its data dir.
pub fn api_addr_of(data_dir: &Path) -> Result<SocketAddr> {
    let path = data_dir.join(crate::node::API_ADDR_FILE);
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "no running node with a control API in {}: start `gpuchain node --data-dir {} --api 127.0.0.1:0 …` first, or pass --api ADDR",
            data_dir.display(),
            data_dir.display()
        )
    })?;
    text.trim()
        .parse()
        .map_err(|e| anyhow!("{} holds {text:?}, not an address: {e}", path.display()))
}

pub async fn get(addr: SocketAddr, path: &str, timeout: Duration) -> Result<Value> {
    request(addr, "GET", path, None, timeout).await
}

pub async fn post(addr: SocketAddr, path: &str, body: &Value, timeout: Duration) -> Result<Value> {
    request(addr, "POST", path, Some(body), timeout).await
}

async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&Value>,
    timeout: Duration,
) -> Result<Value> {
    let fut = async {
        let mut stream = tokio::net::TcpStream::connect(addr)
            .await
            .with_context(|| {
                format!("cannot reach the node's control API at {addr}: is the node running?")
            })?;
        let body = body.map(Value::to_string).unwrap_or_default();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await?;
        parse_response(&raw)
    };
    tokio::time::timeout(timeout, fut).await.map_err(|_| {
        anyhow!("the node at {addr} did not answer {method} {path} within {timeout:?}")
    })?
}

fn parse_response(raw: &[u8]) -> Result<Value> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| anyhow!("malformed HTTP response from the node"))?;
    let head = String::from_utf8_lossy(&raw[..split]);
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow!("malformed HTTP status line from the node"))?;
    let mut body = raw[split + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body)?;
    }
    let value: Value = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&body).map_err(|e| anyhow!("the node sent invalid JSON: {e}"))?
    };
    if !(200..300).contains(&status) {
        let msg = value
            .get("error")
            .and_then(Value::as_str)
            .map_or_else(|| value.to_string(), str::to_string);
        bail!("{msg}");
    }
    Ok(value)
}

fn dechunk(mut b: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = b
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or_else(|| anyhow!("malformed chunked body"))?;
        let size_text = String::from_utf8_lossy(&b[..line_end]);
        let size = usize::from_str_radix(size_text.trim(), 16)
            .map_err(|_| anyhow!("malformed chunk size"))?;
        b = &b[line_end + 2..];
        if size == 0 {
            return Ok(out);
        }
        if b.len() < size + 2 {
            bail!("truncated chunked body");
        }
        out.extend_from_slice(&b[..size]);
        b = &b[size + 2..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_chunked_and_error_responses() {
        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 8\r\n\r\n{\"a\": 1}";
        assert_eq!(parse_response(ok).expect("ok")["a"], 1);
        let chunked =
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n4\r\n: 2}\r\n0\r\n\r\n";
        assert_eq!(parse_response(chunked).expect("chunked")["a"], 2);
        let err = b"HTTP/1.1 400 Bad Request\r\n\r\n{\"error\":\"no such job\"}";
        let e = parse_response(err).expect_err("400");
        assert_eq!(e.to_string(), "no such job");
        assert!(parse_response(b"garbage").is_err());
    }
}
