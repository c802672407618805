package instructions

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kilnrt/kiln/internal/skills"
)

func TestParseNamed(t *testing.T) {
	if n, err := ParseNamed("style=docs/style.md"); err != nil || n != (Named{"style", "docs/style.md"}) {
		t.Errorf("%+v %v", n, err)
	}
	for arg, want := range map[string]string{
		"style":             "want NAME=PATH",
		"style=":            "want NAME=PATH",
		"bad name=x":        "not 1..128",
		"contract=x":        "a name kiln gives",
		"AGENTS.md=x":       "a name kiln gives",
		"instructions=x.md": "a name kiln gives",
	} {
		if _, err := ParseNamed(arg); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v; want %q", arg, err, want)
		}
	}
}

func TestSourcesInOrder(t *testing.T) {
	ws := t.TempDir()
	style := filepath.Join(t.TempDir(), "style.md")
	os.WriteFile(style, []byte("Answer tersely.\n"), 0o600)
	cfg := Config{Workspace: ws, Methods: []string{"runtime.inspect", "skills.load"}, Extra: []Named{{"style", style}}}
	got, err := Sources(cfg)
	if err != nil || len(got) != 2 || got[0].Name != ContractSource || got[1].Name != "style" {
		t.Fatalf("without AGENTS.md: %+v %v", got, err)
	}
	os.WriteFile(filepath.Join(ws, AgentsSource), []byte("Run the tests.\n"), 0o600)
	got, err = Sources(cfg)
	if err != nil || len(got) != 3 || got[1].Name != AgentsSource || got[1].Text != "Run the tests.\n" || got[2].Text != "Answer tersely.\n" {
		t.Fatalf("with AGENTS.md: %+v %v", got, err)
	}
	if !strings.Contains(got[0].Text, "- runtime.inspect\n- skills.load\n") {
		t.Errorf("the contract does not list the methods:\n%s", got[0].Text)
	}
}

func TestBadSourcesAreErrors(t *testing.T) {
	ws := t.TempDir()
	if _, err := Sources(Config{Workspace: ws, Extra: []Named{{"gone", filepath.Join(ws, "gone.md")}}}); err == nil || !strings.Contains(err.Error(), "instructions gone") {
		t.Errorf("a missing configured source: %v", err)
	}
	os.WriteFile(filepath.Join(ws, AgentsSource), []byte("caf\xe9\n"), 0o600)
	if _, err := Sources(Config{Workspace: ws}); err == nil || !strings.Contains(err.Error(), "not valid UTF-8") {
		t.Errorf("a non-UTF-8 AGENTS.md: %v", err)
	}
	os.WriteFile(filepath.Join(ws, AgentsSource), []byte(strings.Repeat("x", MaxSourceBytes)), 0o600)
	if got, err := Sources(Config{Workspace: ws}); err != nil || len(got[1].Text) != MaxSourceBytes {
		t.Errorf("an AGENTS.md of exactly %d bytes: %v", MaxSourceBytes, err)
	}
	os.WriteFile(filepath.Join(ws, AgentsSource), []byte(strings.Repeat("x", MaxSourceBytes+1)), 0o600)
	if _, err := Sources(Config{Workspace: ws}); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("an oversize AGENTS.md: %v", err)
	}
}

func TestTheContractNamesSkillsAndRefusals(t *testing.T) {
	set := skills.Set{Skills: []skills.Skill{{ID: "deploy"}},
		Refused: []skills.Refusal{{ID: "bad", Root: skills.RootManaged, Reason: "the title disagrees"}}}
	text := Contract(nil, set)
	for _, want := range []string{"- deploy\n", "Refused skills, and why:\n- bad (managed root): the title disagrees\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("contract lacks %q:\n%s", want, text)
		}
	}
	if !strings.Contains(Contract(nil, skills.Set{}), "No skills are offered.") {
		t.Error("an empty set is not said")
	}
}
