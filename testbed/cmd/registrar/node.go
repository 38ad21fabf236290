package main

// The Node a kubelet registers: its own labels and the --node-labels it was
// given, its --register-with-taints, and capacity and allocatable as the
// kubelet computes them from the machine and its reservations (nodeadm's,
// bootstrap.sh's and Bottlerocket's defaults where the user data sets none).

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math"
	"math/big"
	"os"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	kubeletapis "k8s.io/kubelet/pkg/apis"
)

// validate refuses what makes a kubelet exit at start: --node-labels in
// the kubernetes.io namespaces that are not the kubelet's own (the check
// of the kubelet's ValidateKubeletFlags), invalid label names or values,
// and a NodeConfig for another cluster.
func (k *kubeletSettings) validate(cluster string) error {
	if k.ClusterName != "" && k.ClusterName != cluster {
		return fmt.Errorf("the user data joins cluster %q, not %q", k.ClusterName, cluster)
	}
	var unknown, invalid []string
	for key, v := range k.Labels {
		if isKubernetesLabel(key) && !kubeletapis.IsKubeletLabel(key) {
			unknown = append(unknown, key)
		}
		for _, e := range append(validation.IsQualifiedName(key), validation.IsValidLabelValue(v)...) {
			invalid = append(invalid, fmt.Sprintf("%s=%s: %s", key, v, e))
		}
	}
	sort.Strings(unknown)
	sort.Strings(invalid)
	if len(unknown) > 0 {
		return fmt.Errorf("unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: %v", unknown)
	}
	if len(invalid) > 0 {
		return fmt.Errorf("invalid --node-labels: %s", strings.Join(invalid, "; "))
	}
	return nil
}

// isKubernetesLabel: the label is in a kubernetes.io or k8s.io namespace.
func isKubernetesLabel(key string) bool {
	ns, _, ok := strings.Cut(key, "/")
	if !ok {
		return false
	}
	for _, d := range []string{"kubernetes.io", "k8s.io"} {
		if ns == d || strings.HasSuffix(ns, "."+d) {
			return true
		}
	}
	return false
}

// maxPods is the kubelet's max pods: the user data's, else the ENI limit
// the bootstrap computes (ENIs × (addresses per ENI − 1) + 2).
func (k *kubeletSettings) maxPods(it *instanceType) int64 {
	if k.MaxPods != nil {
		return *k.MaxPods
	}
	return it.ENIs*(it.IPv4PerENI-1) + 2
}

// kubeReserved is the EKS bootstraps' default, overridden key by key by
// the user data's: CPU by core count (6% of the first core, 1% of the
// second, 0.5% of the next two, 0.25% of the rest), memory 11 MiB per pod
// plus 255 MiB, 1 GiB of disk.
func (k *kubeletSettings) kubeReserved(vcpus, pods int64) corev1.ResourceList {
	var milli int64
	for _, band := range []struct {
		start, end int64
		fraction   float64
	}{{0, 1000, 0.06}, {1000, 2000, 0.01}, {2000, 4000, 0.005}, {4000, 1 << 31, 0.0025}} {
		if cpu := vcpus * 1000; cpu >= band.start {
			width := min(cpu, band.end) - band.start
			milli += int64(float64(width) * band.fraction)
		}
	}
	out := corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewMilliQuantity(milli, resource.DecimalSI),
		corev1.ResourceMemory:           resource.MustParse(fmt.Sprintf("%dMi", 11*pods+255)),
		corev1.ResourceEphemeralStorage: resource.MustParse("1Gi"),
	}
	for name, q := range quantities(k.KubeReserved) {
		out[name] = q
	}
	return out
}

func quantities(m map[string]string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for k, v := range m {
		if q, err := resource.ParseQuantity(v); err == nil {
			out[corev1.ResourceName(k)] = q
		}
	}
	return out
}

// evictionHard is the kubelet's hard eviction thresholds for memory and
// the node filesystem: the user data's, else the kubelet's defaults
// (memory.available<100Mi, nodefs.available<10%).
func (k *kubeletSettings) evictionHard(capacity corev1.ResourceList) corev1.ResourceList {
	thresholds := map[string]string{"memory.available": "100Mi", "nodefs.available": "10%"}
	if len(k.EvictionHard) > 0 {
		thresholds = k.EvictionHard
	}
	out := corev1.ResourceList{}
	for signal, resourceName := range map[string]corev1.ResourceName{
		"memory.available": corev1.ResourceMemory,
		"nodefs.available": corev1.ResourceEphemeralStorage,
	} {
		v, ok := thresholds[signal]
		if !ok {
			continue
		}
		if pct, isPct := strings.CutSuffix(v, "%"); isPct {
			var p float64
			if _, err := fmt.Sscanf(pct, "%g", &p); err == nil {
				c := capacity[resourceName]
				out[resourceName] = *resource.NewQuantity(int64(float64(c.Value())*p/100), resource.BinarySI)
			}
			continue
		}
		if q, err := resource.ParseQuantity(v); err == nil {
			out[resourceName] = q
		}
	}
	return out
}

func (r *registrar) kubeletNode(inst *instance, it *instanceType, k *kubeletSettings, rootGiB int64) *corev1.Node {
	name := inst.PrivateDNS
	if name == "" {
		name = inst.ID
	}
	arch := map[string]string{"x86_64": "amd64", "arm64": "arm64"}[inst.Architecture]
	if arch == "" {
		arch = "amd64"
	}
	labels := map[string]string{
		corev1.LabelHostname:   name,
		corev1.LabelOSStable:   "linux",
		corev1.LabelArchStable: arch,
		kubeletapis.LabelOS:    "linux",
		kubeletapis.LabelArch:  arch,
	}
	for key, v := range k.Labels {
		labels[key] = v
	}
	pods := k.maxPods(it)
	// What the kernel reports, as Karpenter estimates it.
	memoryMiB := it.MemoryMiB - int64(math.Ceil(float64(it.MemoryMiB)*r.opts.memoryOverheadPercent/100))
	memory := memoryMiB << 20
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewQuantity(it.VCPUs, resource.DecimalSI),
		corev1.ResourceMemory:           *resource.NewQuantity(memory, resource.BinarySI),
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(rootGiB<<30, resource.BinarySI),
		corev1.ResourcePods:             *resource.NewQuantity(pods, resource.DecimalSI),
		"hugepages-1Gi":                 resource.MustParse("0"),
		"hugepages-2Mi":                 resource.MustParse("0"),
	}
	for _, g := range it.GPUs {
		if strings.EqualFold(g.Manufacturer, "NVIDIA") {
			capacity["nvidia.com/gpu"] = *resource.NewQuantity(g.Count, resource.DecimalSI)
		}
	}
	allocatable := capacity.DeepCopy()
	for _, reserved := range []corev1.ResourceList{
		k.kubeReserved(it.VCPUs, pods), quantities(k.SystemReserved), k.evictionHard(capacity),
	} {
		for name, q := range reserved {
			if a, ok := allocatable[name]; ok {
				a.Sub(q)
				if a.Sign() < 0 {
					a = resource.MustParse("0")
				}
				allocatable[name] = a
			}
		}
	}
	taints := append([]corev1.Taint{{Key: uninitializedTaint, Value: "true", Effect: corev1.TaintEffectNoSchedule}}, k.Taints...)
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:   name,
			Labels: labels,
			Annotations: map[string]string{
				kwokAnnotation: "fake",
				"volumes.kubernetes.io/controller-managed-attach-detach": "true",
			},
		},
		Spec: corev1.NodeSpec{
			ProviderID: fmt.Sprintf("aws:///%s/%s", inst.Zone, inst.ID),
			Taints:     taints,
		},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: allocatable,
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: inst.PrivateIP},
				{Type: corev1.NodeHostName, Address: name},
				{Type: corev1.NodeInternalDNS, Address: name},
			},
			NodeInfo: corev1.NodeSystemInfo{
				Architecture:            arch,
				OperatingSystem:         "linux",
				KubeletVersion:          r.opts.kubeletVersion,
				ContainerRuntimeVersion: r.opts.containerdVer,
				OSImage:                 map[string]string{"al2023": "Amazon Linux 2023", "al2": "Amazon Linux 2", "bottlerocket": "Bottlerocket OS"}[k.Family],
			},
		},
	}
}

// nodeAuthority signs kubelet client certificates, as the cluster's
// certificate signer does for a kubelet's bootstrap request.
type nodeAuthority struct {
	cert *x509.Certificate
	key  crypto.Signer
}

func loadAuthority(certPath, keyPath string) (*nodeAuthority, error) {
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, err
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, fmt.Errorf("%s or %s is not PEM", certPath, keyPath)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, err
	}
	key, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, err
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%s is not a signing key", keyPath)
	}
	return &nodeAuthority{cert: cert, key: signer}, nil
}

func (a *nodeAuthority) kubeletCertificate(node string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	sn, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, key.Public(), a.key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}
