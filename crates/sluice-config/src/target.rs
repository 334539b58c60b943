//! Where each sink writes, so that two sinks of one config never share a
//! target: two writers of one file, prefix, stream or topic each believe
//! they hold it alone, and an exactly-once sink then holds every event
//! twice.
//!
//! The comparison is lexical here (pure, as validation is); the binary
//! runs it again with paths resolved on disk ([`shared_target`]'s
//! `resolve`), which catches `../x` through a symlink and the like.

use std::path::{Component, Path, PathBuf};

use crate::error::Invalid;
use crate::pipeline::{Config, SinkConfig};

/// What a sink writes to, in a form where equal means "the same thing".
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
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
    RedisStream {
        server: String,
        stream: String,
    },
    NatsStream {
        servers: Vec<String>,
        stream: String,
        exclusive: bool,
    },
    KafkaTopic {
        brokers: Vec<String>,
        topic: String,
    },
}

impl Target {
    /// Whether two sinks writing `self` and `other` would step on each
    /// other. Prefixes overlap when one holds the other: a sink adopts
    /// what it finds under its prefix on restart.
    fn collides(&self, other: &Target) -> bool {
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
            (Target::RedisStream { server: a, stream: sa }, Target::RedisStream { server: b, stream: sb }) => {
                a == b && sa == sb
            }
            // A stream marked non-exclusive is meant to be shared, with the
            // server's deduplication; an exclusive one claims it alone.
            (
                Target::NatsStream { servers: a, stream: sa, exclusive: xa },
                Target::NatsStream { servers: b, stream: sb, exclusive: xb },
            ) => (*xa || *xb) && sa == sb && a.iter().any(|s| b.contains(s)),
            (Target::KafkaTopic { brokers: a, topic: ta }, Target::KafkaTopic { brokers: b, topic: tb }) => {
                ta == tb && a.iter().any(|s| b.contains(s))
            }
            _ => false,
        }
    }

    fn describe(&self) -> String {
        let prefix = |p: &[String]| p.join("/");
        match self {
            Target::File(path) => format!("the file {}", path.display()),
            Target::Folder { folder, prefix: p } => {
                format!("the folder {} (prefix {:?})", folder.display(), prefix(p))
            }
            Target::Bucket { endpoint, bucket, prefix: p } => {
                format!("bucket {bucket:?} prefix {:?} at {endpoint}", prefix(p))
            }
            Target::RedisStream { server, stream } => format!("Redis stream {stream:?} on {server}"),
            Target::NatsStream { servers, stream, .. } => {
                format!("NATS stream {stream:?} on {}", servers.join(","))
            }
            Target::KafkaTopic { brokers, topic } => format!("Kafka topic {topic:?} on {}", brokers.join(",")),
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

fn prefix_parts(prefix: &str) -> Vec<String> {
    prefix.split('/').filter(|p| !p.is_empty() && *p != ".").map(str::to_string).collect()
}

/// `host:port` of each URL in a comma-separated list, credentials,
/// scheme and path left out, lowercased, with `default_port` filled in.
fn servers(list: &str, default_port: u16) -> Vec<String> {
    list.split(',').map(str::trim).filter(|s| !s.is_empty()).map(|s| server(s, default_port)).collect()
}

fn server(url: &str, default_port: u16) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, host)| host).to_ascii_lowercase();
    let has_port = match host_port.rfind(']') {
        Some(end) => host_port[end..].contains(':'),
        None => host_port.contains(':'),
    };
    if has_port { host_port } else { format!("{host_port}:{default_port}") }
}

/// Redis server and database: `redis://h/0` and `redis://h:6379` are one.
fn redis_server(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let db = rest.split_once('/').map(|(_, db)| db.split(['?', '#']).next().unwrap_or("")).unwrap_or("");
    let db = if db.is_empty() { "0" } else { db };
    format!("{}/{db}", server(url, 6379))
}

fn target(sink: &SinkConfig, resolve: &dyn Fn(&Path) -> PathBuf) -> Option<Target> {
    Some(match sink {
        SinkConfig::File(c) => Target::File(resolve(&c.path)),
        SinkConfig::S3(c) => match (&c.local, &c.bucket) {
            (Some(folder), _) => Target::Folder { folder: resolve(folder), prefix: prefix_parts(&c.prefix) },
            (None, Some(bucket)) => Target::Bucket {
                endpoint: c.endpoint.as_deref().map_or_else(|| "AWS".to_string(), |e| server(e, 443)),
                bucket: bucket.clone(),
                prefix: prefix_parts(&c.prefix),
            },
            (None, None) => return None,
        },
        SinkConfig::Redis(c) => Target::RedisStream { server: redis_server(&c.url), stream: c.stream.clone() },
        SinkConfig::Nats(c) => {
            Target::NatsStream { servers: servers(&c.url, 4222), stream: c.stream.clone(), exclusive: c.exclusive }
        }
        SinkConfig::Kafka(c) => Target::KafkaTopic { brokers: servers(&c.brokers, 9092), topic: c.topic.clone() },
        SinkConfig::Http(_) | SinkConfig::Stdout(_) => return None,
    })
}

/// Refuses two sinks, in any pipelines of `config`, that write one
/// target. `resolve` maps a configured path to the one compared:
/// [`normalize`] in validation, the binary adds the disk's view.
pub fn shared_target(config: &Config, resolve: &dyn Fn(&Path) -> PathBuf) -> Result<(), Invalid> {
    let mut seen: Vec<(String, Target)> = Vec::new();
    for (p, pipeline) in config.pipelines.iter().enumerate() {
        for (s, sink) in pipeline.sinks.iter().enumerate() {
            let Some(target) = target(sink, resolve) else { continue };
            let name = format!("sink {:?} of pipeline {:?}", sink.id(), pipeline.name);
            if let Some((first, _)) = seen.iter().find(|(_, t)| t.collides(&target)) {
                return Err(Invalid::new(
                    format!("pipelines[{p}].sinks[{s}].config"),
                    format!("{name} writes {}, which {first} writes too", target.describe()),
                    "give every sink a target of its own (path, prefix, stream or topic); two writers of one target each hold the other's events",
                ));
            }
            seen.push((name, target));
        }
    }
    Ok(())
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
        assert_eq!(redis_server("redis://:pw@R:6379/0"), redis_server("redis://r"));
        assert_ne!(redis_server("redis://r/1"), redis_server("redis://r"));
        assert_eq!(servers("k1:9092,,k2", 9092), ["k1:9092", "k2:9092"]);
        assert_eq!(server("http://[::1]", 80), "[::1]:80");
    }
}
