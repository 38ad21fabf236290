package main

// What a node's bootstrap would hand its kubelet, read from the instance's
// user data as nodeadm (AL2023), bootstrap.sh (AL2) and Bottlerocket read
// it: the kubelet's labels, taints, max pods, reservations and eviction
// thresholds. Read independently of dovetail, so a launch whose user data
// says something else than dovetail meant shows as a Node that differs.

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/mail"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// kubeletSettings is the part of a kubelet's configuration that shapes the
// Node it registers.
type kubeletSettings struct {
	Family         string
	ClusterName    string
	Labels         map[string]string
	Taints         []corev1.Taint
	MaxPods        *int64
	KubeReserved   map[string]string
	SystemReserved map[string]string
	EvictionHard   map[string]string
	ClusterDNS     []string
}

// parseUserData reads base64 user data.
func parseUserData(encoded string) (*kubeletSettings, error) {
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(encoded))
	if err != nil {
		return nil, fmt.Errorf("user data is not base64: %w", err)
	}
	text := string(raw)
	trimmed := strings.TrimSpace(text)
	switch {
	case strings.HasPrefix(trimmed, "MIME-Version") || strings.HasPrefix(trimmed, "Content-Type"):
		return parseMIME(text)
	case strings.HasPrefix(trimmed, "[settings") || strings.Contains(text, "\n[settings"):
		return parseBottlerocket(text)
	case strings.Contains(text, "/etc/eks/bootstrap.sh"):
		k := &kubeletSettings{Family: "al2"}
		return k, k.bootstrapScript(text)
	case strings.Contains(text, "NodeConfig"):
		k := &kubeletSettings{Family: "al2023"}
		return k, k.nodeConfigs(text)
	}
	return nil, fmt.Errorf("user data is neither MIME, a NodeConfig, bootstrap.sh nor Bottlerocket TOML")
}

func parseMIME(text string) (*kubeletSettings, error) {
	msg, err := mail.ReadMessage(strings.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("MIME user data: %w", err)
	}
	mediaType, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil || !strings.HasPrefix(mediaType, "multipart/") {
		return nil, fmt.Errorf("MIME user data is not multipart (%q)", msg.Header.Get("Content-Type"))
	}
	k := &kubeletSettings{}
	reader := multipart.NewReader(msg.Body, params["boundary"])
	for {
		part, err := reader.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("MIME user data: %w", err)
		}
		body, err := io.ReadAll(part)
		if err != nil {
			return nil, err
		}
		ctype, _, _ := mime.ParseMediaType(part.Header.Get("Content-Type"))
		switch ctype {
		case "application/node.eks.aws":
			k.Family = "al2023"
			if err := k.nodeConfigs(string(body)); err != nil {
				return nil, err
			}
		case "text/x-shellscript":
			if bytes.Contains(body, []byte("/etc/eks/bootstrap.sh")) {
				k.Family = "al2"
				if err := k.bootstrapScript(string(body)); err != nil {
					return nil, err
				}
			}
		}
	}
	if k.Family == "" {
		return nil, fmt.Errorf("no part of the MIME user data bootstraps a node")
	}
	return k, nil
}

// nodeConfigs merges NodeConfig documents in order, as nodeadm does: the
// kubelet configuration key by key, later documents winning, and the
// kubelet flags appended.
func (k *kubeletSettings) nodeConfigs(text string) error {
	config := map[string]any{}
	var flags []string
	for _, doc := range strings.Split(text, "\n---") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var nc struct {
			Kind string `json:"kind"`
			Spec struct {
				Cluster struct {
					Name string `json:"name"`
				} `json:"cluster"`
				Kubelet struct {
					Config map[string]any `json:"config"`
					Flags  []string       `json:"flags"`
				} `json:"kubelet"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(doc), &nc); err != nil {
			return fmt.Errorf("NodeConfig: %w", err)
		}
		if nc.Kind != "NodeConfig" {
			return fmt.Errorf("NodeConfig: unexpected kind %q", nc.Kind)
		}
		if nc.Spec.Cluster.Name != "" {
			k.ClusterName = nc.Spec.Cluster.Name
		}
		for key, v := range nc.Spec.Kubelet.Config {
			config[key] = v
		}
		flags = append(flags, nc.Spec.Kubelet.Flags...)
	}
	if v, ok := config["maxPods"]; ok {
		n, err := toInt(v)
		if err != nil {
			return fmt.Errorf("NodeConfig kubelet maxPods: %w", err)
		}
		k.MaxPods = &n
	}
	k.KubeReserved = stringMap(config["kubeReserved"])
	k.SystemReserved = stringMap(config["systemReserved"])
	k.EvictionHard = stringMap(config["evictionHard"])
	if dns, ok := config["clusterDNS"].([]any); ok {
		for _, d := range dns {
			k.ClusterDNS = append(k.ClusterDNS, fmt.Sprint(d))
		}
	}
	return k.flags(flags)
}

// bootstrapScript reads AL2's `/etc/eks/bootstrap.sh CLUSTER [options]`.
func (k *kubeletSettings) bootstrapScript(text string) error {
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "/etc/eks/bootstrap.sh") {
			continue
		}
		words, err := shellWords(strings.TrimPrefix(line, "/etc/eks/bootstrap.sh"))
		if err != nil {
			return fmt.Errorf("bootstrap.sh: %w", err)
		}
		useMaxPods := true
		var maxPods *int64
		for i := 0; i < len(words); i++ {
			w := words[i]
			next := func() string {
				if i+1 < len(words) {
					i++
					return words[i]
				}
				return ""
			}
			switch {
			case !strings.HasPrefix(w, "--") && k.ClusterName == "":
				k.ClusterName = w
			case w == "--use-max-pods":
				useMaxPods = next() != "false"
			case w == "--dns-cluster-ip":
				k.ClusterDNS = []string{next()}
			case w == "--kubelet-extra-args":
				extra, err := shellWords(next())
				if err != nil {
					return fmt.Errorf("--kubelet-extra-args: %w", err)
				}
				if err := k.flags(extra); err != nil {
					return err
				}
				maxPods = k.MaxPods
			case strings.HasPrefix(w, "--"):
				if !strings.Contains(w, "=") && i+1 < len(words) && !strings.HasPrefix(words[i+1], "--") {
					i++
				}
			}
		}
		if useMaxPods {
			// bootstrap.sh computes its own max pods from the ENI table.
			k.MaxPods = nil
		} else {
			k.MaxPods = maxPods
		}
		return nil
	}
	return fmt.Errorf("no /etc/eks/bootstrap.sh line")
}

// flags applies kubelet command-line flags; the last of a flag wins.
func (k *kubeletSettings) flags(flags []string) error {
	for _, f := range flags {
		name, value, ok := strings.Cut(strings.TrimLeft(f, "-"), "=")
		if !ok {
			continue
		}
		var err error
		switch name {
		case "node-labels":
			k.Labels = map[string]string{}
			for _, kv := range splitList(value) {
				key, v, _ := strings.Cut(kv, "=")
				k.Labels[key] = v
			}
		case "register-with-taints":
			k.Taints = nil
			for _, t := range splitList(value) {
				taint, perr := parseTaint(t)
				if perr != nil {
					return perr
				}
				k.Taints = append(k.Taints, taint)
			}
		case "max-pods":
			var n int64
			n, err = strconv.ParseInt(value, 10, 64)
			k.MaxPods = &n
		case "kube-reserved":
			k.KubeReserved = pairs(value, "=")
		case "system-reserved":
			k.SystemReserved = pairs(value, "=")
		case "eviction-hard":
			k.EvictionHard = pairs(value, "<")
		}
		if err != nil {
			return fmt.Errorf("kubelet flag %s: %w", f, err)
		}
	}
	return nil
}

// parseBottlerocket reads Bottlerocket's settings.kubernetes.
func parseBottlerocket(text string) (*kubeletSettings, error) {
	var doc struct {
		Settings struct {
			Kubernetes map[string]any `toml:"kubernetes"`
		} `toml:"settings"`
	}
	if _, err := toml.Decode(text, &doc); err != nil {
		return nil, fmt.Errorf("Bottlerocket settings: %w", err)
	}
	s := doc.Settings.Kubernetes
	k := &kubeletSettings{Family: "bottlerocket"}
	if v, ok := s["cluster-name"].(string); ok {
		k.ClusterName = v
	}
	if v, ok := s["max-pods"]; ok {
		n, err := toInt(v)
		if err != nil {
			return nil, fmt.Errorf("settings.kubernetes.max-pods: %w", err)
		}
		k.MaxPods = &n
	}
	k.Labels = stringMap(s["node-labels"])
	if taints, ok := s["node-taints"].(map[string]any); ok {
		for key, v := range taints {
			var values []string
			switch v := v.(type) {
			case string:
				values = []string{v}
			case []any:
				for _, x := range v {
					values = append(values, fmt.Sprint(x))
				}
			}
			for _, ve := range values {
				t, err := parseTaint(key + "=" + ve)
				if err != nil {
					return nil, err
				}
				k.Taints = append(k.Taints, t)
			}
		}
	}
	k.KubeReserved = stringMap(s["kube-reserved"])
	k.SystemReserved = stringMap(s["system-reserved"])
	k.EvictionHard = stringMap(s["eviction-hard"])
	switch v := s["cluster-dns-ip"].(type) {
	case string:
		k.ClusterDNS = []string{v}
	case []any:
		for _, x := range v {
			k.ClusterDNS = append(k.ClusterDNS, fmt.Sprint(x))
		}
	}
	return k, nil
}

// parseTaint reads KEY[=VALUE]:EFFECT as --register-with-taints does.
func parseTaint(s string) (corev1.Taint, error) {
	kv, effect, ok := strings.Cut(s, ":")
	if !ok {
		return corev1.Taint{}, fmt.Errorf("taint %q has no effect", s)
	}
	key, value, _ := strings.Cut(kv, "=")
	switch corev1.TaintEffect(effect) {
	case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
	default:
		return corev1.Taint{}, fmt.Errorf("taint %q: invalid effect %q", s, effect)
	}
	return corev1.Taint{Key: key, Value: value, Effect: corev1.TaintEffect(effect)}, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func pairs(s, sep string) map[string]string {
	out := map[string]string{}
	for _, p := range splitList(s) {
		if k, v, ok := strings.Cut(p, sep); ok {
			out[k] = v
		}
	}
	return out
}

func stringMap(v any) map[string]string {
	m, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	out := map[string]string{}
	for k, x := range m {
		out[k] = fmt.Sprint(x)
	}
	return out
}

func toInt(v any) (int64, error) {
	switch n := v.(type) {
	case float64:
		return int64(n), nil
	case int64:
		return n, nil
	case int:
		return int64(n), nil
	case string:
		return strconv.ParseInt(n, 10, 64)
	}
	return 0, fmt.Errorf("not a number: %v", v)
}

// shellWords splits a command line as a POSIX shell would, for the quoting
// bootstrap.sh lines use (single and double quotes, backslashes).
func shellWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unterminated single quote")
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, fmt.Errorf("unterminated double quote")
			}
			inWord = true
		case c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
			inWord = true
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}
