package main

// What runs, and with which flags: a cluster as kubeadm would configure it
// (RBAC and Node authorization, the default admission plugins plus
// NodeRestriction, service-account token signing, per-controller service
// accounts), bound to 127.0.0.1 only.

import (
	"fmt"
	"path/filepath"
	"strings"
)

// serviceCIDR is EKS's default service range; kube-dns takes its .10.
const (
	serviceCIDR = "10.100.0.0/16"
	clusterDNS  = "10.100.0.10"
)

// controllers are kube-controller-manager's controllers a cluster that runs
// workloads relies on. Left out: the ones that need a cloud provider or
// extra signing material (node IPAM, service load balancers, CSR signing)
// and the ones no test exercises.
var controllers = []string{
	"clusterrole-aggregation-controller",
	"cronjob-controller",
	"daemonset-controller",
	"deployment-controller",
	"disruption-controller",
	"endpointslice-controller",
	"garbage-collector-controller",
	"job-controller",
	"namespace-controller",
	"node-lifecycle-controller",
	"persistentvolume-attach-detach-controller",
	"persistentvolume-binder-controller",
	"persistentvolume-protection-controller",
	"persistentvolumeclaim-protection-controller",
	"pod-garbage-collector-controller",
	"replicaset-controller",
	"resourcequota-controller",
	"root-ca-certificate-publisher-controller",
	"serviceaccount-controller",
	"statefulset-controller",
	"taint-eviction-controller",
	"ttl-after-finished-controller",
}

// component is one process of the control plane.
type component struct {
	Name string   `json:"name"`
	Args []string `json:"args"`
	// Health is the URL that answers 200 once it is ready ("" if none).
	Health string `json:"health"`
}

// layout is everything the components' flags are made of.
type layout struct {
	Dir   string         `json:"dir"`
	Data  string         `json:"data"`
	Bin   string         `json:"bin"`
	Ports map[string]int `json:"ports"`
	// Options as given to `up`.
	EC2Endpoint string   `json:"ec2_endpoint,omitempty"`
	ClusterName string   `json:"cluster_name,omitempty"`
	Region      string   `json:"region,omitempty"`
	GracePeriod string   `json:"node_monitor_grace_period"`
	Extra       []string `json:"extra,omitempty"`
}

func (l *layout) pki(f string) string { return filepath.Join(l.Dir, "pki", f) }
func (l *layout) bin(f string) string { return filepath.Join(l.Bin, f) }
func (l *layout) server() string      { return fmt.Sprintf("https://127.0.0.1:%d", l.Ports["apiserver"]) }
func (l *layout) kubeconfig(n string) string {
	if n == "admin" {
		return filepath.Join(l.Dir, "kubeconfig")
	}
	return l.pki(n + ".kubeconfig")
}

// extra returns the flags given for component name with --extra NAME:FLAG.
func (l *layout) extra(name string) []string {
	var out []string
	for _, e := range l.Extra {
		if n, flag, ok := strings.Cut(e, ":"); ok && n == name {
			out = append(out, flag)
		}
	}
	return out
}

func (l *layout) components() []component {
	p := l.Ports
	out := []component{
		{
			Name: "etcd",
			Args: []string{
				l.bin("etcd"),
				"--name=testbed",
				"--data-dir=" + filepath.Join(l.Data, "etcd"),
				fmt.Sprintf("--listen-client-urls=http://127.0.0.1:%d", p["etcd"]),
				fmt.Sprintf("--advertise-client-urls=http://127.0.0.1:%d", p["etcd"]),
				fmt.Sprintf("--listen-peer-urls=http://127.0.0.1:%d", p["etcd-peer"]),
				fmt.Sprintf("--initial-advertise-peer-urls=http://127.0.0.1:%d", p["etcd-peer"]),
				fmt.Sprintf("--initial-cluster=testbed=http://127.0.0.1:%d", p["etcd-peer"]),
				fmt.Sprintf("--listen-metrics-urls=http://127.0.0.1:%d", p["etcd-metrics"]),
				// The data lives in tmpfs and dies with the test: fsync buys nothing.
				"--unsafe-no-fsync",
				"--quota-backend-bytes=8589934592",
				"--log-level=warn",
			},
			Health: fmt.Sprintf("http://127.0.0.1:%d/health", p["etcd-metrics"]),
		},
		{
			Name: "kube-apiserver",
			Args: []string{
				l.bin("kube-apiserver"),
				fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", p["etcd"]),
				"--bind-address=127.0.0.1",
				"--advertise-address=127.0.0.1",
				fmt.Sprintf("--secure-port=%d", p["apiserver"]),
				"--tls-cert-file=" + l.pki("apiserver.crt"),
				"--tls-private-key-file=" + l.pki("apiserver.key"),
				"--client-ca-file=" + l.pki("ca.crt"),
				"--service-account-key-file=" + l.pki("sa.pub"),
				"--service-account-signing-key-file=" + l.pki("sa.key"),
				"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
				"--authorization-mode=Node,RBAC",
				"--enable-admission-plugins=NodeRestriction",
				"--service-cluster-ip-range=" + serviceCIDR,
				"--allow-privileged=true",
				"--profiling=false",
				"--audit-log-path=" + filepath.Join(l.Dir, "audit.log"),
				"--audit-policy-file=" + filepath.Join(l.Dir, "audit-policy.yaml"),
				"--audit-log-maxsize=200",
				"--audit-log-maxbackup=2",
			},
			Health: l.server() + "/readyz",
		},
		{
			Name: "kube-controller-manager",
			Args: []string{
				l.bin("kube-controller-manager"),
				"--kubeconfig=" + l.kubeconfig("kube-controller-manager"),
				"--authentication-kubeconfig=" + l.kubeconfig("kube-controller-manager"),
				"--authorization-kubeconfig=" + l.kubeconfig("kube-controller-manager"),
				"--bind-address=127.0.0.1",
				fmt.Sprintf("--secure-port=%d", p["kube-controller-manager"]),
				"--leader-elect=false",
				"--use-service-account-credentials=true",
				"--service-account-private-key-file=" + l.pki("sa.key"),
				"--root-ca-file=" + l.pki("ca.crt"),
				"--controllers=" + strings.Join(controllers, ","),
				"--node-monitor-grace-period=" + l.GracePeriod,
			},
			Health: fmt.Sprintf("https://127.0.0.1:%d/healthz", p["kube-controller-manager"]),
		},
		{
			Name: "kube-scheduler",
			Args: []string{
				l.bin("kube-scheduler"),
				"--kubeconfig=" + l.kubeconfig("kube-scheduler"),
				"--authentication-kubeconfig=" + l.kubeconfig("kube-scheduler"),
				"--authorization-kubeconfig=" + l.kubeconfig("kube-scheduler"),
				"--bind-address=127.0.0.1",
				fmt.Sprintf("--secure-port=%d", p["kube-scheduler"]),
				"--leader-elect=false",
			},
			Health: fmt.Sprintf("https://127.0.0.1:%d/healthz", p["kube-scheduler"]),
		},
		{
			Name: "kwok",
			Args: []string{
				l.bin("kwok"),
				"--kubeconfig=" + l.kubeconfig("kwok"),
				"--config=" + filepath.Join(l.Dir, "kwok.yaml"),
				// The registrar marks the Nodes KWOK keeps alive, as a kubelet
				// runs on its own machine only.
				"--manage-nodes-with-annotation-selector=" + kwokAnnotation + "=fake",
				"--node-lease-duration-seconds=40",
				fmt.Sprintf("--server-address=127.0.0.1:%d", p["kwok"]),
				"--cidr=10.64.0.0/12",
			},
			Health: fmt.Sprintf("http://127.0.0.1:%d/healthz", p["kwok"]),
		},
	}
	if l.EC2Endpoint != "" {
		out = append(out, component{
			Name: "registrar",
			Args: []string{
				l.bin("registrar"),
				"--kubeconfig=" + l.kubeconfig("admin"),
				"--ca-cert=" + l.pki("ca.crt"),
				"--ca-key=" + l.pki("ca.key"),
				"--ec2-endpoint=" + l.EC2Endpoint,
				"--cluster-name=" + l.ClusterName,
				"--region=" + l.Region,
				"--cluster-dns=" + clusterDNS,
			},
		})
	}
	for i := range out {
		out[i].Args = append(out[i].Args, l.extra(out[i].Name)...)
	}
	return out
}

// kwokAnnotation selects the Nodes KWOK manages.
const kwokAnnotation = "kwok.x-k8s.io/node"

// auditPolicy records the metadata of every write, and of every request of
// dovetail's service account: the tests read who wrote what from it (a
// leader that kept writing after losing its lease, the write a crash
// interrupted). dovetail's writes of NodeClaims and Nodes carry their
// request body, so a test can tell one step of a NodeClaim's life from the
// next (launched, registered, initialized, drained, ...) and kill the
// leader right after it. Reads, Lease renewals and Events of the other
// components are left out to keep the log small at scale.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Request
  userGroups: ["system:serviceaccounts:dovetail"]
  verbs: ["create", "update", "patch", "delete"]
  resources:
  - group: "karpenter.sh"
    resources: ["nodeclaims", "nodeclaims/status"]
  - group: ""
    resources: ["nodes"]
- level: Metadata
  userGroups: ["system:serviceaccounts:dovetail"]
- level: None
  verbs: ["get", "list", "watch"]
- level: None
  resources:
  - group: "coordination.k8s.io"
    resources: ["leases"]
  - group: ""
    resources: ["events"]
  - group: "events.k8s.io"
    resources: ["events"]
- level: Metadata
`
