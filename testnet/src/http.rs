//! A minimal HTTP/1.1 client for the node's loopback control API: one request per
//! connection, JSON in and out. No HTTP client crate is a workspace dependency, and the API
//! is loopback-only, so TLS, redirects, keep-alive and proxies never come up.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends one request and returns the status code and the body (parsed as JSON, or as a JSON
/// string when it is not JSON).
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&Value>,
    timeout: Duration,
) -> Result<(u16, Value)> {
    tokio::time::timeout(timeout, exchange(addr, method, path, body))
        .await
        .map_err(|_| anyhow!("{method} http://{addr}{path}: no answer within {timeout:?}"))?
        .with_context(|| format!("{method} http://{addr}{path}"))
}

async fn exchange(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Result<(u16, Value)> {
    let mut stream = TcpStream::connect(addr).await.context("connecting")?;
    let body = body.map(Value::to_string).unwrap_or_default();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAccept: application/json\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.context("sending")?;
    stream.write_all(body.as_bytes()).await.context("sending")?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.context("reading")?;
    parse_response(&raw)
}

fn parse_response(raw: &[u8]) -> Result<(u16, Value)> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| {
            anyhow!(
                "malformed HTTP response ({} bytes, no header end)",
                raw.len()
            )
        })?;
    let head = String::from_utf8_lossy(&raw[..split]);
    let body = &raw[split + 4..];
    let code: u16 = head
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| anyhow!("malformed HTTP status line: {head:?}"))?;
    let chunked = head.lines().any(|l| {
        l.split_once(':').is_some_and(|(k, v)| {
            k.trim().eq_ignore_ascii_case("transfer-encoding")
                && v.to_ascii_lowercase().contains("chunked")
        })
    });
    let body = if chunked {
        dechunk(body)?
    } else {
        body.to_vec()
    };
    let value = serde_json::from_slice(&body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
    Ok((code, value))
}

fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or_else(|| anyhow!("truncated chunked body"))?;
        let size_line = String::from_utf8_lossy(&rest[..eol]);
        let size_hex = size_line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_hex, 16)
            .with_context(|| format!("bad chunk size {size_hex:?}"))?;
        rest = &rest[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        if rest.len() < size {
            bail!("truncated chunk: {} of {size} bytes", rest.len());
        }
        out.extend_from_slice(&rest[..size]);
        rest = rest[size..].strip_prefix(b"\r\n").unwrap_or(&rest[size..]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_plain_and_chunked_bodies() {
        let plain = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 7\r\n\r\n{\"a\":1}";
        assert_eq!(
            parse_response(plain).expect("plain"),
            (200, json!({"a": 1}))
        );
        let chunked =
            b"HTTP/1.1 400 Bad Request\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n3\r\n:2}\r\n0\r\n\r\n";
        assert_eq!(
            parse_response(chunked).expect("chunked"),
            (400, json!({"a": 2}))
        );
        let text = b"HTTP/1.1 404 Not Found\r\n\r\nnope";
        assert_eq!(parse_response(text).expect("text"), (404, json!("nope")));
        assert!(parse_response(b"garbage").is_err());
    }
}
