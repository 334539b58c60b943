//! `sluice dlq` and `sluice checkpoints list` through the running
//! instance's API, for when its `sluice run` holds the checkpoint store.

use anyhow::anyhow;
use reqwest::Method;
use serde_json::Value;
use sluice_config::Config;

use crate::Failure;
use crate::status_cli::{block_on, call};
use crate::validate::table;

/// Says on stderr where the answers come from, so no one mistakes them
/// for a read of the store.
pub fn announce(api_addr: &str) {
    eprintln!("the store is in use by a running sluice; asking its API at {api_addr}");
}

fn url(api_addr: &str, path: &str) -> String {
    format!("http://{api_addr}{path}")
}

/// A dead letter key as one path segment: PostgreSQL positions hold `/`.
fn segment(key: &str) -> String {
    key.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b':' => (b as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

fn letters(api_addr: &str) -> Result<Vec<Value>, Failure> {
    let body = block_on(call(Method::GET, &url(api_addr, "/dlq")))?;
    Ok(body["letters"].as_array().cloned().unwrap_or_default())
}

pub fn dlq_list(api_addr: &str) -> Result<(), Failure> {
    let letters = letters(api_addr)?;
    let mut rows = vec![["KEY".to_string(), "SINK".to_string(), "ERROR".to_string()]];
    for letter in &letters {
        let text = |field: &str| letter[field].as_str().unwrap_or_default().to_string();
        rows.push([text("key"), text("sink"), text("error").chars().take(100).collect()]);
    }
    print!("{}", table(&rows));
    println!("{} dead letter(s)", letters.len());
    Ok(())
}

pub fn dlq_show(api_addr: &str, key: &str) -> Result<(), Failure> {
    let letter = block_on(call(Method::GET, &url(api_addr, &format!("/dlq/{}", segment(key)))))?;
    println!("{}", serde_json::to_string_pretty(&letter).unwrap_or_default());
    Ok(())
}

/// The keys named, or every key the API lists.
fn chosen(api_addr: &str, keys: Vec<String>, all: bool) -> Result<Vec<String>, Failure> {
    if !all {
        return Ok(keys);
    }
    Ok(letters(api_addr)?.iter().filter_map(|l| l["key"].as_str().map(str::to_string)).collect())
}

/// Each letter through the running sink; a refused one stays queued.
pub fn dlq_retry(api_addr: &str, keys: Vec<String>, all: bool) -> Result<(), Failure> {
    let keys = chosen(api_addr, keys, all)?;
    let mut kept = 0;
    for key in &keys {
        match block_on(call(Method::POST, &url(api_addr, &format!("/dlq/{}/retry", segment(key))))) {
            Ok(_) => println!("delivered {key}"),
            Err(failure) => {
                kept += 1;
                println!("kept {key}: {:#}", failure.error);
            }
        }
    }
    println!("{} delivered and removed, {kept} kept", keys.len() - kept);
    if kept > 0 {
        return Err(Failure::pipeline(anyhow!("{kept} dead letter(s) could not be delivered; they stay in the queue")));
    }
    Ok(())
}

pub fn dlq_purge(api_addr: &str, keys: Vec<String>, all: bool) -> Result<(), Failure> {
    let mut purged = 0;
    for key in chosen(api_addr, keys, all)? {
        let answer = block_on(call(Method::DELETE, &url(api_addr, &format!("/dlq/{}", segment(&key)))))?;
        purged += answer["purged"].as_u64().unwrap_or(0);
    }
    println!("purged {purged} dead letter(s)");
    Ok(())
}

/// The stored checkpoint of each sink of the config's pipelines, as the
/// running instance reads them from its store.
pub fn checkpoints_list(api_addr: &str, config: &Config) -> Result<(), Failure> {
    let mut rows = vec![["PIPELINE".to_string(), "KEY".to_string(), "CHECKPOINT".to_string()]];
    for pipeline in &config.pipelines {
        let body = block_on(call(Method::GET, &url(api_addr, &format!("/pipelines/{}/checkpoints", pipeline.name))))?;
        for row in body["checkpoints"].as_array().into_iter().flatten() {
            let key = row["key"].as_str().unwrap_or_default().to_string();
            rows.push([pipeline.name.clone(), key, row["stored"].as_str().unwrap_or("none").to_string()]);
        }
    }
    print!("{}", table(&rows));
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_key_is_one_path_segment() {
        assert_eq!(super::segment("pg1::sink::hook::pg:0/16B3F28:2"), "pg1::sink::hook::pg:0%2F16B3F28:2");
    }
}
