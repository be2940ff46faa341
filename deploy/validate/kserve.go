package main

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The KServe InferenceService (serving.kserve.io/v1beta1) as far as the chart renders it: the
// predictor with `model` (modelFormat, runtime, storageUri, protocolVersion) or its own
// containers, and the scaling fields. Field names and nesting follow KServe's Go API
// (pkg/apis/serving/v1beta1: PredictorSpec inlines a PodSpec and ComponentExtensionSpec, ModelSpec
// inlines PredictorExtensionSpec, which inlines a Container); the Kubernetes parts are
// Kubernetes' own types. KServe's module itself is not imported: it pulls in Knative and Istio
// and does not build beside the k8s.io/api release used here. Fields the chart never writes
// (explainer, transformer, the per-framework predictors) are rejected as unknown.

type InferenceService struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              InferenceServiceSpec `json:"spec"`
}

type InferenceServiceSpec struct {
	Predictor PredictorSpec `json:"predictor"`
}

type PredictorSpec struct {
	Model *ModelSpec `json:"model,omitempty"`
	corev1.PodSpec
	ComponentExtensionSpec
}

type ComponentExtensionSpec struct {
	MinReplicas          *int32                     `json:"minReplicas,omitempty"`
	MaxReplicas          int32                      `json:"maxReplicas,omitempty"`
	ScaleTarget          *int32                     `json:"scaleTarget,omitempty"`
	ScaleMetric          *string                    `json:"scaleMetric,omitempty"`
	ContainerConcurrency *int64                     `json:"containerConcurrency,omitempty"`
	TimeoutSeconds       *int64                     `json:"timeout,omitempty"`
	CanaryTrafficPercent *int64                     `json:"canaryTrafficPercent,omitempty"`
	Labels               map[string]string          `json:"labels,omitempty"`
	Annotations          map[string]string          `json:"annotations,omitempty"`
	DeploymentStrategy   *appsv1.DeploymentStrategy `json:"deploymentStrategy,omitempty"`
}

type ModelSpec struct {
	ModelFormat ModelFormat `json:"modelFormat"`
	Runtime     *string     `json:"runtime,omitempty"`
	PredictorExtensionSpec
}

type ModelFormat struct {
	Name    string  `json:"name"`
	Version *string `json:"version,omitempty"`
}

type PredictorExtensionSpec struct {
	StorageURI      *string `json:"storageUri,omitempty"`
	RuntimeVersion  *string `json:"runtimeVersion,omitempty"`
	ProtocolVersion *string `json:"protocolVersion,omitempty"`
	corev1.Container
}
