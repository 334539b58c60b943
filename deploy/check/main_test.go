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

func TestEachBreakageIsRefused(t *testing.T) {
	cases := []struct{ name, old, new, want string }{
		{"unknown field", "  replicas: 1\n", "  replicas: 1\n  replica: 1\n", `unknown field "spec.replica"`},
		{"field in the wrong case", "  replicas: 1\n", "  Replicas: 1\n", `unknown field "spec.Replicas"`},
		{"duplicate key", "  replicas: 1\n", "  replicas: 1\n  replicas: 2\n", "already set in map"},
		{"wrong type", "  replicas: 1\n", "  replicas: one\n", "cannot unmarshal string"},
		{"YAML 1.1 boolean", "{app: x}}\n  template", "{app: y}}\n  template", "cannot unmarshal bool"},
		{"bad quantity", "memory: 256Mi", "memory: 256MB", "quantities must match"},
		{"unknown kind", "kind: ConfigMap", "kind: ConfigMapp", "not a kind this check knows"},
		{"two replicas", "  replicas: 1\n", "  replicas: 2\n", "one instance until fleet mode"},
		{"rolling update", "{type: Recreate}", "{type: RollingUpdate}", "must be Recreate"},
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
