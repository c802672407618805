package kiln_test

import (
	stdjson "encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kilnrt/kiln"
	"github.com/kilnrt/kiln/admin"
)

// The default roots are $KILN_SKILLS_DIR, else the workspace's skills directory made
// absolute, and the data directory's managed root.
func TestDefaultSkillRoots(t *testing.T) {
	data, ws := t.TempDir(), t.TempDir()
	t.Setenv(admin.SkillsEnv, "")
	roots, err := admin.DefaultSkillRoots(data, ws)
	if err != nil || roots.Builtin != filepath.Join(ws, "skills") || roots.Managed != filepath.Join(data, "skills") ||
		roots.Managed != admin.ManagedSkillsRoot(data) {
		t.Fatalf("roots %+v, %v", roots, err)
	}
	t.Chdir(ws)
	if roots, err := admin.DefaultSkillRoots(data, ""); err != nil || roots.Builtin != filepath.Join(ws, "skills") {
		t.Errorf("the working directory's roots %+v, %v", roots, err)
	}
	if roots, err := admin.DefaultSkillRoots(data, "."); err != nil || !filepath.IsAbs(roots.Builtin) {
		t.Errorf("a relative workspace's roots %+v, %v", roots, err)
	}
	t.Setenv(admin.SkillsEnv, "/elsewhere/skills")
	if roots, err := admin.DefaultSkillRoots(data, ws); err != nil || roots.Builtin != "/elsewhere/skills" {
		t.Errorf("roots under $%s: %+v, %v", admin.SkillsEnv, roots, err)
	}
}

// A scan offers the valid skills of both roots and refuses the rest, saying why; its
// JSON lists them without their bodies.
func TestScanSkills(t *testing.T) {
	roots := admin.SkillRoots{Builtin: t.TempDir(), Managed: filepath.Join(t.TempDir(), "skills")}
	empty, err := admin.ScanSkills(roots)
	if err != nil || len(empty.Skills) != 0 || len(empty.Refused) != 0 || empty.Revision == "" {
		t.Fatalf("roots that hold nothing: %+v, %v", empty, err)
	}
	if got := mustJSON(t, empty); got != `{"revision":"`+empty.Revision+`","skills":[],"refused":[]}` {
		t.Errorf("an empty set's JSON: %s", got)
	}
	writeSkill(t, roots.Builtin, "deploy", "# deploy\nShip it <now>.\n")
	writeSkill(t, roots.Builtin, "twice", "# twice\n")
	writeSkill(t, roots.Managed, "twice", "# twice\n")
	writeSkill(t, roots.Managed, "mistitled", "# other\n")
	set, err := admin.ScanSkills(roots)
	if err != nil || len(set.Skills) != 1 || len(set.Refused) != 3 || set.Revision == empty.Revision {
		t.Fatalf("set %+v, %v", set, err)
	}
	sk, ok := set.Lookup("deploy")
	if !ok || sk.Root != admin.SkillRootBuiltin || sk.Body != "# deploy\nShip it <now>.\n" || sk.Path != filepath.Join(roots.Builtin, "deploy", "SKILL.md") || len(sk.Digest) != 64 {
		t.Errorf("deploy: %+v, %v", sk, ok)
	}
	if r, ok := set.Refusal("twice"); !ok || r.Root != admin.SkillRootBuiltin || !strings.Contains(r.Reason, "both") {
		t.Errorf("twice: %+v, %v", r, ok)
	}
	if r, ok := set.Refusal("mistitled"); !ok || r.Root != admin.SkillRootManaged || r.Reason == "" {
		t.Errorf("mistitled: %+v, %v", r, ok)
	}
	if _, ok := set.Lookup("twice"); ok {
		t.Error("a refused id is offered")
	}
	if _, ok := set.Refusal("deploy"); ok {
		t.Error("a valid skill is refused")
	}
	line := mustJSON(t, set)
	if strings.Contains(line, "Ship it") || !strings.Contains(line, `{"id":"deploy","root":"builtin","path":"`+sk.Path+`","digest":"`+sk.Digest+`"}`) {
		t.Errorf("the set's JSON: %s", line)
	}
	var back admin.SkillSet
	if err := stdjson.Unmarshal([]byte(line), &back); err != nil || back.Revision != set.Revision || len(back.Refused) != 3 || back.Skills[0].Digest != sk.Digest {
		t.Errorf("through encoding/json: %+v, %v", back, err)
	}
	if err := os.WriteFile(sk.Path, []byte("# deploy\nChanged.\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if changed, err := admin.ScanSkills(roots); err != nil || changed.Revision == set.Revision {
		t.Errorf("a changed body kept the revision: %v", err)
	}
}

// A skill made from the template is loaded by the next workbench generation, its body
// the module's __doc__.
func TestNewSkillLoadsInAWorkbench(t *testing.T) {
	t.Parallel()
	data, builtin := t.TempDir(), t.TempDir()
	roots := admin.SkillRoots{Builtin: builtin, Managed: admin.ManagedSkillsRoot(data)}
	path, err := admin.NewSkill(roots.Managed, "release-notes")
	if err != nil || path != filepath.Join(roots.Managed, "release-notes", "SKILL.md") {
		t.Fatalf("new skill %s, %v", path, err)
	}
	if _, err := admin.NewSkill(roots.Managed, "release-notes"); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("a second new skill of one id: %v", err)
	}
	if _, err := admin.NewSkill(roots.Managed, "no/slashes"); err == nil {
		t.Error("a skill id with a slash was made")
	}
	set, err := admin.ScanSkills(roots)
	if err != nil {
		t.Fatal(err)
	}
	sk, ok := set.Lookup("release-notes")
	if !ok || sk.Root != admin.SkillRootManaged || !strings.HasPrefix(sk.Body, "# release-notes\n") {
		t.Fatalf("the new skill: %+v, %v", sk, ok)
	}
	wb, err := kiln.OpenWorkbench(t.Context(), kiln.WorkbenchOptions{DataDir: data, SkillsDir: builtin})
	if err != nil {
		t.Fatal(err)
	}
	defer wb.Close()
	doc := value(t, wb, "import kiln.skills\nimport importlib\nimportlib.import_module('kiln.skills.release-notes').__doc__ == "+pyString(sk.Body))
	if doc != "True" {
		t.Errorf("the workbench's __doc__ is not the body: %s", doc)
	}
}

func TestValidIdentifier(t *testing.T) {
	for _, c := range []struct {
		s    string
		want bool
	}{
		{"a", true}, {"A-z_0.9", true}, {strings.Repeat("x", 128), true},
		{"", false}, {strings.Repeat("x", 129), false}, {"a b", false}, {"é", false}, {"a/b", false},
	} {
		if got := admin.ValidIdentifier(c.s); got != c.want {
			t.Errorf("%q: got %v; want %v", c.s, got, c.want)
		}
	}
}

// pyString is s as a Python string literal.
func pyString(s string) string {
	data, _ := stdjson.Marshal(s)
	return string(data)
}
