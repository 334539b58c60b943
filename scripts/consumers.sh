#!/usr/bin/env bash
# Real consumers of Sluice's output formats, for the tests that check that
# they decode it: a Python virtualenv with the CloudEvents SDK and the
# confluent-kafka client with its Avro deserializer (PyPI; avro_read.py and
# topic_bytes.py use it), and
# Kafka Connect's JsonConverter and Flink's debezium-json format (Maven Central)
# behind scripts/consumers/ConsumerCheck.java.
#
#   scripts/consumers.sh python    create the virtualenv when missing; print its python
#   scripts/consumers.sh java      fetch the jars once and build consumer-check.jar when
#                                  missing or older than ConsumerCheck.java; print the
#                                  classpath, for: java -cp CP ConsumerCheck ...
#   scripts/consumers.sh node      install the CloudEvents SDK for JavaScript (npm) when
#                                  missing; print its node_modules, for NODE_PATH
#
# The virtualenv lives in ${SLUICE_CACHE_DIR:-$HOME/.cache/sluice}/consumers-<hash of requirements>,
# the jars in ${SLUICE_CACHE_DIR:-$HOME/.cache/sluice}/consumers-java, the npm
# packages in ${SLUICE_CACHE_DIR:-$HOME/.cache/sluice}/consumers-node-<version>.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${SLUICE_CACHE_DIR:-$HOME/.cache/sluice}"
REQUIREMENTS="$HERE/consumers/requirements.txt"
JAVA_DIR="$CACHE/consumers-java"
JAVA_POM="$HERE/consumers/pom.xml"
JAVA_SOURCE="$HERE/consumers/ConsumerCheck.java"

NODE_PACKAGE="cloudevents@10.0.0"

log() { echo "consumers: $*" >&2; }

node_env() {
  local dir="$CACHE/consumers-node-${NODE_PACKAGE#*@}"
  mkdir -p "$CACHE"
  exec {lock}>"$CACHE/.consumers-node.lock"
  flock "$lock"
  if [ ! -f "$dir/.complete" ]; then
    log "installing $NODE_PACKAGE from npm into $dir"
    rm -rf "$dir"
    mkdir -p "$dir"
    npm install --silent --no-audit --no-fund --prefix "$dir" "$NODE_PACKAGE" >&2
    touch "$dir/.complete"
  fi
  flock -u "$lock"
  echo "$dir/node_modules"
}

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

# Copies the jars (once per version of the pom: libs/.complete holds its hash)
# and compiles consumer-check.jar (when missing or older than
# ConsumerCheck.java), under a lock so parallel callers do it once.
java_env() {
  local dir=$JAVA_DIR hash
  hash=$(sha256sum "$JAVA_POM" | cut -c1-12)
  mkdir -p "$dir"
  exec {lock}>"$dir/.lock"
  flock "$lock"
  if [ "$(cat "$dir/libs/.complete" 2>/dev/null)" != "$hash" ]; then
    log "fetching Kafka Connect and Flink jars from Maven Central into $dir/libs"
    rm -rf "$dir/libs" "$dir/libs.tmp"
    if ! mvn -q -f "$JAVA_POM" dependency:copy-dependencies \
      -DoutputDirectory="$dir/libs.tmp" -DincludeScope=runtime >"$dir/mvn.log" 2>&1; then
      cat "$dir/mvn.log" >&2
      log "mvn failed"
      exit 1
    fi
    echo "$hash" >"$dir/libs.tmp/.complete"
    mv "$dir/libs.tmp" "$dir/libs"
    rm -f "$dir/consumer-check.jar"
  fi
  if [ ! -f "$dir/consumer-check.jar" ] || [ "$JAVA_SOURCE" -nt "$dir/consumer-check.jar" ]; then
    log "compiling ConsumerCheck.java into $dir/consumer-check.jar"
    rm -rf "$dir/classes"
    mkdir -p "$dir/classes"
    if ! javac -nowarn -d "$dir/classes" -cp "$dir/libs/*" "$JAVA_SOURCE" >&2; then
      log "javac failed"
      exit 1
    fi
    jar --create --file "$dir/consumer-check.jar.tmp" -C "$dir/classes" . >&2
    mv "$dir/consumer-check.jar.tmp" "$dir/consumer-check.jar"
    rm -rf "$dir/classes"
  fi
  flock -u "$lock"
  exec {lock}>&-
  echo "$dir/libs/*:$dir/consumer-check.jar"
}

case "${1:-}" in
  python) python_env ;;
  java) java_env ;;
  node) node_env ;;
  *) echo "usage: $0 python|java|node" >&2; exit 64 ;;
esac
