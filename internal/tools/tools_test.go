package tools

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

func echo(_ context.Context, args jsontext.Value) (jsontext.Value, error) { return args, nil }

func TestValidate(t *testing.T) {
	schema := `{"type":"object","properties":{
		"n":{"type":"integer"},"x":{"type":["number","null"]},"s":{"type":"string","enum":["a","b"]},
		"l":{"type":"array","items":{"type":"object","required":["k"],"properties":{"k":{"type":"boolean"}}}},
		"o":{"type":"object","additionalProperties":{"type":"string"}},
		"f":{"type":"string","format":"uri","pattern":"^x","minLength":3}},
		"required":["n"],"additionalProperties":false}`
	tests := []struct{ value, err string }{
		{`{"n":1}`, ""},
		{`{"n":1.0,"x":null,"s":"a","l":[{"k":true}],"o":{"a":"b"},"f":"y"}`, ""},
		{`{}`, `arguments: the required member "n" is missing`},
		{`{"n":1.5}`, "arguments.n: want integer, got number"},
		{`{"n":"1"}`, "arguments.n: want integer, got string"},
		{`{"n":1,"x":"1"}`, "arguments.x: want number or null, got string"},
		{`{"n":1,"s":"c"}`, `arguments.s: "c" is not one of ["a","b"]`},
		{`{"n":1,"l":[{"k":true},{}]}`, `arguments.l[1]: the required member "k" is missing`},
		{`{"n":1,"l":[{"k":1}]}`, "arguments.l[0].k: want boolean, got integer"},
		{`{"n":1,"o":{"a":1}}`, "arguments.o.a: want string, got integer"},
		{`{"n":1,"z":1}`, `arguments: unexpected member "z" (expected: f, l, n, o, s, x)`},
	}
	var s any
	if err := json.Unmarshal([]byte(schema), &s); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		var v any
		if err := json.Unmarshal([]byte(tt.value), &v); err != nil {
			t.Fatal(err)
		}
		got := ""
		if err := Validate(s, v); err != nil {
			got = err.Error()
		}
		if got != tt.err {
			t.Errorf("%s: got %q; want %q", tt.value, got, tt.err)
		}
	}
}

func TestAttr(t *testing.T) {
	for name, want := range map[string]string{"echo": "echo", "get-sum": "get_sum", "a.b c": "a_b_c",
		"2d": "_2d", "class": "class_", "None": "None_", "été": "été", "e\u0301t\u00e9": "été",
		"\ufb01le": "file", "日本語": "日本語", "x\u00b2": "x2", "a\u200bb": "a_b", "٣d": "_٣d"} {
		if got := Attr(name); got != want {
			t.Errorf("Attr(%q) = %q; want %q", name, got, want)
		}
	}
	for ns, want := range map[string]bool{"fs": true, "my_tools2": true, "": false, "_x": false, "2x": false,
		"a-b": false, "class": false, strings.Repeat("a", MaxIdentifierBytes): true, strings.Repeat("a", MaxIdentifierBytes+1): false} {
		if got := ValidNamespace(ns); got != want {
			t.Errorf("ValidNamespace(%q) = %v; want %v", ns, got, want)
		}
	}
}

func TestAddRefuses(t *testing.T) {
	r := New(0)
	if err := r.Add(Tool{Namespace: "a", Name: "get-x", Handler: echo}); err != nil {
		t.Fatal(err)
	}
	for _, tool := range []Tool{
		{Namespace: "a", Name: "get_x", Handler: echo},                                // the same attribute
		{Namespace: "a", Name: "get-x", Handler: echo},                                // the same name
		{Namespace: "a-b", Name: "x", Handler: echo},                                  // not an identifier
		{Namespace: "a", Name: "y"},                                                   // no handler
		{Namespace: "a", Name: "", Handler: echo},                                     // no name
		{Namespace: "a", Name: "z", Handler: echo, InputSchema: jsontext.Value(`[]`)}, // not an object
		{Namespace: "a", Name: "w", Handler: echo, InputSchema: jsontext.Value(`{"type":"object","x":` + strings.Repeat(" ", MaxSchemaBytes) + `1}`)},
	} {
		if err := r.Add(tool); !errors.Is(err, ErrInvalidTool) {
			t.Errorf("Add(%s.%s): %v; want ErrInvalidTool", tool.Namespace, tool.Name, err)
		}
	}
}

func TestMaxTools(t *testing.T) {
	r := New(0)
	for i := range MaxTools {
		if err := r.Add(Tool{Namespace: "n", Name: fmt.Sprint("t", i), Handler: echo}); err != nil {
			t.Fatalf("tool %d: %v", i, err)
		}
	}
	if err := r.Add(Tool{Namespace: "n", Name: "one_more", Handler: echo}); !errors.Is(err, ErrInvalidTool) {
		t.Errorf("tool %d: %v; want ErrInvalidTool", MaxTools+1, err)
	}
}

func TestDescriptionIsCut(t *testing.T) {
	r := New(0)
	at := strings.Repeat("é", MaxDescriptionBytes/2)
	over := at + "x"
	r.Add(Tool{Namespace: "n", Name: "at", Description: at, Handler: echo})
	r.Add(Tool{Namespace: "n", Name: "over", Description: over, Handler: echo})
	c := r.Catalog()
	if c[0].Description != at {
		t.Errorf("a description of %d bytes was changed", len(at))
	}
	if d := c[1].Description; len(d) > MaxDescriptionBytes || !strings.HasSuffix(d, "[kiln: description cut]") ||
		!strings.HasPrefix(over, strings.TrimSuffix(d, "\n[kiln: description cut]")) {
		t.Errorf("a description of %d bytes: got %d bytes ending %q", len(over), len(d), d[len(d)-30:])
	}
}

func TestCall(t *testing.T) {
	r := New(50 * time.Millisecond)
	r.Add(Tool{Namespace: "n", Name: "echo", Handler: echo,
		InputSchema: jsontext.Value(`{"type":"object","properties":{"a":{"type":"string"}}}`)})
	r.Add(Tool{Namespace: "n", Name: "hang", Handler: func(ctx context.Context, _ jsontext.Value) (jsontext.Value, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}})
	r.Add(Tool{Namespace: "n", Name: "gone", Handler: func(context.Context, jsontext.Value) (jsontext.Value, error) {
		return nil, fmt.Errorf("%w: the server died", ErrUnavailable)
	}})
	r.Add(Tool{Namespace: "n", Name: "nothing", Handler: func(context.Context, jsontext.Value) (jsontext.Value, error) {
		return nil, nil
	}})
	ctx := context.Background()
	if v, err := r.Call(ctx, "n", "echo", nil); err != nil || string(v) != "{}" {
		t.Errorf("no arguments: %s %v; want {}", v, err)
	}
	if v, err := r.Call(ctx, "n", "nothing", nil); err != nil || string(v) != "null" {
		t.Errorf("no result: %s %v; want null", v, err)
	}
	for _, tt := range []struct {
		name, args string
		code       string
	}{
		{"echo", `{"a":1}`, CodeInvalidArguments},
		{"echo", `[1]`, CodeInvalidArguments},
		{"echo", `{"a":`, CodeInvalidArguments},
		{"missing", `{}`, CodeUnknownTool},
		{"hang", `{}`, CodeToolTimeout},
		{"gone", `{}`, CodeToolUnavailable},
	} {
		_, err := r.Call(ctx, "n", tt.name, jsontext.Value(tt.args))
		if got := Code(err); err == nil || got != tt.code {
			t.Errorf("%s(%s): %v (%s); want %s", tt.name, tt.args, err, got, tt.code)
		}
	}
}

func TestPayload(t *testing.T) {
	if p, err := New(0).Payload(); p != nil || err != nil {
		t.Errorf("an empty registry's payload: %s %v; want none", p, err)
	}
	r := New(0)
	r.Add(Tool{Namespace: "n", Name: "get-x", Description: "d", Handler: echo, InputSchema: jsontext.Value(`{"type":"object"}`)})
	p, err := r.Payload()
	want := `{"tools":[{"namespace":"n","name":"get-x","attr":"get_x","description":"d","input_schema":{"type":"object"}}]}`
	if err != nil || string(p) != want {
		t.Errorf("got %s %v; want %s", p, err, want)
	}
}

func FuzzValidate(f *testing.F) {
	f.Add(`{"type":"object","properties":{"a":{"type":"array","items":{"enum":[1,"x"]}}},"required":["a"]}`, `{"a":[1,"x",2]}`)
	f.Add(`{"additionalProperties":{"type":["string","null"]}}`, `{"b":null,"c":3}`)
	f.Fuzz(func(t *testing.T, schema, value string) {
		var s, v any
		if json.Unmarshal([]byte(schema), &s) != nil || json.Unmarshal([]byte(value), &v) != nil {
			return
		}
		err1, err2 := Validate(s, v), Validate(s, v)
		if (err1 == nil) != (err2 == nil) || err1 != nil && err1.Error() != err2.Error() {
			t.Errorf("not deterministic: %v, then %v", err1, err2)
		}
	})
}

func TestCatalogBound(t *testing.T) {
	schema := jsontext.Value(`{"type":"object","description":"` + strings.Repeat("s", MaxSchemaBytes-40) + `"}`)
	r := New(0)
	for i := 0; ; i++ {
		r.Add(Tool{Namespace: "n", Name: fmt.Sprint("t", i), Handler: echo, InputSchema: schema})
		p, err := r.Payload()
		if err != nil {
			if !errors.Is(err, ErrInvalidTool) || len(p) != 0 {
				t.Fatalf("a catalog over the bound: %d bytes, %v; want ErrInvalidTool", len(p), err)
			}
			if i*len(schema) < MaxCatalogBytes-2*len(schema) {
				t.Errorf("refused at %d tools of %d bytes", i+1, len(schema))
			}
			return
		}
		if len(p) > MaxCatalogBytes {
			t.Fatalf("a catalog of %d bytes, over %d", len(p), MaxCatalogBytes)
		}
	}
}

// TestAttrIsWhatPythonReads: for names of every kind, Attr is an identifier to Python,
// not a keyword, and the form Python reads it in from source, so tools.ns.<attr> reaches
// the tool.
func TestAttrIsWhatPythonReads(t *testing.T) {
	names := []string{"été", "e\u0301t\u00e9", "\ufb01le", "日本語", "x\u00b2", "a\u200bb", "٣d", "\u0301x",
		"ℌ", "Ⅻ", "a·b", "℘", "_\u0301", "über-tool", "\u2163x", "x\u0345", "\u037a", "ǅ", "!", "-", "a b", "print"}
	attrs := make([]string, len(names))
	for i, n := range names {
		attrs[i] = Attr(n)
	}
	in, _ := json.Marshal(attrs)
	cmd := exec.Command("python3", "-I", "-c", `import json, keyword, sys, unicodedata
for a in json.load(sys.stdin):
    if not a.isidentifier() or keyword.iskeyword(a) or unicodedata.normalize("NFKC", a) != a:
        print(ascii(a))`)
	cmd.Stdin = bytes.NewReader(in)
	out, err := cmd.CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Errorf("attributes Python does not read as given: %s %v", out, err)
	}
}
