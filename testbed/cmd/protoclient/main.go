// Command protoclient is a client-go program that speaks only protobuf: it
// sends Kubernetes' protobuf encoding and accepts nothing else in reply, as
// a typed clientset configured for protobuf does. It creates, reads,
// lists, watches, updates and deletes built-in objects in a namespace of
// its own, checks that every answer says what was sent, and prints one line
// per step. A served API that cannot read or write protobuf fails it.
//
//	protoclient --kubeconfig FILE [--namespace NAME]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"reflect"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the API server to talk to")
	namespace := flag.String("namespace", "protoclient", "the namespace to create and work in")
	flag.Parse()
	if err := run(*kubeconfig, *namespace); err != nil {
		fmt.Fprintln(os.Stderr, "protoclient:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, ns string) error {
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	config.ContentType = "application/vnd.kubernetes.protobuf"
	config.AcceptContentTypes = "application/vnd.kubernetes.protobuf"
	config.UserAgent = "protoclient"
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	step := func(format string, args ...any) { fmt.Printf(format+"\n", args...) }

	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"team": "proto"}},
	}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create namespace: %w", err)
	}
	step("created namespace %s", ns)

	// A watch opened before the writes sees them as protobuf frames (only
	// the one configmap: a cluster's controllers add their own, such as
	// kube-root-ca.crt).
	w, err := client.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=settings"})
	if err != nil {
		return fmt.Errorf("watch configmaps: %w", err)
	}
	defer w.Stop()

	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "settings", Annotations: map[string]string{"a": "b"}},
		Data:       map[string]string{"mode": "fast", "empty": ""},
		BinaryData: map[string][]byte{"blob": {0, 1, 2, 255}},
	}
	got, err := client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create configmap: %w", err)
	}
	if !reflect.DeepEqual(got.Data, cm.Data) || !reflect.DeepEqual(got.BinaryData, cm.BinaryData) {
		return fmt.Errorf("configmap came back as %v %v, sent %v %v", got.Data, got.BinaryData, cm.Data, cm.BinaryData)
	}
	if got.UID == "" || got.ResourceVersion == "" || got.CreationTimestamp.IsZero() {
		return fmt.Errorf("configmap came back without uid, resourceVersion or creationTimestamp: %+v", got.ObjectMeta)
	}
	step("created configmap %s/%s (uid %s)", ns, got.Name, got.UID)

	select {
	case ev := <-w.ResultChan():
		added, ok := ev.Object.(*corev1.ConfigMap)
		if ev.Type != watch.Added || !ok || added.Name != "settings" || added.Data["mode"] != "fast" {
			return fmt.Errorf("watch: expected ADDED configmap settings, got %s %#v", ev.Type, ev.Object)
		}
		step("watched ADDED configmap %s", added.Name)
	case <-ctx.Done():
		return fmt.Errorf("watch: no event for the created configmap")
	}

	secret, err := client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "token"},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{"password": []byte("s3cr3t\x00\xff")},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create secret: %w", err)
	}
	if string(secret.Data["password"]) != "s3cr3t\x00\xff" || secret.Type != corev1.SecretTypeOpaque {
		return fmt.Errorf("secret came back as %q %q", secret.Data["password"], secret.Type)
	}
	step("created secret %s/%s", ns, secret.Name)

	replicas := int32(0)
	grace := int64(45)
	deployment := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{"app": "web"}},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Strategy: appsv1.DeploymentStrategy{
				Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{
					MaxSurge:       &intstr.IntOrString{Type: intstr.String, StrVal: "25%"},
					MaxUnavailable: &intstr.IntOrString{Type: intstr.Int, IntVal: 1},
				},
			},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: &grace,
					Containers: []corev1.Container{{
						Name:  "web",
						Image: "nginx:1.27",
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU:    resource.MustParse("250m"),
							corev1.ResourceMemory: resource.MustParse("512Mi"),
						}},
						Ports: []corev1.ContainerPort{{ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
							HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")},
						}},
						VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}},
					}},
					Volumes: []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
				},
			},
		},
	}
	d, err := client.AppsV1().Deployments(ns).Create(ctx, deployment, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create deployment: %w", err)
	}
	d, err = client.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get deployment: %w", err)
	}
	c := d.Spec.Template.Spec.Containers[0]
	switch {
	case d.Spec.Replicas == nil || *d.Spec.Replicas != 0:
		return fmt.Errorf("deployment replicas came back as %v, sent 0", d.Spec.Replicas)
	case c.Resources.Requests.Cpu().String() != "250m" || c.Resources.Requests.Memory().String() != "512Mi":
		return fmt.Errorf("deployment requests came back as %v", c.Resources.Requests)
	case d.Spec.Strategy.RollingUpdate == nil || d.Spec.Strategy.RollingUpdate.MaxSurge.String() != "25%" ||
		d.Spec.Strategy.RollingUpdate.MaxUnavailable.String() != "1":
		return fmt.Errorf("deployment strategy came back as %+v", d.Spec.Strategy)
	case c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Port.String() != "http":
		return fmt.Errorf("deployment probe came back as %+v", c.ReadinessProbe)
	case len(d.Spec.Template.Spec.Volumes) != 1 || d.Spec.Template.Spec.Volumes[0].EmptyDir == nil:
		return fmt.Errorf("deployment volumes came back as %+v", d.Spec.Template.Spec.Volumes)
	case d.Spec.Template.Spec.TerminationGracePeriodSeconds == nil || *d.Spec.Template.Spec.TerminationGracePeriodSeconds != 45:
		return fmt.Errorf("deployment grace period came back as %v", d.Spec.Template.Spec.TerminationGracePeriodSeconds)
	}
	step("created and read back deployment %s/%s", ns, d.Name)

	list, err := client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list configmaps: %w", err)
	}
	listed := false
	for _, item := range list.Items {
		listed = listed || (item.Name == "settings" && item.Data["mode"] == "fast")
	}
	if !listed || list.ResourceVersion == "" {
		return fmt.Errorf("configmap list came back without settings (%d items, resourceVersion %q)", len(list.Items), list.ResourceVersion)
	}
	step("listed configmap settings")

	got.Data["mode"] = "slow"
	if got, err = client.CoreV1().ConfigMaps(ns).Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update configmap: %w", err)
	}
	if got.Data["mode"] != "slow" {
		return fmt.Errorf("updated configmap came back as %v", got.Data)
	}
	step("updated configmap %s", got.Name)

	if _, err := client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: "builder"},
	}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create serviceaccount: %w", err)
	}
	seconds := int64(600)
	token, err := client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "builder", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create token: %w", err)
	}
	if token.Status.Token == "" || token.Status.ExpirationTimestamp.IsZero() {
		return fmt.Errorf("token request came back as %+v", token.Status)
	}
	step("requested a token for serviceaccount %s/builder", ns)

	_, err = client.CoreV1().ConfigMaps(ns).Get(ctx, "missing", metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("get missing configmap: expected NotFound, got %v", err)
	}
	step("read NotFound for a missing configmap: %v", err)

	if err := client.CoreV1().ConfigMaps(ns).Delete(ctx, "settings", metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("delete configmap: %w", err)
	}
	step("deleted configmap settings")
	return nil
}
