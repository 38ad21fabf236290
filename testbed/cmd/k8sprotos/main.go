// Command k8sprotos prints, as a binary FileDescriptorSet, the protobuf
// descriptors of the built-in kinds dovetail's served API speaks, compiled
// from the generated.proto files of the k8s.io/api and k8s.io/apimachinery
// modules this testbed is built with. The served API reads and writes
// Kubernetes' protobuf encoding through these descriptors; a test runs this
// command and checks that the committed copy is current.
//
// Each field's json_name is its name in the kind's JSON, from the Go
// type's json tag. A Go struct embedded with `json:",inline"` (a Probe's
// handler, a Volume's source) is a field of its own in protobuf but its
// fields are the parent's in JSON: its json_name is "," and its protobuf
// name, which no JSON key can be.
//
// A field Go writes even when it is unset (a value, not a pointer, with
// `omitempty`: a probe's periodSeconds, a port's hostPort) carries the
// option (dovetail.k8sjson.omit_zero) = true: its zero value means unset, as
// Go's decoding and JSON read it. A pointer's zero (replicas: 0) is a value.
//
//	k8sprotos > src/world/serve/protobuf/kubernetes.binpb
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"k8s.io/client-go/kubernetes/scheme"
)

// The API groups the served API serves (their dependencies follow).
var roots = []string{
	"k8s.io/api/apps/v1/generated.proto",
	"k8s.io/api/authentication/v1/generated.proto",
	"k8s.io/api/autoscaling/v1/generated.proto",
	"k8s.io/api/batch/v1/generated.proto",
	"k8s.io/api/coordination/v1/generated.proto",
	"k8s.io/api/core/v1/generated.proto",
	"k8s.io/api/policy/v1/generated.proto",
	"k8s.io/api/storage/v1/generated.proto",
}

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "k8sprotos:", err)
		os.Exit(1)
	}
}

func run(out io.Writer) error {
	modules := map[string]string{}
	for _, m := range []string{"k8s.io/api", "k8s.io/apimachinery"} {
		dir, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", m).Output()
		if err != nil {
			return fmt.Errorf("locating module %s (run from testbed/): %w", m, err)
		}
		modules[m] = strings.TrimSpace(string(dir))
	}
	compiler := protocompile.Compiler{
		Resolver: &protocompile.SourceResolver{Accessor: func(path string) (io.ReadCloser, error) {
			for m, dir := range modules {
				if rest, ok := strings.CutPrefix(path, m+"/"); ok {
					return os.Open(filepath.Join(dir, rest))
				}
			}
			return nil, fmt.Errorf("%s: not in k8s.io/api or k8s.io/apimachinery", path)
		}},
		SourceInfoMode: protocompile.SourceInfoNone,
	}
	files, err := compiler.Compile(context.Background(), roots...)
	if err != nil {
		return err
	}
	// Every file once, each after its imports, as a FileDescriptorSet lists
	// them; first the option that marks the fields whose zero is unset.
	set := &descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{
		protodesc.ToFileDescriptorProto(descriptorpb.File_google_protobuf_descriptor_proto),
		omitZeroFile(),
	}}
	seen := map[string]bool{}
	var add func(f protoreflect.FileDescriptor)
	add = func(f protoreflect.FileDescriptor) {
		if seen[f.Path()] {
			return
		}
		seen[f.Path()] = true
		imports := f.Imports()
		for i := 0; i < imports.Len(); i++ {
			add(imports.Get(i).FileDescriptor)
		}
		set.File = append(set.File, protodesc.ToFileDescriptorProto(f))
	}
	for _, f := range files {
		add(f)
	}
	jsonNames(set)
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(set)
	if err != nil {
		return err
	}
	_, err = out.Write(b)
	return err
}

// jsonNames sets each field's json_name from the json tag of the Go field
// it encodes, walking every type reachable from the built-in kinds.
func jsonNames(set *descriptorpb.FileDescriptorSet) {
	messages := map[string]*descriptorpb.DescriptorProto{}
	for _, f := range set.File {
		for _, m := range f.MessageType {
			messages[f.GetPackage()+"."+m.GetName()] = m
		}
	}
	seen := map[reflect.Type]bool{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map || t.Kind() == reflect.Array {
			if t.Kind() == reflect.Map {
				walk(t.Key())
			}
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || seen[t] {
			return
		}
		seen[t] = true
		message := messages[strings.ReplaceAll(t.PkgPath(), "/", ".")+"."+t.Name()]
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			walk(f.Type)
			if message == nil {
				continue
			}
			name := ""
			for _, part := range strings.Split(f.Tag.Get("protobuf"), ",") {
				if n, ok := strings.CutPrefix(part, "name="); ok {
					name = n
				}
			}
			if name == "" {
				continue
			}
			tag := strings.Split(f.Tag.Get("json"), ",")
			jsonName := tag[0]
			if jsonName == "" && len(tag) > 1 && tag[1] == "inline" {
				jsonName = "," + name
			}
			if jsonName == "" || jsonName == "-" {
				continue
			}
			omitZero := slices.Contains(tag[1:], "omitempty")
			switch f.Type.Kind() {
			case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Struct, reflect.Interface:
				omitZero = false
			}
			for _, field := range message.Field {
				if field.GetName() != name {
					continue
				}
				field.JsonName = &jsonName
				if omitZero {
					if field.Options == nil {
						field.Options = &descriptorpb.FieldOptions{}
					}
					b := protowire.AppendTag(nil, omitZeroNumber, protowire.VarintType)
					field.Options.ProtoReflect().SetUnknown(protowire.AppendVarint(b, 1))
				}
			}
		}
	}
	for _, t := range scheme.Scheme.AllKnownTypes() {
		walk(t)
	}
}

// The field number of the omit_zero option, in the range for extensions of
// one organisation's own.
const omitZeroNumber = 50001

// omitZeroFile declares `extend google.protobuf.FieldOptions { optional
// bool omit_zero = 50001; }` in package dovetail.k8sjson.
func omitZeroFile() *descriptorpb.FileDescriptorProto {
	return &descriptorpb.FileDescriptorProto{
		Name:       proto.String("dovetail/k8sjson.proto"),
		Package:    proto.String("dovetail.k8sjson"),
		Dependency: []string{"google/protobuf/descriptor.proto"},
		Syntax:     proto.String("proto2"),
		Extension: []*descriptorpb.FieldDescriptorProto{{
			Name:     proto.String("omit_zero"),
			JsonName: proto.String("omitZero"),
			Number:   proto.Int32(omitZeroNumber),
			Label:    descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(),
			Type:     descriptorpb.FieldDescriptorProto_TYPE_BOOL.Enum(),
			Extendee: proto.String(".google.protobuf.FieldOptions"),
		}},
	}
}
