package devenv

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/types/known/fieldmaskpb"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/fleet"
	"github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/reqctx"
	"github.com/gpuplane/gpuplane/internal/server/api"
)

// The second dev host cluster (gpuplane-dev --second-host-cluster): another
// local kube-apiserver with two shared nodes of 8 GPUs each, registered as
// host cluster SecondHostCluster through its kubeconfig Secret, the way an
// admin registers any cluster gpuplane does not run in.
const (
	SecondHostCluster = "gpu-east"
	// DevKubeconfigSecret holds the second cluster's kubeconfig in
	// gpuplane's namespace on the first.
	DevKubeconfigSecret = "gpu-east-kubeconfig"
)

// DefaultClusterLabels and SecondClusterLabels describe the dev host
// clusters for placement.
var (
	DefaultClusterLabels = map[string]string{"region": "eu-west", "gpu-model": "a100"}
	SecondClusterLabels  = map[string]string{"region": "us-east", "gpu-model": "h100"}
)

// SecondClusterNodes are the second dev host cluster's fake nodes.
var SecondClusterNodes = []FakeNode{
	{Name: "east-gpu-1", Pool: names.SharedPool, GPUs: 8, CPU: "96", Mem: "768Gi"},
	{Name: "east-gpu-2", Pool: names.SharedPool, GPUs: 8, CPU: "96", Mem: "768Gi"},
}

// KAIStandIn writes the Deployment KAI Scheduler's chart installs as its
// operator (label app=kai-operator, image tagged with KAI's version),
// which is where gpuplane reads KAI's version from. Nothing runs it: the
// dev host clusters have no kubelet, and KAI itself is not installed
// (its Queue CRD is gpuplane's test fixture). The tag says so.
func KAIStandIn(ctx context.Context, kube kubernetes.Interface) error {
	ns := "kai-scheduler"
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	labels := map[string]string{"app": "kai-operator"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "kai-operator", Namespace: ns, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](0),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "operator", Image: "registry.invalid/kai-scheduler/operator:v0.0.0-dev-stand-in"}}},
			},
		},
	}
	if _, err := kube.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// StoreKubeconfigSecret writes kubeconfig as Secret name (key
// "kubeconfig") in namespace of the cluster kube reaches.
func StoreKubeconfigSecret(ctx context.Context, kube kubernetes.Interface, namespace, name string, kubeconfig []byte) error {
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Data: map[string][]byte{fleet.DefaultKubeconfigKey: kubeconfig}}
	if _, err := kube.CoreV1().Secrets(namespace).Create(ctx, secret, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		_, err = kube.CoreV1().Secrets(namespace).Update(ctx, secret, metav1.UpdateOptions{})
		return err
	} else if err != nil {
		return err
	}
	return nil
}

// SeedFleet labels the default host cluster and, with second, registers
// the second dev host cluster (SHARED only) through the real API as alice.
func SeedFleet(ctx context.Context, a *api.API, second bool) error {
	ctx = reqctx.WithPrincipal(ctx, Principal("alice"))
	hcs := &api.HostClusters{API: a}
	def, err := hcs.GetHostCluster(ctx, &pb.GetHostClusterRequest{Name: "hostClusters/" + fleet.DefaultHostCluster})
	if err != nil {
		return fmt.Errorf("default host cluster: %w", err)
	}
	if len(def.GetLabels()) == 0 {
		if _, err := hcs.UpdateHostCluster(ctx, &pb.UpdateHostClusterRequest{
			HostCluster: &pb.HostCluster{Name: def.GetName(), Etag: def.GetEtag(), DisplayName: "Dev cluster (eu-west)", Labels: DefaultClusterLabels},
			UpdateMask:  &fieldmaskpb.FieldMask{Paths: []string{"display_name", "labels"}},
		}); err != nil {
			return fmt.Errorf("label the default host cluster: %w", err)
		}
	}
	if !second {
		return nil
	}
	_, err = hcs.CreateHostCluster(ctx, &pb.CreateHostClusterRequest{
		HostClusterId: SecondHostCluster, RequestId: "seed-" + SecondHostCluster,
		HostCluster: &pb.HostCluster{DisplayName: "Second dev cluster (us-east)", Labels: SecondClusterLabels,
			Tiers:      []pb.IsolationTier{pb.IsolationTier_SHARED},
			Connection: &pb.HostCluster_KubeconfigSecret{KubeconfigSecret: &pb.SecretReference{Name: DevKubeconfigSecret}}},
	})
	if errs.KindOf(err) == errs.KindAlreadyExists {
		return nil
	}
	return err
}
