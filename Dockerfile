# syntax=docker/dockerfile:1
# The sluice image: built in a Rust stage, run from Debian slim with the
# binary, CA certificates and the shared libraries it links, as a non-root
# user. docs/deploy.md says how to build and run it.
#
#   docker build --build-arg SLUICE_GIT_COMMIT="$(git rev-parse --short=12 HEAD)" -t sluice .
#
# Both stages use the same Debian release, so the libraries the builder
# links against (OpenSSL 3, libcurl 4) are the ones the runtime installs.
ARG RUST_VERSION=1.95.0
ARG DEBIAN_RELEASE=bookworm

FROM rust:${RUST_VERSION}-${DEBIAN_RELEASE} AS builder
# The Kafka sink builds librdkafka from source with its own configure and
# make (no cmake feature is on); it links OpenSSL for TLS and SASL, libcurl
# for OAUTHBEARER token fetches, and zlib. zstd and mimalloc are compiled
# from their crates. The rust image has these already; naming them keeps
# the build from depending on what that image happens to carry.
# Debian's versions are not pinned: a stable release only takes fixes, and
# a pin breaks the build as soon as the mirror moves to the next point release.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      binutils libcurl4-openssl-dev libssl-dev make pkg-config zlib1g-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# `sluice --version` names the commit; .git is not sent to the builder
# (.dockerignore), so pass it in. Empty means build.rs asks git, then says
# "unknown".
ARG SLUICE_GIT_COMMIT=
# The cache mounts keep crates and compiled dependencies between builds;
# the binary is copied out of the target cache in the same step. The
# release profile leaves debug info out of it (backtraces keep function
# names), so it is copied as built.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p sluice \
 && cp target/release/sluice /usr/local/bin/sluice

FROM debian:${DEBIAN_RELEASE}-slim
# libssl3 and libcurl4 are what the binary links besides glibc and zlib
# (both already in the slim image); ca-certificates backs TLS to sources
# and sinks that use the system roots.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libcurl4 libssl3 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 sluice \
 && useradd --system --uid 10001 --gid sluice --home-dir /var/lib/sluice --no-create-home \
      --shell /usr/sbin/nologin sluice \
 && install -d -o sluice -g sluice -m 0750 /var/lib/sluice \
 && install -d -m 0755 /etc/sluice
COPY --from=builder /usr/local/bin/sluice /usr/local/bin/sluice
COPY deploy/docker/sluice-probe /usr/local/bin/sluice-probe
# Fails the build here, not at first start, if a shared library is missing.
RUN sluice --version

# A numeric user, so Kubernetes' runAsNonRoot can check it.
USER 10001:10001
WORKDIR /var/lib/sluice
# In a container the API must listen beyond loopback for probes, the
# Service and Prometheus to reach it. Probes and scrapers send the pod's
# IP as Host, which the API accepts on a wildcard listener; names such as
# a Service's DNS name go in SLUICE_API_ALLOWED_HOSTS.
ENV SLUICE_API_ADDR=0.0.0.0:8080
EXPOSE 8080
# /health needs no token. sluice-probe speaks HTTP through bash, so the
# image carries no curl just for this.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD ["sluice-probe", "/health"]
ENTRYPOINT ["sluice"]
# Mount the pipelines' YAML files on /etc/sluice; checkpoints and the
# sources' state go to /var/lib/sluice, which should be a volume.
CMD ["run", "-c", "/etc/sluice", "--data-dir", "/var/lib/sluice"]
