//! What keeps other web pages from driving the API, token or not.
//!
//! A browser lets any page send a "simple" cross-origin request (a
//! `POST` with `Content-Type: text/plain`, no preflight) to a loopback
//! address, and a page whose DNS name is rebound to `127.0.0.1` is even
//! same-origin with the API as far as the browser knows. So, in order:
//!
//! 1. the `Host` header must name the API: the listen address, `localhost`
//!    with the port when the address includes loopback, or a name from
//!    `--api-allowed-hosts`; a rebound name fails here (`421`);
//! 2. a state-changing request (`POST`, `PUT`, `PATCH`, `DELETE`) with an
//!    `Origin` must come from one of those same names (`403`);
//! 3. a state-changing request must say `Content-Type: application/json`
//!    (`415`): a page can send that cross-origin only after a CORS
//!    preflight, which the API never grants.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use anyhow::anyhow;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::routes;

/// The environment variable behind `--api-allowed-hosts`.
pub const ALLOWED_HOSTS_ENV: &str = "SLUICE_API_ALLOWED_HOSTS";

/// The names a `Host` header may carry, besides the listen address.
#[derive(Debug, Clone, Default)]
pub struct AllowedHosts(Vec<String>);

impl AllowedHosts {
    /// Parses `--api-allowed-hosts` entries: `name` or `name:port`, an IP
    /// or a DNS name; no scheme, path or wildcard, which a `Host` header
    /// never holds.
    pub fn parse(entries: &[String]) -> Result<AllowedHosts, anyhow::Error> {
        let mut names = Vec::new();
        for entry in entries.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
            if split_host(entry).is_none() {
                return Err(anyhow!(
                    "--api-allowed-hosts ({ALLOWED_HOSTS_ENV}): {entry:?} is not a host name: give a DNS name or IP, optionally with `:port`, such as `sluice.internal` or `sluice.internal:8080`, comma-separated; no scheme, path or `*`"
                ));
            }
            names.push(entry.to_ascii_lowercase());
        }
        Ok(AllowedHosts(names))
    }
}

/// The `Host` values this API answers to.
pub struct Guard {
    addr: SocketAddr,
    names: AllowedHosts,
}

impl Guard {
    pub fn new(addr: SocketAddr, names: AllowedHosts) -> Guard {
        Guard { addr, names }
    }

    /// Whether `host` (a `Host` header, or an `Origin`'s authority) names
    /// this API.
    pub fn allows(&self, host: &str) -> bool {
        let host = host.trim().to_ascii_lowercase();
        let Some((name, port)) = split_host(&host) else { return false };
        let port_fits = port.map_or(self.addr.port() == 80, |p| p == self.addr.port());
        if self.names.0.iter().any(|allowed| *allowed == host || (port_fits && *allowed == name)) {
            return true;
        }
        if !port_fits {
            return false;
        }
        let listen = self.addr.ip();
        if name == "localhost" {
            return listen.is_loopback() || listen.is_unspecified();
        }
        // A DNS rebinding attack needs a name; an IP literal cannot be
        // rebound. So a wildcard listener answers to any of its IPs.
        match name.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
            Ok(ip) => ip == listen || listen.is_unspecified(),
            Err(_) => false,
        }
    }

    /// What the `421` answer lists as the right names.
    fn describe(&self) -> String {
        let mut names = vec![self.addr.to_string()];
        if self.addr.ip().is_loopback() || self.addr.ip().is_unspecified() {
            names.push(format!("localhost:{}", self.addr.port()));
        }
        names.extend(self.names.0.iter().cloned());
        names.join(", ")
    }
}

/// `name` and `port` of `host[:port]` or `[v6][:port]`; `None` for
/// anything a `Host` header cannot be.
fn split_host(host: &str) -> Option<(&str, Option<u16>)> {
    let (name, port) = if let Some(rest) = host.strip_prefix('[') {
        let end = rest.find(']')?;
        rest[..end].parse::<std::net::Ipv6Addr>().ok()?;
        let name = &host[..end + 2];
        match &host[end + 2..] {
            "" => (name, None),
            tail => (name, Some(tail.strip_prefix(':')?)),
        }
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        }
    };
    let port = match port {
        Some(port) => Some(port.parse::<u16>().ok()?),
        None => None,
    };
    let dns_name = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
    (dns_name || name.starts_with('[')).then_some((name, port))
}

fn changes_state(method: &Method) -> bool {
    matches!(*method, Method::POST | Method::PUT | Method::PATCH | Method::DELETE)
}

pub async fn check(State(guard): State<Arc<Guard>>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("");
    if !guard.allows(host) {
        return routes::error(
            StatusCode::MISDIRECTED_REQUEST,
            format!(
                "Host {host:?} is not a name of this API, which answers to {}; hint: reach it by one of those, or add the name the clients use to --api-allowed-hosts ({ALLOWED_HOSTS_ENV})",
                guard.describe()
            ),
        )
        .into_response();
    }
    if changes_state(request.method()) {
        if let Some(origin) = headers.get(header::ORIGIN) {
            let origin = origin.to_str().unwrap_or("");
            let authority = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://"));
            if !authority.is_some_and(|a| guard.allows(a)) {
                return routes::error(
                    StatusCode::FORBIDDEN,
                    format!(
                        "Origin {origin:?} is not this API's own origin: state-changing requests from other web pages are refused; hint: send it from a client that is not a browser page (curl, `sluice` commands), or from a page served under one of {}",
                        guard.describe()
                    ),
                )
                .into_response();
            }
        }
        let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
        let media = content_type.split(';').next().unwrap_or("").trim();
        if !media.eq_ignore_ascii_case("application/json") {
            return routes::error(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!(
                    "{} needs `Content-Type: application/json` (got {content_type:?}), so that no web page can send it without the browser's CORS check; hint: add the header, with a JSON body or an empty one",
                    request.method()
                ),
            )
            .into_response();
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(addr: &str, names: &[&str]) -> Guard {
        let names = AllowedHosts::parse(&names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
        Guard::new(addr.parse().unwrap(), names)
    }

    #[test]
    fn host_names_the_api_or_is_refused() {
        let loopback = guard("127.0.0.1:8080", &[]);
        for ok in ["127.0.0.1:8080", "localhost:8080", "LOCALHOST:8080"] {
            assert!(loopback.allows(ok), "{ok}");
        }
        for refused in ["evil.example:8080", "127.0.0.1:8081", "localhost", "127.0.0.1", "", "10.0.0.1:8080"] {
            assert!(!loopback.allows(refused), "{refused}");
        }
        let named = guard("10.1.2.3:9000", &["sluice.internal", "proxy.example:443"]);
        for ok in ["10.1.2.3:9000", "sluice.internal", "sluice.internal:9000", "proxy.example:443"] {
            assert!(named.allows(ok), "{ok}");
        }
        for refused in ["localhost:9000", "sluice.internal:1", "proxy.example", "127.0.0.1:9000"] {
            assert!(!named.allows(refused), "{refused}");
        }
        let wildcard = guard("0.0.0.0:8080", &[]);
        for ok in ["192.168.1.5:8080", "localhost:8080", "127.0.0.1:8080"] {
            assert!(wildcard.allows(ok), "{ok}");
        }
        assert!(!wildcard.allows("rebound.example:8080"));
        let v6 = guard("[::1]:8080", &[]);
        assert!(v6.allows("[::1]:8080") && v6.allows("localhost:8080"));
        assert!(!v6.allows("[::2]:8080"));
        assert!(guard("127.0.0.1:80", &[]).allows("localhost"), "port 80 may go unsaid");
    }

    #[test]
    fn allowed_hosts_must_be_host_names() {
        for bad in ["http://x", "x/y", "*.example", "x:port", "a..b", "[::1", "-x"] {
            assert!(AllowedHosts::parse(&[bad.to_string()]).is_err(), "{bad}");
        }
        let fine = ["sluice.internal", "sluice.internal:8080", "10.0.0.1", "[::1]:80", " spaced ", ""];
        assert!(AllowedHosts::parse(&fine.map(String::from)).is_ok());
    }
}
