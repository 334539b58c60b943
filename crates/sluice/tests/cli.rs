//! The binary's commands and its handling of bad input.

mod common;

use common::*;

#[test]
fn quickstart_pipeline_writes_every_event_once_and_records_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &generator_to_file(300, 7, None, "out/orders.jsonl"));
    let config = config.to_str().unwrap();
    let output = run(&["run", "-c", config], dir.path());
    assert!(output.status.success(), "{}", stderr(&output));
    let held = std::fs::read_to_string(dir.path().join("out/orders.jsonl")).unwrap();
    let held: Vec<&str> = held.lines().collect();
    assert_eq!(held, expected_lines(300, 7));

    let output = run(&["checkpoints", "list", "-c", config], dir.path());
    let listing = String::from_utf8_lossy(&output.stdout);
    assert!(listing.contains("gen1::sink::local  gen:300:6"), "{listing}");

    // A second run finds everything delivered and adds nothing.
    let output = run(&["run", "-c", config], dir.path());
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(line_count(&dir.path().join("out/orders.jsonl")), 2100);
}

#[test]
fn a_run_on_one_worker_thread_writes_every_event_and_zero_threads_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &generator_to_file(300, 7, None, "out/orders.jsonl"));
    let config = config.to_str().unwrap();
    let output = run(&["run", "-c", config, "--worker-threads", "0"], dir.path());
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(stderr(&output).contains("--worker-threads"), "{}", stderr(&output));
    assert!(!dir.path().join("out/orders.jsonl").exists(), "a refused run writes nothing");
    let output = run(&["run", "-c", config, "--worker-threads", "1"], dir.path());
    assert!(output.status.success(), "{}", stderr(&output));
    let held = std::fs::read_to_string(dir.path().join("out/orders.jsonl")).unwrap();
    assert_eq!(held.lines().collect::<Vec<_>>(), expected_lines(300, 7));
}

#[test]
fn validate_shows_each_sink_and_its_guarantee() {
    let dir = tempfile::tempdir().unwrap();
    let text = generator_to_file(1, 1, None, "out.jsonl")
        .replace("    batch:", "      - type: stdout\n        config: { id: console, required: false }\n    batch:");
    let config = write_config(dir.path(), &text);
    let output = run(&["validate", "-c", config.to_str().unwrap()], dir.path());
    assert!(output.status.success(), "{}", stderr(&output));
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(table.contains("local    file    yes       exactly-once"), "{table}");
    assert!(table.contains("console  stdout  no        at-least-once (dedup: event id)"), "{table}");
    assert!(!dir.path().join("out.jsonl").exists(), "validate writes nothing");
}

/// Each bad config exits 2 with a message naming the field, and nothing is written.
#[test]
fn bad_input_exits_2_names_the_field_and_writes_nothing() {
    let good = generator_to_file(10, 1, None, "out/orders.jsonl");
    let cases: Vec<(String, &str)> = vec![
        ("pipelines:\n  - name: [oops\n".into(), "line"),
        (good.replace("path:", "pth:"), "unknown field `pth`"),
        (good.replace("out/orders.jsonl", "${SLUICE_TEST_UNSET_DIR}/o.jsonl"), "SLUICE_TEST_UNSET_DIR is not set"),
        (
            good.replace("    batch:", "      - type: stdout\n        config: { id: local }\n    batch:"),
            "pipelines[0].sinks[1].config.id",
        ),
        (
            good.replace("    batch:", "    commit_policy: { mode: quorum, quorum: 2 }\n    batch:"),
            "pipelines[0].commit_policy.quorum",
        ),
        (good.replace("out/orders.jsonl", "blocker/orders.jsonl"), "pipelines[0].sinks[0].config.path"),
        // Two names of one file, as issue 17 found them.
        (
            good.replace("path: out/orders.jsonl", "path: out/x.jsonl").replace(
                "    batch:",
                "      - type: file\n        config: { id: again, path: ./out/x.jsonl }\n    batch:",
            ),
            "sink \"again\" of pipeline \"orders\" writes the file out/x.jsonl, which sink \"local\" of pipeline \"orders\" writes too",
        ),
        (
            good.replace("batch: { max_events: 500", "batch: { max_inflight: 18446744073709551615, max_events: 500"),
            "pipelines[0].batch.max_inflight: 18446744073709551615 is outside 1..=1024",
        ),
        // A folder that cannot be written is refused before anything is.
        (good.replace("out/orders.jsonl", "locked/orders.jsonl"), "locked is read-only"),
        (
            good.replace(
                "    batch:",
                "      - type: s3\n        config: { id: lake, local: locked/lake, format: jsonl }\n    batch:",
            ),
            "pipelines[0].sinks[1].config.local",
        ),
    ];
    for (text, expected) in cases {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("blocker"), "a file, not a folder").unwrap();
        let locked = dir.path().join("locked");
        std::fs::create_dir(&locked).unwrap();
        std::fs::set_permissions(&locked, std::os::unix::fs::PermissionsExt::from_mode(0o555)).unwrap();
        let config = write_config(dir.path(), &text);
        for command in ["run", "validate"] {
            let output = run(&[command, "-c", config.to_str().unwrap()], dir.path());
            let message = stderr(&output);
            assert_eq!(output.status.code(), Some(2), "{command}: {message}");
            assert!(message.contains(expected), "{command}: expected {expected:?} in {message}");
            assert_eq!(message.lines().count(), 1, "one clear error: {message}");
        }
        assert!(!dir.path().join("sluice-data").exists(), "no store created for {expected}");
        assert!(!dir.path().join("out").exists(), "no output created for {expected}");
        assert_eq!(std::fs::read_dir(&locked).unwrap().count(), 0, "nothing written in the read-only folder");
    }
}

#[test]
fn one_file_named_absolutely_and_relatively_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let absolute = dir.path().join("out/x.jsonl");
    let text = generator_to_file(10, 1, None, "out/x.jsonl").replace(
        "    batch:",
        &format!("      - type: file\n        config: {{ id: again, path: \"{}\" }}\n    batch:", absolute.display()),
    );
    let config = write_config(dir.path(), &text);
    for command in ["validate", "run"] {
        let output = run(&[command, "-c", config.to_str().unwrap()], dir.path());
        let message = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{command}: {message}");
        assert!(
            message.contains("sink \"again\" of pipeline \"orders\"") && message.contains("writes too"),
            "{message}"
        );
    }
    assert!(!dir.path().join("out").exists() && !dir.path().join("sluice-data").exists(), "nothing was written");
}

#[test]
fn one_sigterm_stops_a_run_whose_kafka_brokers_are_malformed() {
    let dir = tempfile::tempdir().unwrap();
    let text = generator_to_file(1_000_000, 1, Some(100), "out.jsonl").replace(
        "    batch:",
        "      - type: kafka\n        config: { id: bus, brokers: \"127.0.0.1:1,,bad::host\", topic: never, timeout_secs: 30 }\n    batch:",
    );
    let config = write_config(dir.path(), &text);
    let sluice = spawn(&["run", "-c", config.to_str().unwrap(), "--api-addr", "off"], dir.path());
    wait_until(std::time::Duration::from_secs(60), "the kafka sink to be connecting", || {
        std::fs::read_to_string(dir.path().join("sluice.log")).unwrap_or_default().contains("pipeline starting")
    });
    // The sink's broker calls block without logging anything to wait on;
    // a moment puts the signal inside them rather than before them.
    std::thread::sleep(std::time::Duration::from_secs(1));
    let sent = std::time::Instant::now();
    let status = sluice.terminate();
    let took = sent.elapsed();
    let log = std::fs::read_to_string(dir.path().join("sluice.log")).unwrap_or_default();
    assert!(took < std::time::Duration::from_secs(5), "SIGTERM took {took:?} to stop sluice:\n{log}");
    assert!(status.code().is_some(), "exited, not killed: {status:?}\n{log}");
}

#[test]
fn checkpoints_reset_needs_confirmation_and_then_replays() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &generator_to_file(5, 2, None, "out.jsonl"));
    let config = config.to_str().unwrap();
    assert!(run(&["run", "-c", config], dir.path()).status.success());
    let output = run(&["checkpoints", "reset", "-c", config], dir.path());
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("--yes"));
    let output = run(&["checkpoints", "reset", "-c", config, "--sink", "nope", "--yes"], dir.path());
    assert_eq!(output.status.code(), Some(2));
    let output = run(&["checkpoints", "reset", "-c", config, "--sink", "local", "--yes"], dir.path());
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(String::from_utf8_lossy(&output.stdout).contains("removed 1 checkpoint(s)"));
    let listing = run(&["checkpoints", "list", "-c", config], dir.path());
    assert!(String::from_utf8_lossy(&listing.stdout).contains("gen1::sink::local  none"));
    // One sink's reset: the file sink still knows what it holds, so the
    // replay adds nothing.
    assert!(run(&["run", "-c", config], dir.path()).status.success());
    assert_eq!(line_count(&dir.path().join("out.jsonl")), 10);

    // The whole source's reset starts a new log generation: what the sinks
    // hold of the old one no longer counts, and every event comes again,
    // with positions and ids of the new generation.
    let output = run(&["checkpoints", "reset", "-c", config, "--yes"], dir.path());
    let told = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success() && told.contains("starts log generation 1"), "{told}{}", stderr(&output));
    assert!(run(&["run", "-c", config], dir.path()).status.success());
    let events = replay::events(&dir.path().join("out.jsonl"));
    assert_eq!(events.len(), 20);
    for (old, new) in events[..10].iter().zip(&events[10..]) {
        assert_eq!(new["position"].as_str().unwrap(), format!("e1/{}", old["position"].as_str().unwrap()));
        assert_ne!(new["id"], old["id"]);
        assert_eq!(new["after"], old["after"]);
    }

    // A replaced store knows generation 0 again: the file's later
    // generation is ignored rather than left to hide every event.
    std::fs::remove_file(dir.path().join("sluice-data").join("checkpoints.redb")).unwrap();
    assert!(run(&["run", "-c", config], dir.path()).status.success());
    let events = replay::events(&dir.path().join("out.jsonl"));
    assert_eq!(events.len(), 30);
    assert_eq!(events[20..], events[..10]);
}

/// A file emptied or cut short behind Sluice's back is written from its
/// stored checkpoint on, and each case is warned about: the events up to
/// the checkpoint are not written again.
#[test]
fn a_file_cut_short_or_emptied_is_warned_about_and_written_from_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");
    let lines = || -> Vec<String> { std::fs::read_to_string(&out).unwrap().lines().map(str::to_string).collect() };
    let run_to = |tx_count: u64| -> String {
        let config = write_config(dir.path(), &generator_to_file(tx_count, 1, None, "out.jsonl"));
        let output = run(&["run", "-c", config.to_str().unwrap()], dir.path());
        assert!(output.status.success(), "{}", stderr(&output));
        stderr(&output)
    };
    run_to(10);
    assert_eq!(line_count(&out), 10);

    std::fs::write(&out, "").unwrap();
    let log = run_to(20);
    assert!(log.contains("sink holds no event although a checkpoint is stored"), "{log}");
    assert_eq!(lines(), expected_lines(20, 1)[10..]);

    std::fs::write(&out, lines()[..5].join("\n") + "\n").unwrap();
    let log = run_to(30);
    assert!(log.contains("sink holds less than its stored checkpoint"), "{log}");
    assert!(!log.contains("sink holds no event"), "{log}");
    let lines = lines();
    assert_eq!(lines[..5], expected_lines(20, 1)[10..15]);
    assert_eq!(lines[5..], expected_lines(30, 1)[20..]);
}

#[test]
fn a_second_process_on_the_same_data_dir_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &generator_to_file(1_000_000, 1, Some(1000), "out.jsonl"));
    let config = config.to_str().unwrap();
    let mut first = spawn(&["run", "-c", config], dir.path());
    wait_until(std::time::Duration::from_secs(30), "first events", || line_count(&dir.path().join("out.jsonl")) > 0);
    let output = run(&["run", "-c", config], dir.path());
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("another process"), "{}", stderr(&output));
    first.kill9();
}

#[test]
fn stdout_sink_prints_every_event_as_a_json_line_next_to_the_file_sink() {
    let dir = tempfile::tempdir().unwrap();
    let text = generator_to_file(40, 3, None, "out.jsonl")
        .replace("    batch:", "      - type: stdout\n        config: { id: console, required: false }\n    batch:");
    let config = write_config(dir.path(), &text);
    let output = run(&["run", "-c", config.to_str().unwrap()], dir.path());
    assert!(output.status.success(), "{}", stderr(&output));
    let printed: Vec<String> = String::from_utf8_lossy(&output.stdout).lines().map(str::to_string).collect();
    assert_eq!(printed, expected_lines(40, 3), "stdout carries only events, in order");
    assert_eq!(line_count(&dir.path().join("out.jsonl")), 120);
}

/// Every `<name>_ms=<figure>` in `log`, for the figures a latency line gives.
fn millisecond_figures(log: &str) -> Vec<(String, f64)> {
    log.split_whitespace()
        .filter_map(|word| word.split_once("_ms="))
        .filter_map(|(name, value)| Some((name.to_string(), value.trim_matches(',').parse().ok()?)))
        .collect()
}

#[test]
fn the_quickstart_reports_no_latency_for_the_generators_synthetic_commit_times() {
    let dir = tempfile::tempdir().unwrap();
    let quickstart = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/quickstart.yaml");
    let out = dir.path().join("out");
    let output = sluice()
        .args(["run", "-c", quickstart])
        .current_dir(dir.path())
        .env("SLUICE_OUT", &out)
        .output()
        .expect("sluice runs");
    let log = stderr(&output);
    assert!(output.status.success(), "{log}");
    assert_eq!(line_count(&out.join("orders.jsonl")), 100_000, "{log}");
    // The generator stamps commit times from 2026-01-01 on, so a latency
    // from them measures the calendar, not the pipeline.
    assert!(log.contains("pipeline stopped"), "the run's info lines are in its log: {log}");
    assert!(!log.contains("latency from source commit"), "{log}");
    for (name, ms) in millisecond_figures(&log) {
        assert!(ms < 3_600_000.0, "{name}_ms={ms} cannot be a latency of this run: {log}");
    }
}

/// The generator declares its table's columns, so the typed formats write
/// its events: Debezium's envelope with Connect schemas, here, with
/// `amount` as a Connect decimal of scale 2 whose bytes give back the
/// generator's value.
#[test]
fn the_generators_events_go_out_in_debeziums_envelope_with_their_declared_types() {
    use base64::Engine as _;
    let dir = tempfile::tempdir().unwrap();
    let text = generator_to_file(20, 5, None, "out.jsonl")
        .replace("path: out.jsonl", "path: out.jsonl, format: { envelope: debezium, schemas: true }");
    let config = write_config(dir.path(), &text);
    let output = run(&["run", "-c", config.to_str().unwrap()], dir.path());
    assert!(output.status.success(), "{}", stderr(&output));
    let held = std::fs::read_to_string(dir.path().join("out.jsonl")).unwrap();
    let held: Vec<serde_json::Value> = held.lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    let events = expected_events(20, 5);
    assert_eq!(held.len(), events.len(), "one record per event, none sent to the dead letter queue");
    for (record, event) in held.iter().zip(&events) {
        let payload = &record["payload"];
        assert_eq!(payload["op"], event.op.code(), "{record}");
        let image = if event.after.is_some() { "after" } else { "before" };
        let fields = record["schema"]["fields"].as_array().unwrap();
        let row_schema = fields.iter().find(|f| f["field"] == image).unwrap();
        let amount_schema = row_schema["fields"].as_array().unwrap().iter().find(|f| f["field"] == "amount").unwrap();
        assert_eq!(amount_schema["name"], "org.apache.kafka.connect.data.Decimal");
        assert_eq!(amount_schema["parameters"]["scale"], "2");
        assert_eq!(amount_schema["parameters"]["connect.decimal.precision"], "12");
        let row = event.after.as_ref().or(event.before.as_ref()).unwrap();
        let Some(sluice_core::Value::Decimal(amount)) = row.get("amount") else { panic!("{row:?}") };
        let bytes =
            base64::engine::general_purpose::STANDARD.decode(payload[image]["amount"].as_str().unwrap()).unwrap();
        let unscaled = bytes.iter().fold(if bytes[0] & 0x80 != 0 { -1i64 } else { 0 }, |n, b| (n << 8) | i64::from(*b));
        assert_eq!(format!("{}.{:02}", unscaled / 100, unscaled % 100), *amount, "{record}");
        assert_eq!(
            payload[image]["id"],
            row.get("id").and_then(|v| if let sluice_core::Value::Int(i) = v { Some(*i) } else { None }).unwrap()
        );
    }
}

#[test]
fn version_names_the_git_commit_it_was_built_from() {
    let dir = tempfile::tempdir().unwrap();
    let output = run(&["--version"], dir.path());
    assert!(output.status.success(), "{}", stderr(&output));
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let head = String::from_utf8(head.stdout).unwrap();
    let expected = format!("sluice {} (commit {})\n", env!("CARGO_PKG_VERSION"), head.trim());
    assert_eq!(String::from_utf8_lossy(&output.stdout), expected);
}

/// The bash script loads in a real bash, and its function completes the
/// commands and a command's flags.
#[test]
fn bash_completion_loads_and_completes_commands_and_flags() {
    let dir = tempfile::tempdir().unwrap();
    let output = run(&["completions", "bash"], dir.path());
    assert!(output.status.success(), "{}", stderr(&output));
    let script = dir.path().join("sluice.bash");
    std::fs::write(&script, &output.stdout).unwrap();
    let complete = |words: &str| {
        let line = format!(
            "source {script}; COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); COMP_LINE='{words}'; COMP_POINT=${{#COMP_LINE}}; \
             _sluice sluice \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            script = script.display()
        );
        let output = std::process::Command::new("bash").args(["-c", &line]).output().unwrap();
        assert!(output.status.success(), "{}", stderr(&output));
        String::from_utf8(output.stdout).unwrap()
    };
    let commands = complete("sluice che");
    assert_eq!(commands.trim(), "checkpoints", "{commands}");
    let flags = complete("sluice validate --con");
    assert!(flags.lines().any(|l| l == "--connect"), "{flags}");
}

/// One page per command, each of which groff renders without a warning,
/// and the main page lists every command.
#[test]
fn the_manual_pages_render_cleanly_and_name_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let pages = dir.path().join("man");
    let output = run(&["man", "--out-dir", pages.to_str().unwrap()], dir.path());
    assert!(output.status.success(), "{}", stderr(&output));
    let mut names: Vec<String> =
        std::fs::read_dir(&pages).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    let commands = ["checkpoints", "completions", "dlq", "man", "run", "sinks", "snapshot", "status", "validate"];
    let mut expected: Vec<String> = commands.iter().map(|c| format!("sluice-{c}.1")).collect();
    expected.push("sluice.1".into());
    expected.sort();
    assert_eq!(names, expected);
    for name in &names {
        let output = std::process::Command::new("groff")
            .args(["-man", "-ww", "-z"])
            .arg(pages.join(name))
            .output()
            .expect("groff (Debian's groff-base) renders the pages");
        assert!(output.status.success() && output.stderr.is_empty(), "{name}: {}", stderr(&output));
    }
    let rendered =
        std::process::Command::new("groff").args(["-man", "-Tutf8"]).arg(pages.join("sluice.1")).output().unwrap();
    let text = String::from_utf8_lossy(&rendered.stdout).replace(['\u{8}', '_'], "");
    for command in commands {
        assert!(text.contains(command), "{command} missing from sluice(1):\n{text}");
    }
    let printed = run(&["man"], dir.path());
    assert_eq!(printed.stdout, std::fs::read(pages.join("sluice.1")).unwrap(), "printed and written pages differ");
}
