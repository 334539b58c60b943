// Command manifestcheck decodes rendered Kubernetes manifests strictly
// against the Kubernetes API's own Go types, then checks what ties the
// objects together (names, selectors, ports, references).
//
// No cluster and no downloaded OpenAPI schema is needed: the types in
// k8s.io/api (and the prometheus-operator's for ServiceMonitor) are the
// schema. Decoding goes through sigs.k8s.io/json's UnmarshalStrict, the
// API server's own strict field validation: an unknown field, a field in
// the wrong case, a duplicate field or a value of the wrong type is an
// error, where kubectl apply would drop or reject it.
//
// Usage: manifestcheck [-external kind/name,...] FILE...
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// The kinds the chart renders; anything else is an error, so a new
// template cannot slip past the check undecoded.
var kinds = map[string]func() any{
	"v1/ConfigMap":             func() any { return &corev1.ConfigMap{} },
	"v1/Secret":                func() any { return &corev1.Secret{} },
	"v1/Service":               func() any { return &corev1.Service{} },
	"v1/PersistentVolumeClaim": func() any { return &corev1.PersistentVolumeClaim{} },
	"apps/v1/Deployment":       func() any { return &appsv1.Deployment{} },
	"monitoring.coreos.com/v1/ServiceMonitor": func() any { return &monitoringv1.ServiceMonitor{} },
}

func main() {
	external := flag.String("external", "", "comma-separated kind/name of objects the manifests may refer to without holding them (secret/NAME, persistentvolumeclaim/NAME)")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: manifestcheck [-external kind/name,...] FILE...")
		os.Exit(2)
	}
	failed := false
	for _, path := range flag.Args() {
		objects, err := decodeFile(path)
		if err == nil {
			err = errors.Join(checkSet(objects, strings.Split(*external, ","))...)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s:\n%v\n", path, err)
			failed = true
			continue
		}
		fmt.Printf("%s: %d objects decoded strictly and cross-checked\n", path, len(objects))
	}
	if failed {
		os.Exit(1)
	}
}

// decodeFile splits a multi-document YAML file the way kubectl does and
// decodes each document into its typed struct.
func decodeFile(path string) ([]any, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	reader := utilyaml.NewYAMLReader(bufio.NewReader(f))
	var objects []any
	var errs []error
	for n := 1; ; n++ {
		doc, err := reader.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", n, err)
		}
		obj, err := decode(doc)
		if err != nil {
			errs = append(errs, fmt.Errorf("document %d: %w", n, err))
			continue
		}
		if obj != nil {
			objects = append(objects, obj)
		}
	}
	if len(objects) == 0 && len(errs) == 0 {
		errs = append(errs, errors.New("no object in the file"))
	}
	return objects, errors.Join(errs...)
}

// decode turns one YAML document into its typed object; nil for a
// document of comments only (helm puts "# Source:" lines between them).
func decode(doc []byte) (any, error) {
	// Strict: a key given twice is an error, not "the last one wins".
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, err
	}
	if s := string(bytes.TrimSpace(js)); s == "null" || s == "" {
		return nil, nil
	}
	var meta metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &meta); err != nil {
		return nil, err
	}
	gvk := meta.APIVersion + "/" + meta.Kind
	newObject, ok := kinds[gvk]
	if !ok {
		return nil, fmt.Errorf("apiVersion %q kind %q is not a kind this check knows; add its Go type to kinds", meta.APIVersion, meta.Kind)
	}
	obj := newObject()
	strict, err := kjson.UnmarshalStrict(js, obj, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", gvk, err)
	}
	if len(strict) > 0 {
		return nil, fmt.Errorf("%s: %w", gvk, errors.Join(strict...))
	}
	return obj, nil
}
