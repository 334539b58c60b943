//! Where a sink writes, in a form where equal means "the same thing", so
//! that the config check can refuse two sinks writing one target: two
//! writers of one file, prefix, stream or topic each believe they hold it
//! alone, and an exactly-once sink then holds every event twice.

use std::path::{Component, Path, PathBuf};

/// What a sink writes to. Each sink's config names its own (see
/// `SinkSettings::target`); sinks that write nothing lasting name none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    File(PathBuf),
    /// Objects under a folder; `prefix` as path components.
    Folder {
        folder: PathBuf,
        prefix: Vec<String>,
    },
    Bucket {
        endpoint: String,
        bucket: String,
        prefix: Vec<String>,
    },
    /// A named thing on a server, such as a stream or a topic. `kind` says
    /// what it is ("Redis stream") and keeps kinds apart; two sinks collide
    /// when they name one on a shared server, unless both are `shared`.
    Named {
        kind: &'static str,
        servers: Vec<String>,
        name: String,
        shared: bool,
    },
}

impl Target {
    /// Whether two sinks writing `self` and `other` would step on each
    /// other. Prefixes overlap when one holds the other: a sink adopts
    /// what it finds under its prefix on restart.
    pub fn collides(&self, other: &Target) -> bool {
        let nested = |a: &[String], b: &[String]| a.iter().zip(b).all(|(x, y)| x == y);
        match (self, other) {
            (Target::File(a), Target::File(b)) => a == b,
            (Target::Folder { folder: a, prefix: pa }, Target::Folder { folder: b, prefix: pb }) => {
                a == b && nested(pa, pb)
            }
            (
                Target::Bucket { endpoint: ea, bucket: ba, prefix: pa },
                Target::Bucket { endpoint: eb, bucket: bb, prefix: pb },
            ) => ea == eb && ba == bb && nested(pa, pb),
            (
                Target::Named { kind: ka, servers: a, name: na, shared: sa },
                Target::Named { kind: kb, servers: b, name: nb, shared: sb },
            ) => ka == kb && !(*sa && *sb) && na == nb && a.iter().any(|s| b.contains(s)),
            _ => false,
        }
    }

    pub fn describe(&self) -> String {
        let prefix = |p: &[String]| p.join("/");
        match self {
            Target::File(path) => format!("the file {}", path.display()),
            Target::Folder { folder, prefix: p } => {
                format!("the folder {} (prefix {:?})", folder.display(), prefix(p))
            }
            Target::Bucket { endpoint, bucket, prefix: p } => {
                format!("bucket {bucket:?} prefix {:?} at {endpoint}", prefix(p))
            }
            Target::Named { kind, servers, name, .. } => format!("{kind} {name:?} on {}", servers.join(",")),
        }
    }
}

/// `path` with `.` and `a/..` folded away, without touching the disk.
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if matches!(out.components().next_back(), Some(Component::Normal(_))) {
                    out.pop();
                } else if !out.has_root() {
                    out.push("..");
                }
            }
            other => out.push(other),
        }
    }
    if out.as_os_str().is_empty() { PathBuf::from(".") } else { out }
}

/// A key prefix as path components, empty parts and `.` left out.
pub fn prefix_parts(prefix: &str) -> Vec<String> {
    prefix.split('/').filter(|p| !p.is_empty() && *p != ".").map(str::to_string).collect()
}

/// `host:port` of each URL in a comma-separated list, credentials,
/// scheme and path left out, lowercased, with `default_port` filled in.
pub fn servers(list: &str, default_port: u16) -> Vec<String> {
    list.split(',').map(str::trim).filter(|s| !s.is_empty()).map(|s| server(s, default_port)).collect()
}

/// One URL's `host:port`, as [`servers`] gives it.
pub fn server(url: &str, default_port: u16) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, host)| host).to_ascii_lowercase();
    let has_port = match host_port.rfind(']') {
        Some(end) => host_port[end..].contains(':'),
        None => host_port.contains(':'),
    };
    if has_port { host_port } else { format!("{host_port}:{default_port}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_fold_lexically() {
        for (path, want) in [
            ("out/x.jsonl", "out/x.jsonl"),
            ("./out/x.jsonl", "out/x.jsonl"),
            ("out/./sub/../x.jsonl", "out/x.jsonl"),
            ("../a/./b", "../a/b"),
            ("/a/../../b", "/b"),
            (".", "."),
        ] {
            assert_eq!(normalize(Path::new(path)), PathBuf::from(want), "{path}");
        }
    }

    #[test]
    fn servers_compare_without_credentials_or_defaults() {
        assert_eq!(servers("nats://u:p@N1, nats://n2:4223", 4222), ["n1:4222", "n2:4223"]);
        assert_eq!(servers("k1:9092,,k2", 9092), ["k1:9092", "k2:9092"]);
        assert_eq!(server("http://[::1]", 80), "[::1]:80");
    }
}
