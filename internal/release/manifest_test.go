package release

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
)

func manifestSnapshot(t *testing.T, manifest string) Snapshot {
	t.Helper()
	snap, err := New([]File{{Name: ManifestName, Data: []byte(manifest)}, {Name: "hooks.py", Data: nil}})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func TestReadManifest(t *testing.T) {
	m, err := ReadManifest(manifestSnapshot(t, `{"version":1,"hooks":{"attention.plan":"a:b","delivery.review":"c.d:e"}}`))
	if err != nil || m.Hooks["attention.plan"] != "a:b" || m.Hooks["delivery.review"] != "c.d:e" || len(m.Hooks) != 2 {
		t.Fatalf("%+v %v", m, err)
	}
	// Names Python takes as identifiers: underscores, digits after the first, letters of
	// any script, combining marks.
	m, err = ReadManifest(manifestSnapshot(t, `{"version":1,"hooks":{"attention.plan":"_p2.x_1:Hook.at","delivery.review":"café.politique:révise"}}`))
	if err != nil || m.Hooks["delivery.review"] != "café.politique:révise" {
		t.Fatalf("%+v %v", m, err)
	}
	// The optional slot, named beside the two.
	m, err = ReadManifest(manifestSnapshot(t, `{"version":1,"hooks":{"attention.plan":"a:b","delivery.review":"a:c","execution.review":"a:d"}}`))
	if err != nil || m.Hooks["execution.review"] != "a:d" || strings.Join(m.Slots(), ",") != "attention.plan,delivery.review,execution.review" {
		t.Fatalf("%+v %v", m, err)
	}
}

func TestReadManifestRefusesWhatActivationRefuses(t *testing.T) {
	tests := []struct{ name, manifest, want string }{
		{"version 2", `{"version":2,"hooks":{"attention.plan":"a:b","delivery.review":"a:c"}}`, "version must be 1, got 2"},
		{"version 1.0", `{"version":1.0,"hooks":{"attention.plan":"a:b","delivery.review":"a:c"}}`, "version must be 1, got 1.0"},
		{"an extra slot", `{"version":1,"hooks":{"attention.plan":"a:b","delivery.review":"a:c","x.y":"a:d"}}`, `unknown slot "x.y"`},
		{"a missing slot", `{"version":1,"hooks":{"attention.plan":"a:b"}}`, "no entrypoint for the slot delivery.review"},
		{"the optional slot alone", `{"version":1,"hooks":{"execution.review":"a:d"}}`, "no entrypoint for the slot attention.plan"},
		{"no slots", `{"version":1,"hooks":{}}`, "no entrypoint for the slot attention.plan"},
		{"a number for an entrypoint", `{"version":1,"hooks":{"attention.plan":1,"delivery.review":"a:c"}}`, "entrypoint of attention.plan must be"},
		{"an extra member", `{"version":1,"hooks":{},"x":1}`, `got ["hooks", "version", "x"]`},
		{"hooks not an object", `{"version":1,"hooks":[]}`, `"hooks" must be an object`},
		{"a duplicate member", `{"version":1,"version":1,"hooks":{}}`, "want a JSON object"},
		{"not JSON", `{`, "want a JSON object"},
		{"a module alone", `{"version":1,"hooks":{"attention.plan":"m","delivery.review":"a:c"}}`, `entrypoint of attention.plan, "m", is not "module:attribute"`},
		{"two colons", `{"version":1,"hooks":{"attention.plan":"m:a:b","delivery.review":"a:c"}}`, `"m:a:b", is not`},
		{"no module", `{"version":1,"hooks":{"attention.plan":"a:b","delivery.review":":c"}}`, `entrypoint of delivery.review, ":c", is not`},
		{"no attribute", `{"version":1,"hooks":{"attention.plan":"a:","delivery.review":"a:c"}}`, `"a:", is not`},
		{"an empty part", `{"version":1,"hooks":{"attention.plan":"a..b:c","delivery.review":"a:c"}}`, `"a..b:c", is not`},
		{"a digit first", `{"version":1,"hooks":{"attention.plan":"1a:c","delivery.review":"a:c"}}`, `"1a:c", is not`},
		{"a hyphen", `{"version":1,"hooks":{"attention.plan":"my-hooks:c","delivery.review":"a:c"}}`, `"my-hooks:c", is not`},
		{"an array", `[]`, "want a JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadManifest(manifestSnapshot(t, tt.manifest))
			if !errors.Is(err, ErrManifest) || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), ManifestName+": ") {
				t.Errorf("%v; want %q", err, tt.want)
			}
		})
	}
	snap, err := New([]File{{Name: "hooks.py"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ReadManifest(snap); !errors.Is(err, ErrManifest) {
		t.Errorf("no manifest: %v", err)
	}
}

func TestNewChecksTheRules(t *testing.T) {
	if _, err := New([]File{{Name: "run.sh"}}); !errors.Is(err, ErrExtension) {
		t.Errorf("New of a refused tree: %v", err)
	}
	files := []File{{Name: "b.py", Data: []byte("b")}, {Name: "a.py", Data: []byte("a")}}
	snap, err := New(files)
	if err != nil || snap.ID != Identity(files) || snap.Files[0].Name != "a.py" {
		t.Errorf("%+v %v", snap, err)
	}
}

// TestIdentifiersAreWhatPythonTakes: the manifest's check of a name agrees with the
// str.isidentifier of the interpreter that imports it, on names at the edges of the rule.
func TestIdentifiersAreWhatPythonTakes(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	names := []string{"a", "_", "A1", "1a", "a-b", "a b", "", "é", "e\u0301", "\u0301e", "ⅰx", "℘", "a·", "·a",
		"ａｂ", "٣", "a٣", "x\u200c", "ﬁ", "ℌ", "ᾼ", "a\u00b2", "\u00aa", "\U0001d400", "$", "a$"}
	data, _ := json.Marshal(names)
	out, err := exec.Command(python, "-I", "-c",
		"import json, sys; print(json.dumps([n.isidentifier() for n in json.loads(sys.argv[1])]))", string(data)).Output()
	if err != nil {
		t.Fatal(err)
	}
	var want []bool
	if err := json.Unmarshal(out, &want); err != nil {
		t.Fatal(err)
	}
	for i, name := range names {
		if got := identifier(name); got != want[i] {
			t.Errorf("identifier(%q) = %v; Python says %v", name, got, want[i])
		}
	}
}
