//! Stamps the git commit into `sluice --version`: `SLUICE_GIT_COMMIT`
//! when the build sets it (an image built from a copy without `.git`),
//! else the commit `git` reports, else `unknown`.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    output.status.success().then(|| text.trim().to_string()).filter(|t| !t.is_empty())
}

fn main() {
    println!("cargo:rerun-if-env-changed=SLUICE_GIT_COMMIT");
    let given = std::env::var("SLUICE_GIT_COMMIT").ok().filter(|c| !c.is_empty());
    let commit = given.or_else(|| git(&["rev-parse", "--short=12", "HEAD"])).unwrap_or_else(|| "unknown".into());
    // Built again when HEAD moves: a checkout changes HEAD, a commit the
    // ref HEAD names (loose, or packed).
    // A path that does not exist would make Cargo run this every build.
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        let reference = git(&["symbolic-ref", "-q", "HEAD"]);
        let paths = ["HEAD", "packed-refs"].into_iter().map(String::from).chain(reference);
        for path in paths.map(|p| format!("{dir}/{p}")) {
            if std::path::Path::new(&path).exists() {
                println!("cargo:rerun-if-changed={path}");
            }
        }
    }
    println!("cargo:rustc-env=SLUICE_GIT_COMMIT={commit}");
}
