package main

import (
	"fmt"
	"regexp"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The pattern the ServiceMonitor CRD puts on its durations
// (+kubebuilder:validation:Pattern on monitoringv1.Duration); a JSON
// decode of a string type cannot check it.
var promDuration = regexp.MustCompile(`^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$`)

// set is what one rendered file holds, by kind and name.
type set struct {
	configMaps  map[string]*corev1.ConfigMap
	secrets     map[string]*corev1.Secret
	services    []*corev1.Service
	claims      map[string]bool
	deployments []*appsv1.Deployment
	monitors    []*monitoringv1.ServiceMonitor
	external    map[string]bool
}

// checkSet applies the rules that the API server's validation or a
// controller would apply at run time, which a strict decode cannot see.
func checkSet(objects []any, external []string) []error {
	s := set{configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{}, claims: map[string]bool{}, external: map[string]bool{}}
	for _, e := range external {
		s.external[strings.ToLower(strings.TrimSpace(e))] = true
	}
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	for _, obj := range objects {
		meta := objectMeta(obj)
		for _, msg := range validation.IsDNS1123Subdomain(meta.Name) {
			fail("%T %q: metadata.name: %s", obj, meta.Name, msg)
		}
		for _, e := range metavalidation.ValidateLabels(meta.Labels, field.NewPath("metadata", "labels")) {
			fail("%T %q: %v", obj, meta.Name, e)
		}
		switch o := obj.(type) {
		case *corev1.ConfigMap:
			s.configMaps[o.Name] = o
			for key := range o.Data {
				for _, msg := range validation.IsConfigMapKey(key) {
					fail("ConfigMap %q: key %q: %s", o.Name, key, msg)
				}
			}
		case *corev1.Secret:
			s.secrets[o.Name] = o
			// The API server refuses other keys; with envFrom each key
			// becomes a variable a ${VAR} of the config may name.
			for key := range secretKeys(o) {
				for _, msg := range validation.IsConfigMapKey(key) {
					fail("Secret %q: key %q: %s", o.Name, key, msg)
				}
			}
		case *corev1.Service:
			s.services = append(s.services, o)
			for _, msg := range validation.IsDNS1035Label(o.Name) {
				fail("Service %q: a Service's name must be a DNS-1035 label: %s", o.Name, msg)
			}
		case *corev1.PersistentVolumeClaim:
			s.claims[o.Name] = true
		case *appsv1.Deployment:
			s.deployments = append(s.deployments, o)
		case *monitoringv1.ServiceMonitor:
			s.monitors = append(s.monitors, o)
		}
	}
	for _, d := range s.deployments {
		errs = append(errs, s.checkDeployment(d)...)
	}
	for _, svc := range s.services {
		errs = append(errs, s.checkService(svc)...)
	}
	for _, m := range s.monitors {
		errs = append(errs, s.checkMonitor(m)...)
	}
	return errs
}

func objectMeta(obj any) metav1.ObjectMeta {
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		return o.ObjectMeta
	case *corev1.Secret:
		return o.ObjectMeta
	case *corev1.Service:
		return o.ObjectMeta
	case *corev1.PersistentVolumeClaim:
		return o.ObjectMeta
	case *appsv1.Deployment:
		return o.ObjectMeta
	case *monitoringv1.ServiceMonitor:
		return o.ObjectMeta
	}
	return metav1.ObjectMeta{}
}

// secretKeys is every key of a rendered Secret, from data and stringData.
func secretKeys(secret *corev1.Secret) map[string]bool {
	keys := map[string]bool{}
	for k := range secret.Data {
		keys[k] = true
	}
	for k := range secret.StringData {
		keys[k] = true
	}
	return keys
}

func (s *set) checkDeployment(d *appsv1.Deployment) []error {
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("Deployment %q: "+format, append([]any{d.Name}, args...)...))
	}
	pod := d.Spec.Template.Spec
	if fleetMember(pod) {
		errs = append(errs, checkFleet(d)...)
	} else {
		// Without --fleet nothing keeps two instances off the same
		// pipelines: one replica, and never two at once in a rollout.
		if d.Spec.Replicas != nil && *d.Spec.Replicas > 1 {
			fail("replicas is %d: without --fleet sluice runs as one instance (each replica would run every pipeline)", *d.Spec.Replicas)
		}
		if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
			fail("strategy is %q: without --fleet it must be Recreate, so two instances never run the same pipelines", d.Spec.Strategy.Type)
		}
	}
	selector, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil || d.Spec.Selector == nil {
		fail("spec.selector: %v", err)
	} else if !selector.Matches(labels.Set(d.Spec.Template.Labels)) {
		fail("spec.selector %v does not match the pod template's labels %v", selector, d.Spec.Template.Labels)
	}
	volumes := map[string]bool{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = true
		switch {
		case v.ConfigMap != nil && s.configMaps[v.ConfigMap.Name] == nil:
			fail("volume %q: ConfigMap %q is not in the manifests", v.Name, v.ConfigMap.Name)
		case v.Secret != nil && s.secrets[v.Secret.SecretName] == nil && !s.external["secret/"+v.Secret.SecretName]:
			fail("volume %q: Secret %q is not in the manifests", v.Name, v.Secret.SecretName)
		case v.PersistentVolumeClaim != nil && !s.claims[v.PersistentVolumeClaim.ClaimName] &&
			!s.external["persistentvolumeclaim/"+v.PersistentVolumeClaim.ClaimName]:
			fail("volume %q: PersistentVolumeClaim %q is not in the manifests", v.Name, v.PersistentVolumeClaim.ClaimName)
		}
	}
	for _, c := range pod.Containers {
		ports := map[string]bool{}
		for _, p := range c.Ports {
			ports[p.Name] = true
		}
		for _, m := range c.VolumeMounts {
			if !volumes[m.Name] {
				fail("container %q mounts volume %q, which the pod does not have", c.Name, m.Name)
			}
		}
		for _, env := range c.EnvFrom {
			if env.SecretRef == nil {
				continue
			}
			if s.secrets[env.SecretRef.Name] == nil && !s.external["secret/"+env.SecretRef.Name] {
				fail("container %q: envFrom Secret %q is not in the manifests", c.Name, env.SecretRef.Name)
			}
		}
		probes := map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe}
		for kind, probe := range probes {
			if probe == nil {
				fail("container %q has no %s probe", c.Name, kind)
				continue
			}
			if h := probe.HTTPGet; h != nil && h.Port.StrVal != "" && !ports[h.Port.StrVal] {
				fail("container %q: %s probe port %q is not a named port of the container", c.Name, kind, h.Port.StrVal)
			}
		}
	}
	return errs
}

// fleetMember reports whether a container of the pod runs `sluice run
// --fleet` (the flag is a switch: clap takes no value after it).
func fleetMember(pod corev1.PodSpec) bool {
	for _, c := range pod.Containers {
		for _, arg := range append(append([]string{}, c.Command...), c.Args...) {
			if arg == "--fleet" {
				return true
			}
		}
	}
	return false
}

// checkFleet applies the rules of a fleet's Deployment. Leases keep its
// instances off each other's pipelines, so any number of replicas and a
// rolling update are fine; what breaks it is an instance id the pods
// share (two live instances may not hold one) and a claim on the data
// dir, which a fleet does not use and which one node at a time can mount.
func checkFleet(d *appsv1.Deployment) []error {
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("Deployment %q: "+format, append([]any{d.Name}, args...)...))
	}
	switch d.Spec.Strategy.Type {
	// Unset is RollingUpdate to the API server.
	case appsv1.RollingUpdateDeploymentStrategyType, appsv1.RecreateDeploymentStrategyType, "":
	default:
		fail("strategy is %q: it must be RollingUpdate or Recreate", d.Spec.Strategy.Type)
	}
	// Kubernetes makes an unset replicas 1.
	several := d.Spec.Replicas != nil && *d.Spec.Replicas > 1
	pod := d.Spec.Template.Spec
	for _, c := range pod.Containers {
		for i, arg := range c.Args {
			value, given := strings.CutPrefix(arg, "--instance-id=")
			if arg == "--instance-id" && i+1 < len(c.Args) {
				value, given = c.Args[i+1], true
			}
			// A $(VAR) is expanded by the kubelet from the container's
			// environment, which may hold the pod's name.
			if several && given && !strings.Contains(value, "$(") {
				fail("container %q: --instance-id %q gives every replica the same instance id; take it from the pod's name (SLUICE_INSTANCE_ID from fieldRef metadata.name)", c.Name, value)
			}
		}
		for _, env := range c.Env {
			if env.Name != "SLUICE_INSTANCE_ID" || !several {
				continue
			}
			ref := env.ValueFrom
			if ref == nil || ref.FieldRef == nil || (ref.FieldRef.FieldPath != "metadata.name" && ref.FieldRef.FieldPath != "metadata.uid") {
				fail("container %q: SLUICE_INSTANCE_ID must differ between replicas; take it from fieldRef metadata.name", c.Name)
			}
		}
	}
	for _, v := range pod.Volumes {
		if v.PersistentVolumeClaim != nil {
			fail("volume %q: a fleet keeps its state in the PostgreSQL store, not on the data dir, and a ReadWriteOnce claim such as %q attaches to one node at a time; use an emptyDir", v.Name, v.PersistentVolumeClaim.ClaimName)
		}
	}
	return errs
}

func (s *set) checkService(svc *corev1.Service) []error {
	var errs []error
	matched := false
	for _, d := range s.deployments {
		if len(svc.Spec.Selector) == 0 || !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
			continue
		}
		matched = true
		for _, p := range svc.Spec.Ports {
			if p.TargetPort.StrVal == "" {
				continue
			}
			found := false
			for _, c := range d.Spec.Template.Spec.Containers {
				for _, cp := range c.Ports {
					found = found || cp.Name == p.TargetPort.StrVal
				}
			}
			if !found {
				errs = append(errs, fmt.Errorf("Service %q: targetPort %q is not a port name of Deployment %q", svc.Name, p.TargetPort.StrVal, d.Name))
			}
		}
	}
	if !matched {
		errs = append(errs, fmt.Errorf("Service %q: selector %v selects no Deployment's pods", svc.Name, svc.Spec.Selector))
	}
	return errs
}

func (s *set) checkMonitor(m *monitoringv1.ServiceMonitor) []error {
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("ServiceMonitor %q: "+format, append([]any{m.Name}, args...)...))
	}
	selector, err := metav1.LabelSelectorAsSelector(&m.Spec.Selector)
	if err != nil {
		fail("spec.selector: %v", err)
		return errs
	}
	var services []*corev1.Service
	for _, svc := range s.services {
		if selector.Matches(labels.Set(svc.Labels)) {
			services = append(services, svc)
		}
	}
	if len(services) == 0 {
		fail("selector %v matches no Service's labels", selector)
	}
	if len(m.Spec.Endpoints) == 0 {
		fail("no endpoints")
	}
	for i, ep := range m.Spec.Endpoints {
		for _, svc := range services {
			named := false
			for _, p := range svc.Spec.Ports {
				named = named || p.Name == ep.Port
			}
			if !named {
				fail("endpoints[%d].port %q is not a port name of Service %q", i, ep.Port, svc.Name)
			}
		}
		for name, d := range map[string]monitoringv1.Duration{"interval": ep.Interval, "scrapeTimeout": ep.ScrapeTimeout} {
			if !promDuration.MatchString(string(d)) {
				fail("endpoints[%d].%s %q is not a Prometheus duration", i, name, d)
			}
		}
		if auth := ep.Authorization; auth != nil && auth.Credentials != nil {
			ref := auth.Credentials
			secret := s.secrets[ref.Name]
			switch {
			case secret == nil && !s.external["secret/"+ref.Name]:
				fail("endpoints[%d].authorization: Secret %q is not in the manifests", i, ref.Name)
			case secret != nil && !secretKeys(secret)[ref.Key]:
				fail("endpoints[%d].authorization: Secret %q has no key %q", i, ref.Name, ref.Key)
			}
		}
	}
	return errs
}
