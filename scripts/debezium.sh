#!/usr/bin/env bash
# Debezium embedded, to compare Sluice's Debezium-format output with
# Debezium's own (scripts/debezium/Capture.java).
#
#   scripts/debezium.sh fetch [pg|mariadb|jdbc] fetch the jars from Maven Central and build
#                                               capture.jar when missing; print the classpath(s)
#   scripts/debezium.sh classpath pg|mariadb    print the classpath (after fetch)
#   scripts/debezium.sh run pg|mariadb <engine.properties> [Capture options]
#                                               fetch if needed, then run the capture
#   scripts/debezium.sh connect <worker.properties> <connector.properties>
#                                               fetch if needed, then run Kafka Connect
#                                               standalone (in this process) with
#                                               Debezium's JDBC sink connector
#
# PostgreSQL uses Debezium 3.6.1.Final; MariaDB uses 3.5.0.Final, the last
# release of debezium-connector-mariadb; the JDBC sink is 3.6.0.Final (Maven
# Central serves no 3.6.1.Final of it) in Kafka Connect 4.3.0. The jars live
# in ${SLUICE_CACHE_DIR:-$HOME/.cache/sluice}/debezium-3.6.1,
# debezium-mariadb-3.5.0 and debezium-jdbc-3.6.0.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${SLUICE_CACHE_DIR:-$HOME/.cache/sluice}"
PG_DIR="$CACHE/debezium-3.6.1"
MARIADB_DIR="$CACHE/debezium-mariadb-3.5.0"
JDBC_DIR="$CACHE/debezium-jdbc-3.6.0"
SOURCE="$HERE/debezium/Capture.java"
JAVA_OPTS=(-Xmx768m)

log() { echo "debezium: $*" >&2; }
die() { log "$*"; exit 1; }

# The cache folder and the pom of a set: pg or mariadb.
set_dir() {
  case "$1" in
    pg) echo "$PG_DIR" ;;
    mariadb) echo "$MARIADB_DIR" ;;
    jdbc) echo "$JDBC_DIR" ;;
    *) die "unknown set '$1' (pg, mariadb or jdbc)" ;;
  esac
}
set_pom() {
  case "$1" in
    pg) echo "$HERE/debezium/pom.xml" ;;
    mariadb) echo "$HERE/debezium/mariadb/pom.xml" ;;
    jdbc) echo "$HERE/debezium/jdbc/pom.xml" ;;
  esac
}

classpath() {
  local dir
  dir=$(set_dir "$1")
  if [ "$1" = jdbc ]; then echo "$dir/libs/*"; else echo "$dir/libs/*:$dir/capture.jar"; fi
}

# Copies the jars of set $1 (once, and again when its pom changes) and
# compiles capture.jar (when missing, as after a fetch, or older than
# Capture.java), under a lock so parallel callers do it once.
fetch_set() {
  local set=$1 dir pom
  dir=$(set_dir "$set")
  pom=$(set_pom "$set")
  mkdir -p "$dir"
  exec {lock}>"$dir/.lock"
  flock "$lock"
  if [ ! -f "$dir/libs/.complete" ] || ! cmp -s "$pom" "$dir/libs/.pom.xml"; then
    log "fetching the $set jars from Maven Central into $dir/libs"
    rm -rf "$dir/libs" "$dir/libs.tmp" "$dir/capture.jar"
    if ! mvn -q -f "$pom" dependency:copy-dependencies \
      -DoutputDirectory="$dir/libs.tmp" -DincludeScope=runtime >"$dir/mvn.log" 2>&1; then
      cat "$dir/mvn.log" >&2
      die "mvn failed for the $set jars"
    fi
    cp "$pom" "$dir/libs.tmp/.pom.xml"
    touch "$dir/libs.tmp/.complete"
    mv "$dir/libs.tmp" "$dir/libs"
  fi
  if [ "$set" != jdbc ] && { [ ! -f "$dir/capture.jar" ] || [ "$SOURCE" -nt "$dir/capture.jar" ]; }; then
    log "compiling Capture.java into $dir/capture.jar"
    rm -rf "$dir/classes"
    mkdir -p "$dir/classes"
    javac -nowarn -d "$dir/classes" -cp "$dir/libs/*" "$SOURCE" >&2 \
      || die "javac failed for the $set set"
    jar --create --file "$dir/capture.jar.tmp" -C "$dir/classes" . >&2
    mv "$dir/capture.jar.tmp" "$dir/capture.jar"
    rm -rf "$dir/classes"
  fi
  flock -u "$lock"
  exec {lock}>&-
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
  fetch)
    sets=("$@")
    [ ${#sets[@]} -gt 0 ] || sets=(pg mariadb jdbc)
    for set in "${sets[@]}"; do
      set_dir "$set" >/dev/null
      fetch_set "$set"
    done
    for set in "${sets[@]}"; do classpath "$set"; done
    ;;
  classpath)
    [ $# -eq 1 ] || die "usage: $0 classpath pg|mariadb"
    dir=$(set_dir "$1")
    if [ ! -f "$dir/libs/.complete" ] || [ ! -f "$dir/capture.jar" ]; then
      die "run '$0 fetch $1' first"
    fi
    classpath "$1"
    ;;
  run)
    [ $# -ge 2 ] || die "usage: $0 run pg|mariadb <engine.properties> [Capture options]"
    set=$1
    shift
    set_dir "$set" >/dev/null
    fetch_set "$set"
    exec java "${JAVA_OPTS[@]}" -cp "$(classpath "$set")" Capture "$@"
    ;;
  connect)
    [ $# -eq 2 ] || die "usage: $0 connect <worker.properties> <connector.properties>"
    fetch_set jdbc
    exec java "${JAVA_OPTS[@]}" -cp "$JDBC_DIR/libs/*" org.apache.kafka.connect.cli.ConnectStandalone "$@"
    ;;
  *)
    sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 64
    ;;
esac
