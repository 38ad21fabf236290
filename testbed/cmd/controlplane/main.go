// Command controlplane starts and stops a Kubernetes control plane on
// loopback for dovetail's tests: etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler and KWOK, built from their Go
// modules, and with --ec2-endpoint a registrar that registers a Node for
// each instance the EC2 API runs for the cluster.
//
//	controlplane up DIR [--ec2-endpoint URL --cluster-name NAME] [flags]
//	controlplane down DIR
//	controlplane stop|kill|start DIR COMPONENT
//	controlplane status DIR
//
// `up` returns once every component is healthy, leaving DIR/kubeconfig (an
// admin client certificate), DIR/ports and DIR/logs/. The components run
// under a supervisor in a process group of their own; `down` stops them
// all, and so does the death of the process named by --watch-pid (a test
// that panics or is killed leaves nothing behind).
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 3 {
		usage()
	}
	cmd, dir := os.Args[1], os.Args[2]
	var err error
	switch cmd {
	case "up":
		err = up(dir, os.Args[3:])
	case "down":
		err = down(dir)
	case "stop", "kill", "start":
		if len(os.Args) != 4 {
			usage()
		}
		err = request(dir, cmd+" "+os.Args[3], 3*time.Minute)
	case "status":
		err = request(dir, "status", 10*time.Second)
	case "supervise":
		err = supervise(dir)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "controlplane %s: %v\n", cmd, err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprint(os.Stderr, `usage:
  controlplane up DIR [--ec2-endpoint URL --cluster-name NAME --region R]
                      [--node-monitor-grace-period D] [--extra COMPONENT:FLAG ...]
                      [--watch-pid PID] [--timeout D]
  controlplane down DIR
  controlplane stop|kill|start DIR COMPONENT
  controlplane status DIR
`)
	os.Exit(2)
}

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

// settings is what `up` hands the supervisor, in DIR/layout.json.
type settings struct {
	layout
	WatchPID int `json:"watch_pid,omitempty"`
}

func up(dir string, args []string) error {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	ec2 := fs.String("ec2-endpoint", "", "EC2 API whose instances get Nodes (moto)")
	cluster := fs.String("cluster-name", "", "the cluster the instances are tagged for")
	region := fs.String("region", envOr("AWS_REGION", "us-east-1"), "the EC2 region")
	grace := fs.String("node-monitor-grace-period", "40s", "how long a silent Node stays Ready")
	watch := fs.Int("watch-pid", 0, "stop everything when this process exits")
	timeout := fs.Duration("timeout", 3*time.Minute, "how long to wait for a healthy control plane")
	bin := fs.String("bin", "", "where the binaries are (default: beside this one)")
	var extra multi
	fs.Var(&extra, "extra", "COMPONENT:FLAG passed to one component (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if (*ec2 == "") != (*cluster == "") {
		return errors.New("--ec2-endpoint and --cluster-name go together")
	}
	if *bin == "" {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		*bin = filepath.Dir(self)
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if pid := readPID(dir); pid > 0 && alive(pid) {
		return fmt.Errorf("%s already has a running control plane (supervisor %d)", dir, pid)
	}
	for _, d := range []string{dir, filepath.Join(dir, "pki"), filepath.Join(dir, "logs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	for _, f := range []string{"ready", "failed", "control.sock"} {
		_ = os.Remove(filepath.Join(dir, f))
	}
	data, err := os.MkdirTemp(tmpfs(), "dovetail-testbed-")
	if err != nil {
		return err
	}
	ports := map[string]int{}
	for _, name := range []string{"etcd", "etcd-peer", "etcd-metrics", "apiserver", "kube-controller-manager", "kube-scheduler", "kwok"} {
		if ports[name], err = freePort(ports); err != nil {
			return err
		}
	}
	s := settings{
		layout: layout{
			Dir: dir, Data: data, Bin: *bin, Ports: ports,
			EC2Endpoint: *ec2, ClusterName: *cluster, Region: *region,
			GracePeriod: *grace, Extra: extra,
		},
		WatchPID: *watch,
	}
	if err := prepare(&s.layout); err != nil {
		return err
	}
	raw, _ := json.MarshalIndent(s, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "layout.json"), raw, 0o644); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	log, err := os.Create(filepath.Join(dir, "logs", "supervisor.log"))
	if err != nil {
		return err
	}
	defer log.Close()
	sup := exec.Command(self, "supervise", dir)
	sup.Stdout, sup.Stderr = log, log
	sup.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := sup.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- sup.Wait() }()
	deadline := time.After(*timeout)
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("the supervisor exited (%v):\n%s", err, tail(filepath.Join(dir, "logs", "supervisor.log"), 30))
		case <-deadline:
			_ = syscall.Kill(-sup.Process.Pid, syscall.SIGKILL)
			return fmt.Errorf("not healthy within %s:\n%s", *timeout, tail(filepath.Join(dir, "logs", "supervisor.log"), 30))
		case <-time.After(100 * time.Millisecond):
		}
		if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
			fmt.Fprintf(os.Stderr, "control plane up: KUBECONFIG=%s (%s)\n", filepath.Join(dir, "kubeconfig"), describePorts(ports))
			return nil
		}
		if msg, err := os.ReadFile(filepath.Join(dir, "failed")); err == nil {
			<-exited
			return fmt.Errorf("%s", msg)
		}
	}
}

// prepare writes the certificates, kubeconfigs and configuration files.
func prepare(l *layout) error {
	pki := filepath.Join(l.Dir, "pki")
	ca, err := newAuthority(pki)
	if err != nil {
		return err
	}
	if err := serviceAccountKeys(pki); err != nil {
		return err
	}
	serviceIP := net.ParseIP("10.100.0.1")
	hosts := []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
	if err := ca.issue(pki, "apiserver", "kube-apiserver", nil, hosts, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, serviceIP}); err != nil {
		return err
	}
	clients := []struct{ name, cn, group string }{
		{"admin", "kubernetes-admin", "system:masters"},
		{"kube-controller-manager", "system:kube-controller-manager", ""},
		{"kube-scheduler", "system:kube-scheduler", ""},
		{"kwok", "kwok-controller", "system:masters"},
	}
	for _, c := range clients {
		var groups []string
		if c.group != "" {
			groups = []string{c.group}
		}
		if err := ca.issue(pki, c.name, c.cn, groups, nil, nil); err != nil {
			return err
		}
		if err := kubeconfig(l.kubeconfig(c.name), l.server(), pki, c.name); err != nil {
			return err
		}
	}
	stages, err := kwokStages()
	if err != nil {
		return err
	}
	files := map[string]string{
		"kwok.yaml":         stages,
		"audit-policy.yaml": auditPolicy,
		"ports":             portsFile(l.Ports),
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(l.Dir, name), []byte(text), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func portsFile(ports map[string]int) string {
	var b strings.Builder
	for _, k := range sortedKeys(ports) {
		fmt.Fprintf(&b, "%s=%d\n", k, ports[k])
	}
	return b.String()
}

func describePorts(ports map[string]int) string {
	var parts []string
	for _, k := range sortedKeys(ports) {
		parts = append(parts, fmt.Sprintf("%s %d", k, ports[k]))
	}
	return strings.Join(parts, ", ")
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// down stops the supervisor and everything it runs.
func down(dir string) error {
	pid := readPID(dir)
	if pid == 0 || !alive(pid) {
		cleanupData(dir)
		return nil
	}
	if err := request(dir, "shutdown", 60*time.Second); err != nil {
		fmt.Fprintf(os.Stderr, "controlplane down: %v; killing process group %d\n", err, pid)
	}
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline) && alive(pid); {
		time.Sleep(50 * time.Millisecond)
	}
	if alive(pid) {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	cleanupData(dir)
	return nil
}

// cleanupData removes the tmpfs data of a supervisor that did not.
func cleanupData(dir string) {
	raw, err := os.ReadFile(filepath.Join(dir, "layout.json"))
	if err != nil {
		return
	}
	var s settings
	if json.Unmarshal(raw, &s) == nil && strings.Contains(filepath.Base(s.Data), "dovetail-testbed-") {
		_ = os.RemoveAll(s.Data)
	}
}

// request sends one command to the supervisor and prints its answer.
func request(dir, command string, timeout time.Duration) error {
	conn, err := net.DialTimeout("unix", filepath.Join(dir, "control.sock"), 5*time.Second)
	if err != nil {
		return fmt.Errorf("no supervisor answers in %s: %w", dir, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := fmt.Fprintln(conn, command); err != nil {
		return err
	}
	answer, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil && answer == "" {
		if command == "shutdown" {
			return nil // the supervisor closed the socket as it went
		}
		return err
	}
	answer = strings.TrimSpace(answer)
	if rest, ok := strings.CutPrefix(answer, "error: "); ok {
		return errors.New(rest)
	}
	if answer != "ok" {
		fmt.Println(answer)
	}
	return nil
}

func readPID(dir string) int {
	raw, err := os.ReadFile(filepath.Join(dir, "supervisor.pid"))
	if err != nil {
		return 0
	}
	var pid int
	_, _ = fmt.Sscanf(string(raw), "%d", &pid)
	return pid
}

func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	// A zombie is not alive: its parent has not reaped it yet.
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(fields) == 0 || fields[0] != "Z"
}

// freePort finds a port below the kernel's ephemeral range that nothing
// listens on. A port the kernel hands out for ":0" comes from that range,
// and so does the source port of every outgoing connection: between this
// check and the component's bind, any connection on the machine (a test's
// HTTP client, moto, another listener on ":0") could take it, and the
// component would fail with "address already in use".
func freePort(taken map[string]int) (int, error) {
	low := ephemeralLow()
	const first = 10000
	if low <= first+100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port, nil
	}
	used := map[int]bool{}
	for _, p := range taken {
		used[p] = true
	}
	for range 1000 {
		port := first + rand.IntN(low-first)
		if used[port] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		l.Close()
		return port, nil
	}
	return 0, fmt.Errorf("no free port between %d and %d", first, low)
}

// ephemeralLow is the first port of the kernel's ephemeral range (32768
// when it cannot be read).
func ephemeralLow() int {
	raw, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	var low, high int
	if _, err := fmt.Sscan(string(raw), &low, &high); err != nil || low <= 0 {
		return 32768
	}
	return low
}

func tmpfs() string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
