#!/usr/bin/env bash
# The whole test suite: formatting, lints, and every unit, property and
# end-to-end test. The README and .ci/run both call this script.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
