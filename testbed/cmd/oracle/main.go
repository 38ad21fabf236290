// Command oracle answers, with the Go implementations dovetail's parsers
// mirror, what those implementations make of an input: dovetail's
// differential tests (tests/differential.rs) send it the same inputs they
// give dovetail and compare the answers.
//
// It reads one JSON request per line on stdin and writes one JSON answer per
// line on stdout, in order:
//
//	{"op": "duration", "in": "1h30m"}
//	{"ok": true, "out": "5400000000000"}
//	{"op": "quantity", "in": "1.5Gi"}
//	{"ok": true, "out": {"string": "1536Mi", "milli": "...", "value": "..."}}
//	{"op": "labels", "in": "a in (x),!b", "sets": [{"a": "x"}]}
//	{"ok": true, "out": {"string": "!b,a in (x)", "matches": [true]}}
//
// A refused input is {"ok": false, "err": "..."}. Integers that may not fit
// a double (nanoseconds, milli-values) are decimal strings. The operations:
//
//   - duration: time.ParseDuration; out is nanoseconds.
//   - match: regexp.MatchString(pattern, in), the RE2 match the API server
//     applies to a CRD's `pattern`.
//   - cron: Karpenter's budget schedule, cron.ParseStandard("TZ=UTC " + in)
//     (robfig/cron/v3); out is the next `count` activations after `from`
//     (Unix seconds).
//   - quantity: a quantity as the API server decodes one from JSON
//     (blanks trimmed, then resource.ParseQuantity); out is its canonical
//     String(), MilliValue(), Value() and exact decimal value.
//   - labels: labels.Parse; out is the selector's String() and whether it
//     matches each of `sets`.
//   - fields: fields.ParseSelector; out is its requirements (field, operator,
//     value) in order.
//   - yaml: sigs.k8s.io/yaml's YAMLToJSON and YAMLToJSONStrict; out is the
//     JSON and whether the strict conversion refused it (strictErr).
//   - jsonpatch, mergepatch: the API server's json-patch (evanphx v4)
//     applied to `doc`; out is the patched document.
//   - strategic: strategicpatch.StrategicMergePatch of `doc` with `patch`
//     for the core/v1 kind `kind` (Pod or Node); out is the patched
//     document.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"time"

	"github.com/robfig/cron/v3"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"sigs.k8s.io/yaml"
)

type request struct {
	Op      string              `json:"op"`
	In      string              `json:"in"`
	Pattern string              `json:"pattern,omitempty"`
	From    int64               `json:"from,omitempty"`
	Count   int                 `json:"count,omitempty"`
	Sets    []map[string]string `json:"sets,omitempty"`
	Doc     json.RawMessage     `json:"doc,omitempty"`
	Patch   json.RawMessage     `json:"patch,omitempty"`
	Kind    string              `json:"kind,omitempty"`
}

type answer struct {
	Ok  bool   `json:"ok"`
	Err string `json:"err,omitempty"`
	Out any    `json:"out,omitempty"`
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	out := bufio.NewWriter(os.Stdout)
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	for in.Scan() {
		var req request
		var a answer
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			a = answer{Err: "bad request: " + err.Error()}
		} else {
			a = answerOf(req)
		}
		if err := enc.Encode(a); err != nil {
			fmt.Fprintln(os.Stderr, "oracle:", err)
			os.Exit(1)
		}
		// The caller waits for each answer before its next request.
		if err := out.Flush(); err != nil {
			os.Exit(1)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "oracle:", err)
		os.Exit(1)
	}
}

func answerOf(req request) (a answer) {
	defer func() {
		// A panic in an implementation is an answer too: the caller
		// reports it rather than losing the process.
		if p := recover(); p != nil {
			a = answer{Err: fmt.Sprintf("panic: %v", p)}
		}
	}()
	out, err := run(req)
	if err != nil {
		return answer{Err: err.Error()}
	}
	return answer{Ok: true, Out: out}
}

func run(req request) (any, error) {
	switch req.Op {
	case "duration":
		d, err := time.ParseDuration(req.In)
		if err != nil {
			return nil, err
		}
		return strconv.FormatInt(int64(d), 10), nil
	case "match":
		return regexp.MatchString(req.Pattern, req.In)
	case "cron":
		schedule, err := cron.ParseStandard("TZ=UTC " + req.In)
		if err != nil {
			return nil, err
		}
		next := make([]int64, 0, req.Count)
		t := time.Unix(req.From, 0).UTC()
		for range req.Count {
			t = schedule.Next(t)
			if t.IsZero() {
				break
			}
			next = append(next, t.Unix())
		}
		return next, nil
	case "quantity":
		text, _ := json.Marshal(req.In)
		var q resource.Quantity
		if err := json.Unmarshal(text, &q); err != nil {
			return nil, err
		}
		return map[string]string{
			"string": q.String(),
			"milli":  strconv.FormatInt(q.MilliValue(), 10),
			"value":  strconv.FormatInt(q.Value(), 10),
			"exact":  q.AsDec().String(),
		}, nil
	case "labels":
		sel, err := labels.Parse(req.In)
		if err != nil {
			return nil, err
		}
		matches := make([]bool, len(req.Sets))
		for i, set := range req.Sets {
			matches[i] = sel.Matches(labels.Set(set))
		}
		return map[string]any{"string": sel.String(), "matches": matches}, nil
	case "fields":
		sel, err := fields.ParseSelector(req.In)
		if err != nil {
			return nil, err
		}
		reqs := []map[string]string{}
		for _, r := range sel.Requirements() {
			reqs = append(reqs, map[string]string{
				"field": r.Field, "operator": string(r.Operator), "value": r.Value,
			})
		}
		return reqs, nil
	case "yaml":
		j, err := yaml.YAMLToJSON([]byte(req.In))
		if err != nil {
			return nil, err
		}
		strict := ""
		if _, err := yaml.YAMLToJSONStrict([]byte(req.In)); err != nil {
			strict = err.Error()
		}
		return map[string]any{"json": json.RawMessage(j), "strictErr": strict}, nil
	case "jsonpatch":
		patch, err := jsonpatch.DecodePatch(req.Patch)
		if err != nil {
			return nil, err
		}
		doc, err := patch.Apply(req.Doc)
		if err != nil {
			return nil, err
		}
		return json.RawMessage(doc), nil
	case "mergepatch":
		doc, err := jsonpatch.MergePatch(req.Doc, req.Patch)
		if err != nil {
			return nil, err
		}
		return json.RawMessage(doc), nil
	case "strategic":
		var schema any
		switch req.Kind {
		case "Pod":
			schema = &corev1.Pod{}
		case "Node":
			schema = &corev1.Node{}
		default:
			return nil, fmt.Errorf("strategic: unknown kind %q", req.Kind)
		}
		doc, err := strategicpatch.StrategicMergePatch(req.Doc, req.Patch, schema)
		if err != nil {
			return nil, err
		}
		return json.RawMessage(doc), nil
	}
	return nil, fmt.Errorf("unknown op %q", req.Op)
}
