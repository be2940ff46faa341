package main

import (
	"fmt"
	"reflect"
	"regexp"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// What the API server's own validation would refuse and what would be accepted but never work
// (a Service whose selector matches no pod, a probe on a port nobody listens on). Cross-document
// references are checked against the stream itself: the chart renders every ConfigMap it mounts,
// while Secrets may be made by the operator, so only those in the stream are looked into.

type problems struct {
	list []string
	doc  document
}

func (p *problems) add(path, format string, args ...any) {
	p.list = append(p.list, fmt.Sprintf("%s: %s: %s", p.doc, path, fmt.Sprintf(format, args...)))
}

// index of the stream by kind and name.
type stream map[string]document

func (s stream) get(kind, name string) (document, bool) {
	d, ok := s[kind+"/"+name]
	return d, ok
}

func check(docs []document) []string {
	s := stream{}
	for _, d := range docs {
		s[d.kind+"/"+d.name] = d
	}
	p := &problems{}
	for _, d := range docs {
		p.doc = d
		switch o := d.obj.(type) {
		case *appsv1.Deployment:
			checkMeta(p, o.ObjectMeta, validation.IsDNS1123Subdomain)
			checkDeployment(p, s, o)
		case *corev1.Service:
			checkMeta(p, o.ObjectMeta, validation.IsDNS1035Label)
			checkService(p, s, o)
		case *corev1.ConfigMap:
			checkMeta(p, o.ObjectMeta, validation.IsDNS1123Subdomain)
			for k := range o.Data {
				checkValue(p, "data["+k+"]", k, validation.IsConfigMapKey)
			}
		case *corev1.Secret:
			checkMeta(p, o.ObjectMeta, validation.IsDNS1123Subdomain)
			for k := range o.StringData {
				checkValue(p, "stringData["+k+"]", k, validation.IsConfigMapKey)
			}
			for k := range o.Data {
				checkValue(p, "data["+k+"]", k, validation.IsConfigMapKey)
			}
		case *corev1.ServiceAccount:
			checkMeta(p, o.ObjectMeta, validation.IsDNS1123Subdomain)
		case *autoscalingv2.HorizontalPodAutoscaler:
			checkMeta(p, o.ObjectMeta, validation.IsDNS1123Subdomain)
			checkHPA(p, s, o)
		case *policyv1.PodDisruptionBudget:
			checkMeta(p, o.ObjectMeta, validation.IsDNS1123Subdomain)
			checkPDB(p, s, o)
		case *networkingv1.Ingress:
			checkMeta(p, o.ObjectMeta, validation.IsDNS1123Subdomain)
			checkIngress(p, s, o)
		case *monitoringv1.ServiceMonitor:
			checkMeta(p, o.ObjectMeta, validation.IsDNS1123Subdomain)
			checkServiceMonitor(p, s, o)
		case *InferenceService:
			checkMeta(p, o.ObjectMeta, validation.IsDNS1035Label)
			checkInferenceService(p, o)
		}
	}
	return p.list
}

func checkValue(p *problems, path, value string, valid func(string) []string) {
	for _, msg := range valid(value) {
		p.add(path, "%q: %s", value, msg)
	}
}

func checkMeta(p *problems, m metav1.ObjectMeta, validName func(string) []string) {
	if m.Name == "" {
		p.add("metadata.name", "is required")
	} else {
		checkValue(p, "metadata.name", m.Name, validName)
	}
	checkLabels(p, "metadata.labels", m.Labels)
	for k := range m.Annotations {
		checkValue(p, "metadata.annotations", k, validation.IsQualifiedName)
	}
}

func checkLabels(p *problems, path string, l map[string]string) {
	for k, v := range l {
		checkValue(p, path, k, validation.IsQualifiedName)
		checkValue(p, path+"["+k+"]", v, validation.IsValidLabelValue)
	}
}

// selector parses a label selector; an empty one selects everything, which the chart never means.
func selector(p *problems, path string, sel *metav1.LabelSelector) labels.Selector {
	if sel == nil || (len(sel.MatchLabels) == 0 && len(sel.MatchExpressions) == 0) {
		p.add(path, "is required and must not be empty")
		return nil
	}
	parsed, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		p.add(path, "%v", err)
		return nil
	}
	return parsed
}

func checkDeployment(p *problems, s stream, d *appsv1.Deployment) {
	if d.Spec.Replicas != nil && *d.Spec.Replicas < 0 {
		p.add("spec.replicas", "must not be negative")
	}
	if sel := selector(p, "spec.selector", d.Spec.Selector); sel != nil && !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		p.add("spec.selector", "does not match the pod template's labels %v", d.Spec.Template.Labels)
	}
	checkLabels(p, "spec.template.metadata.labels", d.Spec.Template.Labels)
	checkPodSpec(p, s, "spec.template.spec", &d.Spec.Template.Spec)
}

// setFields counts the set (non-nil) pointer fields of a union such as VolumeSource.
func setFields(union any) int {
	v := reflect.ValueOf(union)
	n := 0
	for i := 0; i < v.NumField(); i++ {
		if f := v.Field(i); f.Kind() == reflect.Pointer && !f.IsNil() {
			n++
		}
	}
	return n
}

func checkPodSpec(p *problems, s stream, path string, spec *corev1.PodSpec) {
	volumes := map[string]bool{}
	for i, v := range spec.Volumes {
		vp := fmt.Sprintf("%s.volumes[%d]", path, i)
		checkValue(p, vp+".name", v.Name, validation.IsDNS1123Label)
		if volumes[v.Name] {
			p.add(vp+".name", "%q is used by another volume", v.Name)
		}
		volumes[v.Name] = true
		if n := setFields(v.VolumeSource); n != 1 {
			p.add(vp, "needs exactly one volume source, has %d", n)
		}
		if cm := v.ConfigMap; cm != nil {
			checkConfigMapRef(p, s, vp+".configMap", cm.Name, cm.Items, cm.Optional)
		}
		if sec := v.Secret; sec != nil {
			checkSecretItems(p, s, vp+".secret", sec.SecretName, sec.Items, sec.Optional)
		}
		if pr := v.Projected; pr != nil {
			for j, src := range pr.Sources {
				sp := fmt.Sprintf("%s.projected.sources[%d]", vp, j)
				if src.ConfigMap != nil {
					checkConfigMapRef(p, s, sp+".configMap", src.ConfigMap.Name, src.ConfigMap.Items, src.ConfigMap.Optional)
				}
				if src.Secret != nil {
					checkSecretItems(p, s, sp+".secret", src.Secret.Name, src.Secret.Items, src.Secret.Optional)
				}
			}
		}
	}
	if len(spec.Containers) == 0 {
		p.add(path+".containers", "needs at least one container")
	}
	names := map[string]bool{}
	for i := range spec.InitContainers {
		checkContainer(p, s, fmt.Sprintf("%s.initContainers[%d]", path, i), &spec.InitContainers[i], volumes, names)
	}
	for i := range spec.Containers {
		checkContainer(p, s, fmt.Sprintf("%s.containers[%d]", path, i), &spec.Containers[i], volumes, names)
	}
}

func checkConfigMapRef(p *problems, s stream, path, name string, items []corev1.KeyToPath, optional *bool) {
	d, ok := s.get("ConfigMap", name)
	if !ok {
		if optional == nil || !*optional {
			p.add(path+".name", "ConfigMap %q is not rendered", name)
		}
		return
	}
	cm := d.obj.(*corev1.ConfigMap)
	for j, item := range items {
		if _, has := cm.Data[item.Key]; !has {
			p.add(fmt.Sprintf("%s.items[%d].key", path, j), "ConfigMap %q has no key %q", name, item.Key)
		}
	}
}

func secretHas(sec *corev1.Secret, key string) bool {
	_, inData := sec.Data[key]
	_, inString := sec.StringData[key]
	return inData || inString
}

func checkSecretItems(p *problems, s stream, path, name string, items []corev1.KeyToPath, optional *bool) {
	d, ok := s.get("Secret", name)
	if !ok || (optional != nil && *optional) {
		return
	}
	for j, item := range items {
		if !secretHas(d.obj.(*corev1.Secret), item.Key) {
			p.add(fmt.Sprintf("%s.items[%d].key", path, j), "Secret %q has no key %q", name, item.Key)
		}
	}
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

func checkContainer(p *problems, s stream, path string, c *corev1.Container, volumes, names map[string]bool) {
	checkValue(p, path+".name", c.Name, validation.IsDNS1123Label)
	if names[c.Name] {
		p.add(path+".name", "%q is used by another container", c.Name)
	}
	names[c.Name] = true
	if strings.TrimSpace(c.Image) == "" {
		p.add(path+".image", "is required")
	}
	ports := map[string]int32{}
	numbers := map[int32]bool{}
	for i, port := range c.Ports {
		pp := fmt.Sprintf("%s.ports[%d]", path, i)
		for _, msg := range validation.IsValidPortNum(int(port.ContainerPort)) {
			p.add(pp+".containerPort", "%s", msg)
		}
		if port.Name != "" {
			checkValue(p, pp+".name", port.Name, validation.IsValidPortName)
			if _, dup := ports[port.Name]; dup {
				p.add(pp+".name", "%q names another port too", port.Name)
			}
			ports[port.Name] = port.ContainerPort
		}
		numbers[port.ContainerPort] = true
	}
	mounts := map[string]bool{}
	for i, m := range c.VolumeMounts {
		mp := fmt.Sprintf("%s.volumeMounts[%d]", path, i)
		if !volumes[m.Name] {
			p.add(mp+".name", "no volume is named %q", m.Name)
		}
		if !strings.HasPrefix(m.MountPath, "/") {
			p.add(mp+".mountPath", "%q is not an absolute path", m.MountPath)
		}
		if mounts[m.MountPath] {
			p.add(mp+".mountPath", "%q is mounted twice", m.MountPath)
		}
		mounts[m.MountPath] = true
	}
	env := map[string]bool{}
	for i, e := range c.Env {
		ep := fmt.Sprintf("%s.env[%d]", path, i)
		checkValue(p, ep+".name", e.Name, validation.IsEnvVarName)
		if env[e.Name] {
			p.add(ep+".name", "%q is set twice (the last one wins)", e.Name)
		}
		env[e.Name] = true
		if e.ValueFrom != nil {
			if e.Value != "" {
				p.add(ep, "has both value and valueFrom")
			}
			if n := setFields(*e.ValueFrom); n != 1 {
				p.add(ep+".valueFrom", "needs exactly one source, has %d", n)
			}
			if ref := e.ValueFrom.SecretKeyRef; ref != nil && (ref.Optional == nil || !*ref.Optional) {
				if d, ok := s.get("Secret", ref.Name); ok && !secretHas(d.obj.(*corev1.Secret), ref.Key) {
					p.add(ep+".valueFrom.secretKeyRef.key", "Secret %q has no key %q", ref.Name, ref.Key)
				}
			}
		}
	}
	// Kubernetes expands $(NAME) in command and args from the container's env, and passes an
	// unknown one through literally.
	for i, arg := range append(append([]string{}, c.Command...), c.Args...) {
		for _, m := range varRef.FindAllStringSubmatch(arg, -1) {
			if !env[m[1]] {
				p.add(fmt.Sprintf("%s.command/args[%d]", path, i), "$(%s) is not in the container's env", m[1])
			}
		}
	}
	for name, probe := range map[string]*corev1.Probe{
		"livenessProbe": c.LivenessProbe, "readinessProbe": c.ReadinessProbe, "startupProbe": c.StartupProbe,
	} {
		if probe != nil {
			checkProbe(p, path+"."+name, probe, ports, numbers)
		}
	}
	for name, q := range c.Resources.Requests {
		if limit, ok := c.Resources.Limits[name]; ok && q.Cmp(limit) > 0 {
			p.add(path+".resources.requests."+string(name), "%s is more than the limit %s", q.String(), limit.String())
		}
	}
}

func checkProbe(p *problems, path string, probe *corev1.Probe, ports map[string]int32, numbers map[int32]bool) {
	if n := setFields(probe.ProbeHandler); n != 1 {
		p.add(path, "needs exactly one handler, has %d", n)
	}
	if h := probe.HTTPGet; h != nil {
		if !strings.HasPrefix(h.Path, "/") {
			p.add(path+".httpGet.path", "%q does not start with /", h.Path)
		}
		if h.Port.StrVal != "" {
			if _, ok := ports[h.Port.StrVal]; !ok {
				p.add(path+".httpGet.port", "the container has no port named %q", h.Port.StrVal)
			}
		} else if !numbers[h.Port.IntVal] {
			p.add(path+".httpGet.port", "the container does not declare port %d", h.Port.IntVal)
		}
	}
}

// pods are the pod templates of the stream's Deployments.
func pods(s stream) map[string]*corev1.PodTemplateSpec {
	out := map[string]*corev1.PodTemplateSpec{}
	for _, d := range s {
		if dep, ok := d.obj.(*appsv1.Deployment); ok {
			out[dep.Name] = &dep.Spec.Template
		}
	}
	return out
}

func checkService(p *problems, s stream, svc *corev1.Service) {
	var selected []*corev1.PodTemplateSpec
	if len(svc.Spec.Selector) > 0 {
		for _, pod := range pods(s) {
			if labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)) {
				selected = append(selected, pod)
			}
		}
		if len(selected) == 0 {
			p.add("spec.selector", "%v selects no pod template in the stream", svc.Spec.Selector)
		}
	}
	names := map[string]bool{}
	for i, port := range svc.Spec.Ports {
		pp := fmt.Sprintf("spec.ports[%d]", i)
		if len(svc.Spec.Ports) > 1 && port.Name == "" {
			p.add(pp+".name", "is required when a Service has more than one port")
		}
		if port.Name != "" {
			checkValue(p, pp+".name", port.Name, validation.IsDNS1123Label)
		}
		if names[port.Name] {
			p.add(pp+".name", "%q names another port too", port.Name)
		}
		names[port.Name] = true
		for _, msg := range validation.IsValidPortNum(int(port.Port)) {
			p.add(pp+".port", "%s", msg)
		}
		if target := port.TargetPort.StrVal; target != "" {
			for _, pod := range selected {
				if !podHasPort(pod, target) {
					p.add(pp+".targetPort", "the selected pods have no container port named %q", target)
				}
			}
		}
	}
	switch svc.Spec.SessionAffinity {
	case "", corev1.ServiceAffinityNone, corev1.ServiceAffinityClientIP:
	default:
		p.add("spec.sessionAffinity", "%q is neither None nor ClientIP", svc.Spec.SessionAffinity)
	}
}

func podHasPort(pod *corev1.PodTemplateSpec, name string) bool {
	for _, c := range pod.Spec.Containers {
		for _, port := range c.Ports {
			if port.Name == name {
				return true
			}
		}
	}
	return false
}

func checkHPA(p *problems, s stream, h *autoscalingv2.HorizontalPodAutoscaler) {
	ref := h.Spec.ScaleTargetRef
	if ref.Kind != "Deployment" || ref.APIVersion != "apps/v1" {
		p.add("spec.scaleTargetRef", "scales %s %s, not an apps/v1 Deployment", ref.APIVersion, ref.Kind)
	} else if _, ok := s.get("Deployment", ref.Name); !ok {
		p.add("spec.scaleTargetRef.name", "Deployment %q is not rendered", ref.Name)
	}
	if h.Spec.MinReplicas != nil && *h.Spec.MinReplicas > h.Spec.MaxReplicas {
		p.add("spec.minReplicas", "%d is more than maxReplicas %d", *h.Spec.MinReplicas, h.Spec.MaxReplicas)
	}
	if h.Spec.MaxReplicas < 1 {
		p.add("spec.maxReplicas", "must be at least 1")
	}
	if len(h.Spec.Metrics) == 0 {
		p.add("spec.metrics", "has no metric (Kubernetes would default to 80%% CPU)")
	}
	for i, m := range h.Spec.Metrics {
		mp := fmt.Sprintf("spec.metrics[%d]", i)
		sources := map[autoscalingv2.MetricSourceType]bool{
			autoscalingv2.ResourceMetricSourceType:          m.Resource != nil,
			autoscalingv2.PodsMetricSourceType:              m.Pods != nil,
			autoscalingv2.ObjectMetricSourceType:            m.Object != nil,
			autoscalingv2.ExternalMetricSourceType:          m.External != nil,
			autoscalingv2.ContainerResourceMetricSourceType: m.ContainerResource != nil,
		}
		if !sources[m.Type] || setFields(m) != 1 {
			p.add(mp, "type %q needs exactly its own source field set", m.Type)
		}
	}
}

func checkPDB(p *problems, s stream, pdb *policyv1.PodDisruptionBudget) {
	if (pdb.Spec.MinAvailable == nil) == (pdb.Spec.MaxUnavailable == nil) {
		p.add("spec", "needs exactly one of minAvailable and maxUnavailable")
	}
	sel := selector(p, "spec.selector", pdb.Spec.Selector)
	if sel == nil {
		return
	}
	for _, pod := range pods(s) {
		if sel.Matches(labels.Set(pod.Labels)) {
			return
		}
	}
	p.add("spec.selector", "selects no pod template in the stream")
}

func checkIngress(p *problems, s stream, ing *networkingv1.Ingress) {
	for i, rule := range ing.Spec.Rules {
		if host, wildcard := strings.CutPrefix(rule.Host, "*."); wildcard {
			checkValue(p, fmt.Sprintf("spec.rules[%d].host", i), rule.Host, validation.IsWildcardDNS1123Subdomain)
		} else if host != "" {
			checkValue(p, fmt.Sprintf("spec.rules[%d].host", i), host, validation.IsDNS1123Subdomain)
		}
		if rule.HTTP == nil {
			continue
		}
		for j, path := range rule.HTTP.Paths {
			pp := fmt.Sprintf("spec.rules[%d].http.paths[%d]", i, j)
			if !strings.HasPrefix(path.Path, "/") {
				p.add(pp+".path", "%q does not start with /", path.Path)
			}
			if path.PathType == nil {
				p.add(pp+".pathType", "is required")
			}
			if b := path.Backend.Service; b != nil {
				checkServicePort(p, s, pp+".backend.service", b.Name, b.Port.Name, b.Port.Number)
			}
		}
	}
}

func checkServicePort(p *problems, s stream, path, name, portName string, number int32) {
	d, ok := s.get("Service", name)
	if !ok {
		p.add(path+".name", "Service %q is not rendered", name)
		return
	}
	for _, port := range d.obj.(*corev1.Service).Spec.Ports {
		if (portName != "" && port.Name == portName) || (portName == "" && port.Port == number) {
			return
		}
	}
	p.add(path+".port", "Service %q has no port %q/%d", name, portName, number)
}

func checkServiceMonitor(p *problems, s stream, sm *monitoringv1.ServiceMonitor) {
	sel := selector(p, "spec.selector", &sm.Spec.Selector)
	if sel == nil {
		return
	}
	var matched []*corev1.Service
	for _, d := range s {
		if svc, ok := d.obj.(*corev1.Service); ok && sel.Matches(labels.Set(svc.Labels)) {
			matched = append(matched, svc)
		}
	}
	if len(matched) == 0 {
		p.add("spec.selector", "selects no Service in the stream")
	}
	for i, ep := range sm.Spec.Endpoints {
		if ep.Port == "" {
			p.add(fmt.Sprintf("spec.endpoints[%d].port", i), "is required (a Service port name)")
			continue
		}
		for _, svc := range matched {
			checkServicePort(p, s, fmt.Sprintf("spec.endpoints[%d]", i), svc.Name, ep.Port, 0)
		}
	}
}

var protocols = map[string]bool{"v1": true, "v2": true, "grpc-v1": true, "grpc-v2": true}

func checkInferenceService(p *problems, isvc *InferenceService) {
	pred := &isvc.Spec.Predictor
	if (pred.Model == nil) == (len(pred.Containers) == 0) {
		p.add("spec.predictor", "needs either model or containers")
	}
	if m := pred.Model; m != nil {
		if m.ModelFormat.Name == "" {
			p.add("spec.predictor.model.modelFormat.name", "is required")
		}
		if m.ProtocolVersion != nil && !protocols[*m.ProtocolVersion] {
			p.add("spec.predictor.model.protocolVersion", "%q is not v1, v2, grpc-v1 or grpc-v2", *m.ProtocolVersion)
		}
	}
	for i, c := range pred.Containers {
		if strings.TrimSpace(c.Image) == "" {
			p.add(fmt.Sprintf("spec.predictor.containers[%d].image", i), "is required")
		}
	}
	if pred.MinReplicas != nil && pred.MaxReplicas != 0 && *pred.MinReplicas > pred.MaxReplicas {
		p.add("spec.predictor.minReplicas", "%d is more than maxReplicas %d", *pred.MinReplicas, pred.MaxReplicas)
	}
}
