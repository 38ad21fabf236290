// Command registrar plays the machines of a cluster on the testbed: for
// each instance an EC2 API (moto) runs for the cluster, it registers the
// Node the instance's kubelet would register, from the instance's own user
// data, with the kubelet's own credentials (so the Node authorizer and
// NodeRestriction judge it), then plays the cloud controller manager's part
// (zone, region and instance-type labels; the uninitialized taint lifted).
// KWOK keeps the Node alive from then on. When the instance stops or
// terminates, the kubelet falls silent: KWOK lets go of the Node, the node
// lifecycle controller marks it NotReady, and the registrar, as the cloud
// node lifecycle controller, deletes a NotReady Node whose instance is gone.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	kwokAnnotation     = "kwok.x-k8s.io/node"
	uninitializedTaint = "node.cloudprovider.kubernetes.io/uninitialized"
	shutdownTaint      = "node.cloudprovider.kubernetes.io/shutdown"
)

type options struct {
	kubeconfig, caCert, caKey     string
	endpoint, cluster, region     string
	clusterDNS                    string
	bootDelay, poll, initDelay    time.Duration
	memoryOverheadPercent         float64
	kubeletVersion, containerdVer string
}

type registrar struct {
	opts  options
	ec2   *ec2Client
	admin kubernetes.Interface
	base  *rest.Config
	ca    *nodeAuthority
	types map[string]*instanceType
	// registered: instance id → Node name, for the instances whose kubelet
	// has registered (a kubelet registers once per boot).
	registered map[string]string
	// refused: instances whose kubelet would not start, with the reason,
	// logged once.
	refused map[string]string
}

func main() {
	var o options
	flag.StringVar(&o.kubeconfig, "kubeconfig", "", "an admin kubeconfig (for the cloud controller's part)")
	flag.StringVar(&o.caCert, "ca-cert", "", "the cluster CA certificate")
	flag.StringVar(&o.caKey, "ca-key", "", "the cluster CA key, to give each kubelet its client certificate")
	flag.StringVar(&o.endpoint, "ec2-endpoint", "", "the EC2 API")
	flag.StringVar(&o.cluster, "cluster-name", "", "instances tagged kubernetes.io/cluster/NAME=owned are the cluster's")
	flag.StringVar(&o.region, "region", "us-east-1", "the EC2 region")
	flag.StringVar(&o.clusterDNS, "cluster-dns", "", "the cluster DNS address a kubelet without one is given")
	flag.DurationVar(&o.bootDelay, "boot-delay", 3*time.Second, "from launch to the kubelet's registration")
	flag.DurationVar(&o.initDelay, "init-delay", time.Second, "from registration to the cloud controller's initialization")
	flag.DurationVar(&o.poll, "poll", time.Second, "how often EC2 is listed")
	flag.Float64Var(&o.memoryOverheadPercent, "memory-overhead-percent", 7.5, "memory the hypervisor and kernel keep from the kubelet, in percent")
	flag.StringVar(&o.kubeletVersion, "kubelet-version", "v1.36.3", "the kubelet version Nodes report")
	flag.StringVar(&o.containerdVer, "container-runtime", "containerd://2.1.4", "the container runtime Nodes report")
	flag.Parse()
	if o.kubeconfig == "" || o.endpoint == "" || o.cluster == "" || o.caCert == "" || o.caKey == "" {
		log.Fatal("--kubeconfig, --ca-cert, --ca-key, --ec2-endpoint and --cluster-name are required")
	}
	r, err := newRegistrar(o)
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := r.adopt(ctx); err != nil {
		log.Fatalf("listing Nodes: %v", err)
	}
	log.Printf("registering Nodes for the instances of cluster %s at %s", o.cluster, o.endpoint)
	for {
		if err := r.pass(ctx); err != nil && ctx.Err() == nil {
			log.Printf("pass: %v", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(o.poll):
		}
	}
}

func newRegistrar(o options) (*registrar, error) {
	base, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return nil, err
	}
	base.UserAgent = "registrar (cloud-node-lifecycle)"
	admin, err := kubernetes.NewForConfig(base)
	if err != nil {
		return nil, err
	}
	ca, err := loadAuthority(o.caCert, o.caKey)
	if err != nil {
		return nil, err
	}
	return &registrar{
		opts: o, ec2: newEC2(o.endpoint, o.region), admin: admin, base: base, ca: ca,
		types: map[string]*instanceType{}, registered: map[string]string{}, refused: map[string]string{},
	}, nil
}

// adopt learns the Nodes registered before a restart, by provider ID.
func (r *registrar) adopt(ctx context.Context) error {
	nodes, err := r.admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, n := range nodes.Items {
		if id := instanceID(n.Spec.ProviderID); id != "" {
			r.registered[id] = n.Name
		}
	}
	return nil
}

func instanceID(providerID string) string {
	if !strings.HasPrefix(providerID, "aws://") {
		return ""
	}
	return providerID[strings.LastIndexByte(providerID, '/')+1:]
}

func (r *registrar) pass(ctx context.Context) error {
	instances, err := r.ec2.instances(ctx, r.opts.cluster)
	if err != nil {
		return err
	}
	var errs []error
	for i := range instances {
		inst := &instances[i]
		switch inst.State {
		case "pending", "running":
			if _, done := r.registered[inst.ID]; done || time.Since(inst.LaunchTime) < r.opts.bootDelay {
				continue
			}
			if _, refused := r.refused[inst.ID]; refused {
				continue
			}
			if err := r.register(ctx, inst); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", inst.ID, err))
			}
		default: // stopping, stopped, shutting-down, terminated
			if name, ok := r.registered[inst.ID]; ok {
				if err := r.gone(ctx, inst, name); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", inst.ID, err))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// register creates the instance's Node as its kubelet would, then
// initializes it as the cloud controller manager would.
func (r *registrar) register(ctx context.Context, inst *instance) error {
	encoded, err := r.ec2.userData(ctx, inst.ID)
	if err != nil {
		return err
	}
	settings, err := parseUserData(encoded)
	if err == nil {
		err = settings.validate(r.opts.cluster)
	}
	if err != nil {
		// The kubelet would not start: nothing registers, as on EC2.
		r.refused[inst.ID] = err.Error()
		log.Printf("%s: the kubelet does not start: %v", inst.ID, err)
		return nil
	}
	it, ok := r.types[inst.Type]
	if !ok {
		if it, err = r.ec2.instanceType(ctx, inst.Type); err != nil {
			return err
		}
		r.types[inst.Type] = it
	}
	rootGiB, err := r.rootVolumeGiB(ctx, inst, encoded)
	if err != nil {
		return err
	}
	node := r.kubeletNode(inst, it, settings, rootGiB)
	kubelet, err := r.kubeletClient(node.Name)
	if err != nil {
		return err
	}
	created, err := kubelet.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = kubelet.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("registering Node %s: %w", node.Name, err)
	}
	r.registered[inst.ID] = created.Name
	log.Printf("%s: kubelet registered Node %s (%s, %s pods, taints %v)", inst.ID, created.Name, inst.Type,
		created.Status.Capacity.Pods(), taintKeys(created.Spec.Taints))
	go r.initialize(context.WithoutCancel(ctx), inst, created.Name)
	return nil
}

// rootVolumeGiB is the size of the instance's root volume, as the kubelet
// sees its filesystem: the launch template's mapping for the root device
// (the template the instance names, or for moto, whose CreateFleet neither
// tags the instance with its template nor applies the template's block
// devices, the template with the instance's image and user data), else the
// volume attached as the root device.
func (r *registrar) rootVolumeGiB(ctx context.Context, inst *instance, userData string) (int64, error) {
	templates, err := r.ec2.templates(ctx)
	if err != nil {
		return 0, err
	}
	data, found := templates[inst.tag("aws:ec2launchtemplate:id")]
	if !found {
		for _, t := range templates {
			if t.ImageID == inst.ImageID && t.UserData == userData {
				data, found = t, true
				break
			}
		}
	}
	if found {
		for _, d := range data.Devices {
			if d.Device == inst.RootDeviceName && d.SizeGiB > 0 {
				return d.SizeGiB, nil
			}
		}
	}
	for _, v := range inst.Volumes {
		if v.Device == inst.RootDeviceName || len(inst.Volumes) == 1 {
			return r.ec2.volumeGiB(ctx, v.VolumeID)
		}
	}
	return 0, fmt.Errorf("no root volume")
}

// initialize is the cloud controller manager's node controller: it labels
// the Node with its zone, region and type and lifts the uninitialized taint.
func (r *registrar) initialize(ctx context.Context, inst *instance, name string) {
	time.Sleep(r.opts.initDelay)
	for attempt := 0; attempt < 20; attempt++ {
		node, err := r.admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		if err == nil {
			zone := inst.Zone
			region := zone[:len(zone)-1]
			for k, v := range map[string]string{
				corev1.LabelTopologyZone:            zone,
				corev1.LabelTopologyRegion:          region,
				corev1.LabelFailureDomainBetaZone:   zone,
				corev1.LabelFailureDomainBetaRegion: region,
				corev1.LabelInstanceTypeStable:      inst.Type,
				corev1.LabelInstanceType:            inst.Type,
			} {
				node.Labels[k] = v
			}
			var taints []corev1.Taint
			for _, t := range node.Spec.Taints {
				if t.Key != uninitializedTaint {
					taints = append(taints, t)
				}
			}
			node.Spec.Taints = taints
			if _, err = r.admin.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err == nil {
				return
			}
		}
		log.Printf("%s: initializing Node %s: %v", inst.ID, name, err)
		time.Sleep(500 * time.Millisecond)
	}
}

// gone: the instance stopped or terminated. Its kubelet falls silent: the
// registrar takes the Node's Lease over without renewing it, so KWOK, which
// renews only a lease it holds or one that has expired, stops renewing it
// and stops writing the Node's status (it leaves alone a Node whose lease
// another holds). Once the node lifecycle controller has marked the Node
// not Ready, a terminated instance's Node is deleted and a stopped one's
// tainted, as the cloud node lifecycle controller does.
func (r *registrar) gone(ctx context.Context, inst *instance, name string) error {
	node, err := r.admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if inst.State == "terminated" {
			delete(r.registered, inst.ID)
		}
		return nil
	}
	if err != nil {
		return err
	}
	if silenced, err := r.silence(ctx, inst, name); err != nil || silenced {
		return err
	}
	if node.DeletionTimestamp != nil {
		// Deleted already; a finalizer (the autoscaler's) holds it.
		return nil
	}
	if ready(node) {
		return nil
	}
	switch inst.State {
	case "terminated", "shutting-down":
		err := r.admin.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
		if err == nil || apierrors.IsNotFound(err) {
			log.Printf("%s is %s: deleted NotReady Node %s", inst.ID, inst.State, name)
			return nil
		}
		return err
	default:
		for _, t := range node.Spec.Taints {
			if t.Key == shutdownTaint {
				return nil
			}
		}
		node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: shutdownTaint, Effect: corev1.TaintEffectNoSchedule})
		_, err := r.admin.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
		return err
	}
}

// silenceHolder is the holder of the Lease of a Node whose instance is gone.
const silenceHolder = "registrar: instance gone"

// silence takes the Lease of Node name over, for a day from its last
// renewal (not renewed: the node lifecycle controller sees no heartbeat
// after it), and says whether it did so now.
func (r *registrar) silence(ctx context.Context, inst *instance, name string) (bool, error) {
	leases := r.admin.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	lease, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity == silenceHolder {
		return false, nil
	}
	holder, day := silenceHolder, int32(86400)
	lease.Spec.HolderIdentity = &holder
	lease.Spec.LeaseDurationSeconds = &day
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		return false, err
	}
	log.Printf("%s is %s: the kubelet of Node %s falls silent", inst.ID, inst.State, name)
	return true, nil
}

func ready(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func taintKeys(taints []corev1.Taint) []string {
	var out []string
	for _, t := range taints {
		out = append(out, t.Key)
	}
	return out
}

// kubeletClient is a client with the kubelet's identity for node name:
// system:node:NAME in system:nodes, as TLS bootstrapping gives it.
func (r *registrar) kubeletClient(name string) (kubernetes.Interface, error) {
	certPEM, keyPEM, err := r.ca.kubeletCertificate(name)
	if err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(r.base)
	cfg.TLSClientConfig.CertFile, cfg.TLSClientConfig.KeyFile = "", ""
	cfg.TLSClientConfig.CertData, cfg.TLSClientConfig.KeyData = certPEM, keyPEM
	cfg.UserAgent = fmt.Sprintf("kubelet/%s (linux/amd64) registrar", r.opts.kubeletVersion)
	return kubernetes.NewForConfig(cfg)
}

func init() {
	log.SetFlags(log.LstdFlags | log.Lmicroseconds | log.LUTC)
	log.SetOutput(os.Stderr)
}
