package main

// The supervisor: starts the components in order, each once the one before
// is healthy, then answers stop/kill/start/status/shutdown on
// DIR/control.sock until it is told to shut down, receives SIGTERM, or the
// watched process exits. Its children die with it (PR_SET_PDEATHSIG).

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// healthTimeout bounds the wait for one component to become healthy.
const healthTimeout = 2 * time.Minute

type running struct {
	comp   component
	cmd    *exec.Cmd
	exited chan struct{}
	// started counts starts, for the log file's name.
	started int
}

type supervisor struct {
	s       settings
	byName  map[string]*running
	order   []string
	clients map[string]*http.Client
}

type controlRequest struct {
	line  string
	reply chan string
}

func supervise(dir string) error {
	// Pdeathsig is tied to the thread that started the child.
	runtime.LockOSThread()
	raw, err := os.ReadFile(filepath.Join(dir, "layout.json"))
	if err != nil {
		return err
	}
	sup := &supervisor{byName: map[string]*running{}}
	if err := json.Unmarshal(raw, &sup.s); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "supervisor.pid"), []byte(fmt.Sprint(os.Getpid())), 0o644); err != nil {
		return err
	}
	if sup.clients, err = healthClients(&sup.s.layout); err != nil {
		return sup.fail(err)
	}
	sock := filepath.Join(dir, "control.sock")
	_ = os.Remove(sock)
	listener, err := net.Listen("unix", sock)
	if err != nil {
		return sup.fail(err)
	}
	requests := make(chan controlRequest)
	go accept(listener, requests)
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)

	for _, c := range sup.s.components() {
		sup.order = append(sup.order, c.Name)
		sup.byName[c.Name] = &running{comp: c}
		if err := sup.start(c.Name); err != nil {
			sup.shutdown()
			return sup.fail(err)
		}
		if c.Name == "kube-controller-manager" {
			if err := bootstrap(&sup.s.layout); err != nil {
				sup.shutdown()
				return sup.fail(err)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "ready"), nil, 0o644); err != nil {
		sup.shutdown()
		return err
	}
	logf("ready")
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case sig := <-signals:
			logf("%s: shutting down", sig)
			sup.shutdown()
			return nil
		case <-tick.C:
			if sup.s.WatchPID > 0 && !alive(sup.s.WatchPID) {
				logf("process %d exited: shutting down", sup.s.WatchPID)
				sup.shutdown()
				return nil
			}
		case req := <-requests:
			answer, stop := sup.handle(req.line)
			if stop {
				sup.shutdown()
				req.reply <- answer
				_ = listener.Close()
				return nil
			}
			req.reply <- answer
		}
	}
}

func (sup *supervisor) fail(err error) error {
	_ = os.WriteFile(filepath.Join(sup.s.Dir, "failed"), []byte(err.Error()), 0o644)
	return err
}

func logf(format string, args ...any) {
	fmt.Printf("%s %s\n", time.Now().UTC().Format(time.RFC3339Nano), fmt.Sprintf(format, args...))
}

func accept(l net.Listener, requests chan<- controlRequest) {
	for {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		go func(conn net.Conn) {
			defer conn.Close()
			line, err := bufio.NewReader(conn).ReadString('\n')
			if err != nil {
				return
			}
			reply := make(chan string, 1)
			requests <- controlRequest{line: strings.TrimSpace(line), reply: reply}
			fmt.Fprintln(conn, <-reply)
		}(conn)
	}
}

// handle answers one control request; the bool says to shut down.
func (sup *supervisor) handle(line string) (string, bool) {
	verb, name, _ := strings.Cut(line, " ")
	errorf := func(format string, args ...any) string { return "error: " + fmt.Sprintf(format, args...) }
	switch verb {
	case "shutdown":
		return "ok", true
	case "status":
		status := map[string]any{}
		for _, n := range sup.order {
			r := sup.byName[n]
			if r.isRunning() {
				status[n] = r.cmd.Process.Pid
			} else {
				status[n] = nil
			}
		}
		raw, _ := json.Marshal(status)
		return string(raw), false
	case "stop", "kill", "start":
		if _, ok := sup.byName[name]; !ok {
			return errorf("no component %q (have %s)", name, strings.Join(sup.order, ", ")), false
		}
		var err error
		switch verb {
		case "stop":
			sup.stop(name, syscall.SIGTERM)
		case "kill":
			sup.stop(name, syscall.SIGKILL)
		case "start":
			if sup.byName[name].isRunning() {
				return errorf("%s is running", name), false
			}
			err = sup.start(name)
		}
		if err != nil {
			return errorf("%v", err), false
		}
		logf("%s %s: done", verb, name)
		return "ok", false
	}
	return errorf("unknown request %q", line), false
}

func (r *running) isRunning() bool {
	if r.cmd == nil {
		return false
	}
	select {
	case <-r.exited:
		return false
	default:
		return true
	}
}

// start runs one component and waits until it is healthy.
func (sup *supervisor) start(name string) error {
	r := sup.byName[name]
	r.started++
	logName := name + ".log"
	if r.started > 1 {
		logName = fmt.Sprintf("%s.%d.log", name, r.started)
	}
	out, err := os.Create(filepath.Join(sup.s.Dir, "logs", logName))
	if err != nil {
		return err
	}
	cmd := exec.Command(r.comp.Args[0], r.comp.Args[1:]...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = os.Environ()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("starting %s: %w", name, err)
	}
	r.cmd, r.exited = cmd, make(chan struct{})
	go func() {
		err := cmd.Wait()
		out.Close()
		logf("%s (pid %d) exited: %v", name, cmd.Process.Pid, err)
		close(r.exited)
	}()
	logf("%s started (pid %d)", name, cmd.Process.Pid)
	if r.comp.Health == "" {
		return nil
	}
	client := sup.clients[name]
	deadline := time.Now().Add(healthTimeout)
	for {
		select {
		case <-r.exited:
			return fmt.Errorf("%s exited while starting:\n%s", name, tail(out.Name(), 25))
		default:
		}
		resp, err := client.Get(r.comp.Health)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				logf("%s healthy", name)
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not healthy within %s (last: %v):\n%s", name, healthTimeout, errOrStatus(resp, err), tail(out.Name(), 25))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func errOrStatus(resp *http.Response, err error) string {
	if err != nil {
		return err.Error()
	}
	return resp.Status
}

// stop signals one component and waits for it, killing it after 15 s.
func (sup *supervisor) stop(name string, sig syscall.Signal) {
	r := sup.byName[name]
	if !r.isRunning() {
		return
	}
	_ = r.cmd.Process.Signal(sig)
	select {
	case <-r.exited:
	case <-time.After(15 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.exited
	}
}

// shutdown stops everything in reverse order and removes the data.
func (sup *supervisor) shutdown() {
	for i := len(sup.order) - 1; i >= 0; i-- {
		sup.stop(sup.order[i], syscall.SIGTERM)
	}
	_ = os.RemoveAll(sup.s.Data)
	_ = os.Remove(filepath.Join(sup.s.Dir, "control.sock"))
	_ = os.Remove(filepath.Join(sup.s.Dir, "ready"))
	logf("down")
}

// healthClients: the API server is asked with the admin certificate; the
// other servers' health endpoints are open to anyone, over HTTPS with a
// certificate they made up at start.
func healthClients(l *layout) (map[string]*http.Client, error) {
	caPEM, err := os.ReadFile(l.pki("ca.crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	admin, err := tls.LoadX509KeyPair(l.pki("admin.crt"), l.pki("admin.key"))
	if err != nil {
		return nil, err
	}
	client := func(cfg *tls.Config) *http.Client {
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	}
	open := client(&tls.Config{InsecureSkipVerify: true}) //nolint:gosec // loopback health checks only
	return map[string]*http.Client{
		"etcd":                    open,
		"kube-apiserver":          client(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{admin}}),
		"kube-controller-manager": open,
		"kube-scheduler":          open,
		"kwok":                    open,
	}, nil
}

// bootstrap creates what every EKS cluster has before any workload, and
// waits for what the controller manager creates: the kube-dns Service (the
// controller reads its address), and the default ServiceAccount (without
// it, the ServiceAccount admission plugin refuses every pod of the
// namespace).
func bootstrap(l *layout) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", l.kubeconfig("admin"))
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), healthTimeout)
	defer cancel()
	dns := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: "kube-dns", Namespace: "kube-system",
			Labels: map[string]string{"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"},
		},
		Spec: corev1.ServiceSpec{
			ClusterIP: clusterDNS,
			Selector:  map[string]string{"k8s-app": "kube-dns"},
			Ports: []corev1.ServicePort{
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
				{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
			},
		},
	}
	if _, err := client.CoreV1().Services("kube-system").Create(ctx, dns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating kube-system/kube-dns: %w", err)
	}
	for {
		_, err := client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("the controller manager did not create default/default ServiceAccount: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
