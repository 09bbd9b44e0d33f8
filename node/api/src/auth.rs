//! Who may use a node's control API, decided the way operators already know from
//! lighthouse's validator API: a bearer token kept in a file only the node's user can read.
//! Anyone who can read the data dir can already read the keys, so the token adds no new
//! trust; it keeps out everyone else who can open a TCP connection to loopback — other
//! users of the machine, and web pages in the operator's browser (which also cannot forge
//! `Host` or `Origin`, checked here against DNS rebinding and cross-site requests).

use std::io::{self, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use rand::TryRngCore;

/// The bound API address, written by a running node into its data dir.
pub const ADDR_FILE: &str = "api.addr";
/// The API's access token (64 hex characters), created at first start with mode 0600.
pub const TOKEN_FILE: &str = "api.token";
/// Header carrying `Bearer <token>`.
pub const AUTH_HEADER: &str = "authorization";
const TOKEN_BYTES: usize = 32;

pub fn token_path(data_dir: &Path) -> PathBuf {
    data_dir.join(TOKEN_FILE)
}

/// The token in `data_dir`, created on first use. An existing file that others may read is
/// tightened to 0600 rather than trusted as it is: whoever could read it may have copied
/// it, so it is replaced too.
pub fn load_or_create_token(data_dir: &Path) -> io::Result<String> {
    let path = token_path(data_dir);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            if valid_token(text.trim()) && !readable_by_others(&path)? {
                return Ok(text.trim().to_string());
            }
            // Malformed or exposed: replaced by a fresh one below.
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut raw = [0u8; TOKEN_BYTES];
    rand::rngs::OsRng
        .try_fill_bytes(&mut raw)
        .map_err(|e| io::Error::other(format!("the OS random source failed: {e}")))?;
    let token = hex::encode(raw);
    write_private(&path, token.as_bytes())?;
    Ok(token)
}

/// The token of the node whose data dir this is, for a caller.
pub fn read_token(data_dir: &Path) -> io::Result<String> {
    let text = std::fs::read_to_string(token_path(data_dir))?;
    let t = text.trim();
    if valid_token(t) {
        Ok(t.to_string())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not an API token (64 hex characters)",
        ))
    }
}

fn valid_token(t: &str) -> bool {
    t.len() == 2 * TOKEN_BYTES && t.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(unix)]
fn readable_by_others(path: &Path) -> io::Result<bool> {
    use std::os::unix::fs::PermissionsExt;
    Ok(std::fs::metadata(path)?.permissions().mode() & 0o077 != 0)
}

#[cfg(not(unix))]
fn readable_by_others(_path: &Path) -> io::Result<bool> {
    Ok(false)
}

/// Writes through a temporary file created 0600, so the secret is never readable by others,
/// not even for the moment between create and chmod, and a crash leaves no half a token.
fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)
}

/// `Bearer <token>` with the token compared in constant time, so response timing does not
/// reveal how many leading characters a guess got right.
pub fn bearer_matches(header: Option<&str>, token: &str) -> bool {
    let Some(given) = header.and_then(|h| h.strip_prefix("Bearer ")) else {
        return false;
    };
    let (a, b) = (given.trim().as_bytes(), token.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The names a request may use for the node in `Host`: the bound address itself, or
/// `localhost` / the loopback address with the bound port. Anything else is what a
/// DNS-rebinding page sends (its own host name resolving to 127.0.0.1).
pub fn host_allowed(host: &str, bound: SocketAddr) -> bool {
    let port = bound.port();
    let Some((name, p)) = host.rsplit_once(':') else {
        return false;
    };
    if p.parse::<u16>().ok() != Some(port) {
        return false;
    }
    let name = name.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = name.parse::<std::net::IpAddr>() {
        return ip == bound.ip() || (bound.ip().is_loopback() && ip.is_loopback());
    }
    name.eq_ignore_ascii_case("localhost") && bound.ip().is_loopback()
}

/// A browser names the page that made a request in `Origin`; only pages the node serves
/// itself (same scheme, host and port) may call it. Requests without `Origin` come from
/// programs, which the token governs.
pub fn origin_allowed(origin: Option<&str>, bound: SocketAddr) -> bool {
    match origin {
        None => true,
        Some(o) => o
            .strip_prefix("http://")
            .is_some_and(|host| !host.contains('/') && host_allowed(host, bound)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bound() -> SocketAddr {
        "127.0.0.1:7600".parse().expect("addr")
    }

    #[test]
    fn hosts_that_name_the_node_pass_and_rebinding_names_fail() {
        for ok in [
            "127.0.0.1:7600",
            "localhost:7600",
            "LOCALHOST:7600",
            "[::1]:7600",
        ] {
            assert!(host_allowed(ok, bound()), "{ok}");
        }
        for bad in [
            "evil.example:7600",
            "127.0.0.1:7601",
            "127.0.0.1",
            "localhost.evil.example:7600",
            "",
            "10.0.0.1:7600",
        ] {
            assert!(!host_allowed(bad, bound()), "{bad}");
        }
        let remote: SocketAddr = "10.0.0.5:7600".parse().expect("addr");
        assert!(host_allowed("10.0.0.5:7600", remote));
        assert!(!host_allowed("localhost:7600", remote));
    }

    #[test]
    fn only_the_nodes_own_pages_are_an_allowed_origin() {
        assert!(origin_allowed(None, bound()));
        assert!(origin_allowed(Some("http://127.0.0.1:7600"), bound()));
        assert!(origin_allowed(Some("http://localhost:7600"), bound()));
        for bad in [
            "http://evil.example",
            "https://127.0.0.1:7600",
            "null",
            "http://127.0.0.1:7600/x",
            "http://127.0.0.1:80",
        ] {
            assert!(!origin_allowed(Some(bad), bound()), "{bad}");
        }
    }

    #[test]
    fn bearer_needs_the_exact_token() {
        let t = "ab".repeat(32);
        assert!(bearer_matches(Some(&format!("Bearer {t}")), &t));
        assert!(!bearer_matches(Some(&t), &t));
        assert!(!bearer_matches(Some(&format!("Bearer {}", &t[1..])), &t));
        assert!(!bearer_matches(
            Some(&format!("Bearer {}", "ac".repeat(32))),
            &t
        ));
        assert!(!bearer_matches(None, &t));
    }

    #[test]
    fn token_is_created_private_kept_and_replaced_when_exposed() {
        let dir = tempfile::tempdir().expect("tmp");
        let t1 = load_or_create_token(dir.path()).expect("create");
        assert!(valid_token(&t1));
        assert_eq!(load_or_create_token(dir.path()).expect("load"), t1);
        assert_eq!(read_token(dir.path()).expect("read"), t1);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let p = token_path(dir.path());
            assert_eq!(
                std::fs::metadata(&p).expect("meta").permissions().mode() & 0o777,
                0o600
            );
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).expect("chmod");
            let t2 = load_or_create_token(dir.path()).expect("replace");
            assert_ne!(t2, t1, "an exposed token must not be kept");
            assert_eq!(
                std::fs::metadata(&p).expect("meta").permissions().mode() & 0o777,
                0o600
            );
        }
        std::fs::write(token_path(dir.path()), "garbage").expect("write");
        assert!(read_token(dir.path()).is_err());
        assert!(valid_token(
            &load_or_create_token(dir.path()).expect("fresh")
        ));
    }
}
