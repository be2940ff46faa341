package main

import (
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
)

// The kinds the chart renders, each decoded into its real Go type: Kubernetes' own, the
// Prometheus Operator's ServiceMonitor, and the InferenceService mirror of kserve.go. Any other
// kind is refused, so a new template must be added here before it passes.
var kinds = map[string]func() any{
	"apps/v1, Kind=Deployment":                         func() any { return &appsv1.Deployment{} },
	"v1, Kind=Service":                                 func() any { return &corev1.Service{} },
	"v1, Kind=ConfigMap":                               func() any { return &corev1.ConfigMap{} },
	"v1, Kind=Secret":                                  func() any { return &corev1.Secret{} },
	"v1, Kind=ServiceAccount":                          func() any { return &corev1.ServiceAccount{} },
	"autoscaling/v2, Kind=HorizontalPodAutoscaler":     func() any { return &autoscalingv2.HorizontalPodAutoscaler{} },
	"policy/v1, Kind=PodDisruptionBudget":              func() any { return &policyv1.PodDisruptionBudget{} },
	"networking.k8s.io/v1, Kind=Ingress":               func() any { return &networkingv1.Ingress{} },
	"monitoring.coreos.com/v1, Kind=ServiceMonitor":    func() any { return &monitoringv1.ServiceMonitor{} },
	"serving.kserve.io/v1beta1, Kind=InferenceService": func() any { return &InferenceService{} },
}
