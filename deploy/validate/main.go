// Command validate checks rendered Kubernetes manifests without a cluster: it reads the
// multi-document YAML that `helm template` prints on stdin, decodes every document strictly into
// its typed Go object (an unknown or duplicated field anywhere is an error naming its path), then
// checks what an API server or a controller would later refuse or silently ignore: names, labels,
// selectors that match their pods, probes and Services that name ports that exist, mounts of
// volumes that exist, and references between the documents.
//
//	helm template deploy/helm/tensorgate | validate
//
// Exit status 0 when every document passes, 1 with one line per problem otherwise.
package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// A document of the stream, decoded.
type document struct {
	source string // the template it came from (helm's "# Source:" line)
	kind   string
	name   string
	obj    any
}

func (d document) String() string {
	if d.source == "" {
		return fmt.Sprintf("%s/%s", d.kind, d.name)
	}
	return fmt.Sprintf("%s/%s (%s)", d.kind, d.name, d.source)
}

var sourceLine = regexp.MustCompile(`(?m)^# Source: (.+)$`)

func main() {
	docs, problems := read(os.Stdin)
	problems = append(problems, check(docs)...)
	for _, p := range problems {
		fmt.Fprintln(os.Stderr, p)
	}
	if len(problems) > 0 {
		fmt.Fprintf(os.Stderr, "%d problem(s) in %d document(s)\n", len(problems), len(docs))
		os.Exit(1)
	}
	kinds := make([]string, len(docs))
	for i, d := range docs {
		kinds[i] = d.kind + "/" + d.name
	}
	fmt.Printf("ok: %d documents: %s\n", len(docs), strings.Join(kinds, ", "))
}

// read decodes every document of the stream; a document that does not decode is a problem, and
// the others are still read.
func read(r io.Reader) ([]document, []string) {
	var docs []document
	var problems []string
	reader := utilyaml.NewYAMLReader(bufio.NewReader(r))
	for index := 0; ; index++ {
		raw, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			problems = append(problems, fmt.Sprintf("document %d: %v", index, err))
			break
		}
		doc, err := decode(raw)
		if doc == nil && err == nil {
			continue // only comments or whitespace
		}
		if err != nil {
			label := fmt.Sprintf("document %d", index)
			if doc != nil {
				label = doc.String()
			}
			problems = append(problems, fmt.Sprintf("%s: %v", label, err))
		}
		if doc != nil && doc.obj != nil {
			docs = append(docs, *doc)
		}
	}
	return docs, problems
}

// decode strictly decodes one document into the type its apiVersion and kind name.
func decode(raw []byte) (*document, error) {
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("not YAML: %w", err)
	}
	if s := strings.TrimSpace(string(js)); s == "null" || s == "" {
		return nil, nil
	}
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(js, &head); err != nil {
		return nil, fmt.Errorf("not an object: %w", err)
	}
	doc := &document{kind: head.Kind, name: head.Metadata.Name}
	if m := sourceLine.FindSubmatch(raw); m != nil {
		doc.source = string(m[1])
	}
	newObj, known := kinds[head.APIVersion+", Kind="+head.Kind]
	if !known {
		return doc, fmt.Errorf("apiVersion %q kind %q is not one this validator knows", head.APIVersion, head.Kind)
	}
	obj := newObj()
	strict, err := sigsjson.UnmarshalStrict(js, obj, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return doc, err
	}
	// Past unknown or duplicate fields the object is still decoded, so the other documents'
	// references to it are checked as usual rather than reported missing.
	doc.obj = obj
	if len(strict) > 0 {
		msgs := make([]string, len(strict))
		for i, e := range strict {
			msgs[i] = e.Error()
		}
		return doc, errors.New(strings.Join(msgs, "; "))
	}
	return doc, nil
}
