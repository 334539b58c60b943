package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A small valid set in the chart's shape; each case below breaks it in
// one way that a plain (non-strict) decode or kubectl's client side would
// let through or only catch in the cluster.
const valid = `apiVersion: v1
kind: Secret
metadata: {name: s}
stringData: {PGPASSWORD: x, SLUICE_API_TOKEN: t}
---
# Source: a comment-only document, as helm writes between objects
---
apiVersion: v1
kind: ConfigMap
metadata: {name: c}
data: {pipelines.yaml: "pipelines: []"}
---
apiVersion: v1
kind: Service
metadata: {name: svc, labels: {app: x}}
spec:
  selector: {app: x}
  ports: [{name: http, port: 8080, targetPort: http}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: d}
spec:
  replicas: 1
  strategy: {type: Recreate}
  selector: {matchLabels: {app: x}}
  template:
    metadata: {labels: {app: x}}
    spec:
      containers:
        - name: sluice
          image: sluice:0.1.0
          args: [run, --config=/etc/sluice]
          envFrom: [{secretRef: {name: s}}]
          ports: [{name: http, containerPort: 8080}]
          livenessProbe: {httpGet: {path: /health, port: http}}
          readinessProbe: {exec: {command: [sluice-probe, /ready]}}
          resources: {requests: {memory: 256Mi}}
          volumeMounts: [{name: config, mountPath: /etc/sluice}]
      volumes: [{name: config, configMap: {name: c}}]
---
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: {name: m}
spec:
  selector: {matchLabels: {app: x}}
  endpoints:
    - port: http
      interval: 30s
      authorization: {type: Bearer, credentials: {name: s, key: SLUICE_API_TOKEN}}
`

// The same set as a fleet of three: --fleet, the instance id from the
// pod's name, a rolling update.
var fleet = strings.NewReplacer(
	"  replicas: 1\n  strategy: {type: Recreate}\n",
	"  replicas: 3\n  strategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: 0, maxSurge: 1}}\n",
	"args: [run, --config=/etc/sluice]\n",
	"args: [run, --config=/etc/sluice, --fleet]\n          env: [{name: SLUICE_INSTANCE_ID, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]\n",
).Replace(valid)

func check(t *testing.T, text string) error {
	t.Helper()
	path := filepath.Join(t.TempDir(), "m.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	objects, err := decodeFile(path)
	if err != nil {
		return err
	}
	return errors.Join(checkSet(objects, nil)...)
}

func TestValidSetPasses(t *testing.T) {
	if err := check(t, valid); err != nil {
		t.Fatalf("valid set refused: %v", err)
	}
}

func TestFleetSetPasses(t *testing.T) {
	if fleet == valid || !strings.Contains(fleet, "--fleet") || !strings.Contains(fleet, "replicas: 3") {
		t.Fatal("the fleet fixture did not take its replacements")
	}
	if err := check(t, fleet); err != nil {
		t.Fatalf("fleet set refused: %v", err)
	}
}

func TestEachFleetBreakageIsRefused(t *testing.T) {
	cases := []struct{ name, old, new, want string }{
		{"shared instance id", "valueFrom: {fieldRef: {fieldPath: metadata.name}}", "value: sluice-1", "must differ between replicas"},
		{"instance id flag", "--fleet]", "--fleet, --instance-id=sluice-1]", "the same instance id"},
		{"data dir claim", "volumes: [{name: config, configMap: {name: c}}]", "volumes: [{name: config, configMap: {name: c}}, {name: data, persistentVolumeClaim: {claimName: data}}]", "ReadWriteOnce"},
		{"bad strategy", "{type: RollingUpdate,", "{type: Rolling,", "RollingUpdate or Recreate"},
		{"no --fleet", ", --fleet]", "]", "without --fleet"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if !strings.Contains(fleet, c.old) {
				t.Fatalf("the fleet fixture lacks %q", c.old)
			}
			err := check(t, strings.Replace(fleet, c.old, c.new, 1))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("want an error with %q, got %v", c.want, err)
			}
		})
	}
}

func TestEachBreakageIsRefused(t *testing.T) {
	cases := []struct{ name, old, new, want string }{
		{"unknown field", "  replicas: 1\n", "  replicas: 1\n  replica: 1\n", `unknown field "spec.replica"`},
		{"field in the wrong case", "  replicas: 1\n", "  Replicas: 1\n", `unknown field "spec.Replicas"`},
		{"duplicate key", "  replicas: 1\n", "  replicas: 1\n  replicas: 2\n", "already set in map"},
		{"wrong type", "  replicas: 1\n", "  replicas: one\n", "cannot unmarshal string"},
		{"YAML 1.1 boolean", "{app: x}}\n  template", "{app: y}}\n  template", "cannot unmarshal bool"},
		{"bad quantity", "memory: 256Mi", "memory: 256MB", "quantities must match"},
		{"unknown kind", "kind: ConfigMap", "kind: ConfigMapp", "not a kind this check knows"},
		{"two replicas", "  replicas: 1\n", "  replicas: 2\n", "without --fleet sluice runs as one instance"},
		{"rolling update", "{type: Recreate}", "{type: RollingUpdate}", "without --fleet it must be Recreate"},
		{"selector misses pods", "selector: {matchLabels: {app: x}}\n  template", "selector: {matchLabels: {app: w}}\n  template", "does not match the pod template"},
		{"service selects nothing", "  selector: {app: x}\n", "  selector: {app: z}\n", "selects no Deployment"},
		{"missing config map", "configMap: {name: c}", "configMap: {name: nope}", `ConfigMap "nope" is not in the manifests`},
		{"bad secret key", "PGPASSWORD: x", "PG PASSWORD: x", `key "PG PASSWORD"`},
		{"probe port unnamed", "port: http}}\n          readiness", "port: web}}\n          readiness", "not a named port"},
		{"monitor duration", "interval: 30s", "interval: 30 seconds", "not a Prometheus duration"},
		{"monitor secret key", "key: SLUICE_API_TOKEN}}", "key: TOKEN}}", `has no key "TOKEN"`},
		{"bad name", "metadata: {name: c}", "metadata: {name: C_1}", "metadata.name"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if !strings.Contains(valid, c.old) {
				t.Fatalf("the fixture lacks %q", c.old)
			}
			err := check(t, strings.Replace(valid, c.old, c.new, 1))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("want an error with %q, got %v", c.want, err)
			}
		})
	}
}
