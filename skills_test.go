package kiln_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln"
	"github.com/kilnrt/kiln/internal/skills"
	"github.com/kilnrt/kiln/internal/store"
)

// writeSkill makes root/id/SKILL.md holding body.
func writeSkill(t *testing.T, root, id, body string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(root, id), 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, id, skills.FileName)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// value runs code, which must end ok, and returns its displayed result.
func value(t *testing.T, wb *kiln.Workbench, code string) string {
	t.Helper()
	rec, err := wb.Execute(context.Background(), code)
	if err != nil || rec.Status != kiln.StatusOK {
		t.Fatalf("%s: %v %+v", code, err, rec)
	}
	for _, o := range rec.Output {
		if o.Stream == "result" {
			return o.Text
		}
	}
	return ""
}

// skillBench opens a workbench whose builtin skills are in the returned directory and
// whose managed ones are in <data>/skills.
func skillBench(t *testing.T) (wb *kiln.Workbench, builtin, data string) {
	t.Helper()
	builtin, data = t.TempDir(), t.TempDir()
	writeSkill(t, builtin, "deploy", "# deploy\nShip it: run make release.\n")
	wb, err := kiln.OpenWorkbench(context.Background(), kiln.WorkbenchOptions{DataDir: data, SkillsDir: builtin})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wb.Close() })
	return wb, builtin, data
}

func TestASkillImportsWithItsBodyAsDoc(t *testing.T) {
	t.Parallel()
	wb, _, _ := skillBench(t)
	if got := value(t, wb, "import kiln.skills.deploy\nkiln.skills.deploy.__doc__"); got != `'# deploy\nShip it: run make release.\n'` {
		t.Errorf("__doc__ %s", got)
	}
	if got := value(t, wb, "import importlib\nimportlib.import_module('kiln.skills.deploy') is kiln.skills.deploy"); got != "True" {
		t.Errorf("import_module: %s", got)
	}
	rec, _ := wb.Execute(context.Background(), "import kiln.skills.nope")
	if rec.Status != kiln.StatusError || !strings.Contains(*rec.Error, "No module named 'kiln.skills.nope'") {
		t.Errorf("an unknown skill: %+v", rec)
	}
}

func TestSkillIdsThatWouldShadowTheirPackageStillLoad(t *testing.T) {
	t.Parallel()
	wb, builtin, _ := skillBench(t)
	for _, id := range []string{"__class__", "revision", "class"} {
		writeSkill(t, builtin, id, "# "+id+"\nbody\n")
	}
	rec, _ := wb.Execute(context.Background(), "import os\nos._exit(9)")
	if !rec.NamespaceLost {
		t.Fatalf("%+v", rec)
	}
	got := value(t, wb, "import importlib, kiln.skills\n"+
		"[importlib.import_module('kiln.skills.' + i).__doc__ for i in ('__class__', 'revision', 'class')], "+
		"len(kiln.skills.revision), kiln.skills.deploy.__name__")
	want := `(['# __class__\nbody\n', '# revision\nbody\n', '# class\nbody\n'], 64, 'kiln.skills.deploy')`
	if got != want {
		t.Errorf("got %s\nwant %s", got, want)
	}
}

func TestTheHelloRevisionIsRecorded(t *testing.T) {
	t.Parallel()
	wb, builtin, data := skillBench(t)
	revision := strings.Trim(value(t, wb, "import kiln.skills\nkiln.skills.revision"), "'")
	set, err := skills.Scan(skills.Roots{Builtin: builtin, Managed: skills.ManagedRoot(data)})
	if err != nil || set.Revision != revision {
		t.Fatalf("the worker loaded %s; the set is %s (%v)", revision, set.Revision, err)
	}
	st, err := store.OpenDir(context.Background(), data, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	entries, err := st.Log(context.Background(), store.LogFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var recorded []string
	for _, e := range entries {
		if kr, ok := e.Record.(store.KernelReset); ok && e.Kind == store.KindKernelReset {
			var loaded struct {
				Revision *string `json:"revision"`
			}
			if err := json.Unmarshal(kr.Loaded, &loaded); err != nil || loaded.Revision == nil {
				t.Fatalf("kernel reset %s: %s (%v)", kr.Generation, kr.Loaded, err)
			}
			recorded = append(recorded, *loaded.Revision)
		}
	}
	if len(recorded) != 1 || recorded[0] != revision {
		t.Errorf("recorded revisions %q; want [%s]", recorded, revision)
	}
}

func TestASkillWrittenDuringASessionLoadsInTheNextGeneration(t *testing.T) {
	t.Parallel()
	wb, _, data := skillBench(t)
	value(t, wb, "x = 1")
	writeSkill(t, skills.ManagedRoot(data), "later", "# later\nWritten mid-session.\n")
	rec, _ := wb.Execute(context.Background(), "import kiln.skills.later")
	if rec.Status != kiln.StatusError {
		t.Fatalf("a skill written mid-turn was importable at once: %+v", rec)
	}
	// The index offers what the generation loaded, and reports the new one as pending;
	// loading it and the contract wait for the next generation too.
	if got := value(t, wb, "r = await runtime.skills.index()\nr['ids'], r['pending']['ids']"); got != "(['deploy'], ['deploy', 'later'])" {
		t.Errorf("index %s", got)
	}
	if got := value(t, wb, "try:\n    await runtime.skills.load('later')\nexcept runtime.HostError as e:\n    r = e.code\nr"); got != "'not_found'" {
		t.Errorf("load of a pending skill: %s", got)
	}
	if got := value(t, wb, "'- later' in (await runtime.request('runtime.instructions'))['text']"); got != "False" {
		t.Errorf("the contract offers a pending skill: %s", got)
	}
	rec, _ = wb.Execute(context.Background(), "import os\nos._exit(9)")
	if !rec.NamespaceLost {
		t.Fatalf("the generation did not end: %+v", rec)
	}
	if got := value(t, wb, "import kiln.skills.later\nkiln.skills.later.__doc__"); got != `'# later\nWritten mid-session.\n'` {
		t.Errorf("next generation: %s", got)
	}
	if got := value(t, wb, "r = await runtime.skills.index()\nr['ids'], 'pending' in r, (await runtime.skills.load('later'))['id']"); got != "(['deploy', 'later'], False, 'later')" {
		t.Errorf("index in the next generation: %s", got)
	}
	if got := value(t, wb, "'- later' in (await runtime.request('runtime.instructions'))['text']"); got != "True" {
		t.Errorf("the contract of the next generation: %s", got)
	}
}

// TestImportingARefusedSkillSaysWhy: import kiln.skills.<refused id>, in each of its
// forms, raises an error naming the refusal's reason, not a plain "no module named" or
// "cannot import name".
func TestImportingARefusedSkillSaysWhy(t *testing.T) {
	t.Parallel()
	wb, builtin, data := skillBench(t)
	writeSkill(t, skills.ManagedRoot(data), "mistitled", "# other\n")
	writeSkill(t, skills.ManagedRoot(data), "deploy", "# deploy\nA second copy.\n")
	writeSkill(t, builtin, "solo", "# solo\n")
	rec, _ := wb.Execute(context.Background(), "import os\nos._exit(9)")
	if !rec.NamespaceLost {
		t.Fatalf("%+v", rec)
	}
	for code, want := range map[string]string{
		"import kiln.skills.mistitled":                                       "skill 'mistitled' was refused (managed root): the title",
		"import kiln.skills.deploy":                                          "skill 'deploy' was refused (builtin root): " + skills.BothRoots,
		"import kiln.skills.nope":                                            "No module named 'kiln.skills.nope'",
		"from kiln.skills import deploy":                                     "skill 'deploy' was refused (builtin root): " + skills.BothRoots,
		"import importlib\nimportlib.import_module('kiln.skills.mistitled')": "skill 'mistitled' was refused (managed root): the title",
		"import kiln.skills\nkiln.skills.deploy":                             "skill 'deploy' was refused (builtin root): " + skills.BothRoots,
	} {
		rec, _ := wb.Execute(context.Background(), code)
		if rec.Status != kiln.StatusError || !strings.Contains(*rec.Error, want) || !regexp.MustCompile(`\b(ModuleNotFoundError|SkillRefused|AttributeError): `).MatchString(*rec.Error) {
			t.Errorf("%s: %+v; want %q", code, rec.Error, want)
		}
	}
	if got := value(t, wb, "import kiln.skills.solo\nkiln.skills.solo.__doc__"); got != `'# solo\n'` {
		t.Errorf("a valid skill beside refused ones: %s", got)
	}
}

func TestLoadingThroughTheHost(t *testing.T) {
	t.Parallel()
	wb, builtin, data := skillBench(t)
	writeSkill(t, skills.ManagedRoot(data), "mistitled", "# other\n")
	got := value(t, wb, "r = await runtime.skills.load('deploy')\nr['id'], r['body']")
	if got != `('deploy', '# deploy\nShip it: run make release.\n')` {
		t.Errorf("load: %s", got)
	}
	got = value(t, wb, "(await runtime.skills.index())['pending']['refused']")
	if !strings.Contains(got, "'id': 'mistitled'") || !strings.Contains(got, "disagrees with the directory") {
		t.Errorf("refused: %s", got)
	}
	for code, want := range map[string]string{
		"await runtime.skills.load('mistitled')": "refused",
		"await runtime.skills.load('nope')":      "not_found",
		"await runtime.request('skills.load')":   "invalid_request",
	} {
		got := value(t, wb, "try:\n    "+code+"\nexcept runtime.HostError as e:\n    r = e.code\nr")
		if got != "'"+want+"'" {
			t.Errorf("%s: %s; want %s", code, got, want)
		}
	}
	// Changed during the generation: refused, not half-read; the new body is pending,
	// and the next generation offers it.
	writeSkill(t, builtin, "deploy", "# deploy\nShip it differently.\n")
	got = value(t, wb, "try:\n    await runtime.skills.load('deploy')\nexcept runtime.HostError as e:\n    r = e.code, e.message\nr")
	if !strings.HasPrefix(got, "('changed', ") || !strings.Contains(got, "differ from the digest") {
		t.Errorf("a changed skill: %s", got)
	}
	if got := value(t, wb, "r = await runtime.skills.index()\nr['revision'] != r['pending']['revision']"); got != "True" {
		t.Errorf("the changed body is not pending: %s", got)
	}
	rec, _ := wb.Execute(context.Background(), "import os\nos._exit(9)")
	if !rec.NamespaceLost {
		t.Fatalf("%+v", rec)
	}
	if got := value(t, wb, "(await runtime.skills.load('deploy'))['body']"); got != `'# deploy\nShip it differently.\n'` {
		t.Errorf("the next generation: %s", got)
	}
}
