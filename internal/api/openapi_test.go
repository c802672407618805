package api

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// TestOpenAPIDescribesEveryRoute holds the document and the routes to each other: the
// same paths, each with the same methods.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	var doc struct {
		OpenAPI string                               `json:"openapi"`
		Paths   map[string]map[string]jsontext.Value `json:"paths"`
	}
	if err := json.Unmarshal(openAPI, &doc, json.RejectUnknownMembers(false)); err != nil {
		t.Fatal(err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Errorf("openapi %q", doc.OpenAPI)
	}
	run := func(context.Context, string, ProgramLimits) ([]byte, error) { return nil, nil }
	a := &api{opts: Options{RunProgram: run}}
	seen := map[string]bool{}
	for _, rt := range a.routes() {
		path := strings.ReplaceAll(rt.pattern, "{path...}", "{path}")
		seen[path] = true
		ops, ok := doc.Paths[path]
		if !ok {
			t.Errorf("the document has no %s", path)
			continue
		}
		var documented, served []string
		for m := range ops {
			if m != "parameters" {
				documented = append(documented, strings.ToUpper(m))
			}
		}
		for m := range rt.methods {
			served = append(served, m)
		}
		slices.Sort(documented)
		slices.Sort(served)
		if !slices.Equal(documented, served) {
			t.Errorf("%s: documented %v, served %v", path, documented, served)
		}
	}
	for path := range doc.Paths {
		if !seen[path] {
			t.Errorf("the document describes %s, which is not served", path)
		}
	}
}
