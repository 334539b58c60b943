#!/usr/bin/env bash
# Real consumers of Sluice's output formats, for the tests that check that
# they decode it: a Python virtualenv with the CloudEvents SDK (PyPI).
#
#   scripts/consumers.sh python    create the virtualenv when missing; print its python
#
# The virtualenv lives in ${SLUICE_CACHE_DIR:-$HOME/.cache/sluice}/consumers-<hash of requirements>.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${SLUICE_CACHE_DIR:-$HOME/.cache/sluice}"
REQUIREMENTS="$HERE/consumers/requirements.txt"

log() { echo "consumers: $*" >&2; }

python_env() {
  local hash dir
  hash=$(sha256sum "$REQUIREMENTS" | cut -c1-12)
  dir="$CACHE/consumers-$hash"
  mkdir -p "$CACHE"
  exec {lock}>"$CACHE/.consumers.lock"
  flock "$lock"
  if [ ! -f "$dir/.complete" ]; then
    log "installing $(tr '\n' ' ' < "$REQUIREMENTS")from PyPI into $dir"
    rm -rf "$dir"
    python3 -m venv "$dir" >&2
    "$dir/bin/pip" install -q --disable-pip-version-check -r "$REQUIREMENTS" >&2
    touch "$dir/.complete"
  fi
  flock -u "$lock"
  echo "$dir/bin/python"
}

case "${1:-}" in
  python) python_env ;;
  *) echo "usage: $0 python" >&2; exit 64 ;;
esac
