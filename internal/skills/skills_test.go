package skills

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
)

// write makes root/id/SKILL.md holding body.
func write(t *testing.T, root, id, body string) string {
	t.Helper()
	dir := filepath.Join(root, id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, FileName)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func roots(t *testing.T) Roots {
	base := t.TempDir()
	return Roots{Builtin: filepath.Join(base, "builtin"), Managed: filepath.Join(base, "managed")}
}

func refusalOf(t *testing.T, set Set, id string) string {
	t.Helper()
	for _, r := range set.Refused {
		if r.ID == id {
			return r.Reason
		}
	}
	t.Fatalf("%s was not refused; refused: %+v, offered: %v", id, set.Refused, ids(set))
	return ""
}

func ids(set Set) []string {
	var out []string
	for _, s := range set.Skills {
		out = append(out, s.ID)
	}
	return out
}

func TestValidSkillsFromBothRoots(t *testing.T) {
	r := roots(t)
	write(t, r.Builtin, "deploy", "\n\n# deploy\nShip it.\n")
	write(t, r.Managed, "cargo-check", "# cargo-check\r\nRun it.\r\n")
	os.WriteFile(filepath.Join(r.Builtin, "README.md"), []byte("not a skill"), 0o600)
	os.MkdirAll(filepath.Join(r.Builtin, ".git"), 0o700)
	set, err := Scan(r)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ids(set), ","); got != "cargo-check,deploy" || len(set.Refused) != 0 {
		t.Fatalf("offered %s, refused %+v", got, set.Refused)
	}
	sk, ok := set.Lookup("deploy")
	if !ok || sk.Root != RootBuiltin || sk.Body != "\n\n# deploy\nShip it.\n" || len(sk.Digest) != 64 {
		t.Errorf("deploy: %+v", sk)
	}
	if _, ok := set.Lookup("missing"); ok {
		t.Error("found a skill that does not exist")
	}
}

func TestAbsentRootsHoldNothing(t *testing.T) {
	set, err := Scan(Roots{Builtin: filepath.Join(t.TempDir(), "nowhere")})
	if err != nil || len(set.Skills) != 0 || len(set.Refused) != 0 || set.Revision == "" {
		t.Errorf("%+v %v", set, err)
	}
}

func TestEveryRefusal(t *testing.T) {
	r := roots(t)
	write(t, r.Builtin, "twice", "# twice\n")
	write(t, r.Managed, "twice", "# twice\nanother\n")
	write(t, r.Managed, "mistitled", "# other\n")
	write(t, r.Managed, "untitled", "just text\n")
	write(t, r.Managed, "latin1", "# latin1\ncaf\xe9\n")
	write(t, r.Managed, "huge", "# huge\n"+strings.Repeat("x", MaxBodyBytes))
	os.MkdirAll(filepath.Join(r.Managed, "empty"), 0o700)
	os.MkdirAll(filepath.Join(r.Managed, "bad name"), 0o700)
	target := filepath.Dir(write(t, t.TempDir(), "linked", "# linked\n"))
	if err := os.Symlink(target, filepath.Join(r.Managed, "linked")); err != nil {
		t.Fatal(err)
	}
	elsewhere := write(t, t.TempDir(), "x", "# filelink\n")
	os.MkdirAll(filepath.Join(r.Managed, "filelink"), 0o700)
	os.Symlink(elsewhere, filepath.Join(r.Managed, "filelink", FileName))
	write(t, r.Managed, "fine", "# fine\n")
	write(t, r.Managed, "atlimit", "# atlimit\n"+strings.Repeat("x", MaxBodyBytes-len("# atlimit\n")))

	set, err := Scan(r)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ids(set), ","); got != "atlimit,fine" {
		t.Errorf("offered %s; want atlimit (exactly %d bytes) and fine", got, MaxBodyBytes)
	}
	for id, want := range map[string]string{
		"twice":     "defined in both",
		"mistitled": `the title "# other" disagrees with the directory`,
		"untitled":  `the title "just text" disagrees`,
		"latin1":    "not valid UTF-8",
		"huge":      "larger than 262144 bytes",
		"empty":     "holds no SKILL.md",
		"bad name":  "not an identifier",
		"linked":    "is a symlink",
		"filelink":  "SKILL.md is a symlink",
	} {
		if got := refusalOf(t, set, id); !strings.Contains(got, want) {
			t.Errorf("%s: reason %q; want it to say %q", id, got, want)
		}
	}
	both := 0
	for _, ref := range set.Refused {
		if ref.ID == "twice" {
			both++
		}
	}
	if both != 2 {
		t.Errorf("twice refused %d times; want once per root", both)
	}
}

func TestRevisionFollowsWhatWouldLoad(t *testing.T) {
	r := roots(t)
	path := write(t, r.Managed, "a", "# a\none\n")
	first, _ := Scan(r)
	again, _ := Scan(r)
	if first.Revision != again.Revision || len(first.Revision) != 64 {
		t.Fatalf("revisions %q %q", first.Revision, again.Revision)
	}
	write(t, r.Managed, "refused", "# wrong\n") // refusals load nothing
	if s, _ := Scan(r); s.Revision != first.Revision {
		t.Error("a refused skill changed the revision")
	}
	os.WriteFile(path, []byte("# a\ntwo\n"), 0o600)
	if s, _ := Scan(r); s.Revision == first.Revision {
		t.Error("a changed body kept the revision")
	}
}

func TestRereadRefusesAChangedBody(t *testing.T) {
	r := roots(t)
	path := write(t, r.Managed, "a", "# a\none\n")
	set, _ := Scan(r)
	sk, _ := set.Lookup("a")
	if body, err := Reread(sk); err != nil || body != "# a\none\n" {
		t.Fatalf("%q %v", body, err)
	}
	os.WriteFile(path, []byte("# a\nchanged\n"), 0o600)
	if _, err := Reread(sk); !errors.Is(err, ErrChanged) {
		t.Errorf("changed: %v; want ErrChanged", err)
	}
	os.Remove(path)
	if _, err := Reread(sk); !errors.Is(err, ErrChanged) {
		t.Errorf("removed: %v; want ErrChanged", err)
	}
}

func TestPayload(t *testing.T) {
	r := roots(t)
	write(t, r.Managed, "a", "# a\nbody é\n")
	set, _ := Scan(r)
	data, err := set.Payload()
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Revision string `json:"revision"`
		Skills   []struct {
			ID   string `json:"id"`
			Body string `json:"body"`
		} `json:"skills"`
	}
	if err := json.Unmarshal(data, &p); err != nil || p.Revision != set.Revision ||
		len(p.Skills) != 1 || p.Skills[0].ID != "a" || p.Skills[0].Body != "# a\nbody é\n" {
		t.Errorf("%s: %+v %v", data, p, err)
	}
	empty, _ := Set{Revision: "r"}.Payload()
	if string(empty) != `{"revision":"r","skills":[],"refused":[]}` {
		t.Errorf("empty payload %s", empty)
	}
}

func TestCreate(t *testing.T) {
	root := filepath.Join(t.TempDir(), "managed")
	path, err := Create(root, "new-skill")
	if err != nil {
		t.Fatal(err)
	}
	set, _ := Scan(Roots{Managed: root})
	if sk, ok := set.Lookup("new-skill"); !ok || sk.Path != path {
		t.Errorf("the template is not a valid skill: %+v", set)
	}
	if _, err := Create(root, "new-skill"); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("again: %v", err)
	}
	if _, err := Create(root, "bad id"); err == nil {
		t.Error("created an id that is no identifier")
	}
}

// TestAnIDInBothRootsIsRefusedWhateverTheCopiesHold: when one copy is invalid, the other
// is not offered in its place; both are refused, the invalid one saying both reasons.
func TestAnIDInBothRootsIsRefusedWhateverTheCopiesHold(t *testing.T) {
	r := roots(t)
	write(t, r.Builtin, "deploy", "# deploy\nShip it.\n")
	write(t, r.Managed, "deploy", "# not deploy\n")
	os.MkdirAll(filepath.Join(r.Builtin, "empty"), 0o700)
	write(t, r.Managed, "empty", "# empty\nvalid here.\n")
	set, err := Scan(r)
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Skills) != 0 {
		t.Errorf("offered %v", ids(set))
	}
	byRoot := map[string]string{}
	for _, ref := range set.Refused {
		byRoot[ref.ID+" "+ref.Root] = ref.Reason
	}
	for key, want := range map[string]string{
		"deploy builtin": BothRoots, "deploy managed": BothRoots + "; this copy is refused besides: the title",
		"empty builtin": BothRoots + "; this copy is refused besides: the directory holds no SKILL.md", "empty managed": BothRoots,
	} {
		if !strings.HasPrefix(byRoot[key], want) {
			t.Errorf("%s: %q; want %q", key, byRoot[key], want)
		}
	}
}

// TestAHiddenDirectoryIsReported: a directory whose name starts with a dot is refused,
// saying so, not silently left out; the root's .git and dot files are not skills.
func TestAHiddenDirectoryIsReported(t *testing.T) {
	r := roots(t)
	write(t, r.Managed, ".dotskill", "# .dotskill\n")
	os.MkdirAll(filepath.Join(r.Managed, ".git"), 0o700)
	os.WriteFile(filepath.Join(r.Managed, ".keep"), nil, 0o600)
	set, err := Scan(r)
	if err != nil {
		t.Fatal(err)
	}
	if reason := refusalOf(t, set, ".dotskill"); !strings.Contains(reason, "starts with a dot") {
		t.Errorf("reason %q", reason)
	}
	if len(set.Refused) != 1 || len(set.Skills) != 0 {
		t.Errorf("offered %v, refused %+v", ids(set), set.Refused)
	}
}

// TestANameThatIsNotUTF8IsRefusedAsText puts a directory whose name is not UTF-8 in a
// root: it is refused, and the set still encodes.
func TestANameThatIsNotUTF8IsRefusedAsText(t *testing.T) {
	r := roots(t)
	write(t, r.Managed, "a", "# a\n")
	if err := os.Mkdir(filepath.Join(r.Managed, "bad\xff"), 0o700); err != nil {
		t.Fatal(err)
	}
	set, err := Scan(r)
	if err != nil || len(set.Skills) != 1 || len(set.Refused) != 1 || set.Refused[0].ID != "bad\ufffd" {
		t.Fatalf("got %+v, %v; want a, and the bad name refused as text", set, err)
	}
	if _, err := set.Payload(); err != nil {
		t.Errorf("the payload: %v", err)
	}
}

// TestARootPastItsBoundsIsNotReadWhole fills a root with one directory more than
// MaxRootDirs: the skills within the bound are offered, and one refusal says the rest
// were not read.
func TestARootPastItsBoundsIsNotReadWhole(t *testing.T) {
	r := roots(t)
	for i := range MaxRootDirs + 1 {
		id := fmt.Sprintf("s%04d", i)
		write(t, r.Managed, id, "# "+id+"\n")
	}
	set, err := Scan(r)
	if err != nil || len(set.Skills) != MaxRootDirs || len(set.Refused) != 1 || !strings.Contains(set.Refused[0].Reason, "not offered") {
		t.Fatalf("got %d skills, refusals %+v, %v; want %d skills and one refusal", len(set.Skills), set.Refused, err, MaxRootDirs)
	}
}

// TestARootsSkillsAreBoundedInBytes fills a root with skills of MaxBodyBytes each: those
// that fit in MaxRootBytes are offered, and the next is refused with the rest.
func TestARootsSkillsAreBoundedInBytes(t *testing.T) {
	r := roots(t)
	fit := MaxRootBytes / MaxBodyBytes
	for i := range fit + 2 {
		id := fmt.Sprintf("s%02d", i)
		title := "# " + id + "\n"
		write(t, r.Managed, id, title+strings.Repeat("x", MaxBodyBytes-len(title)))
	}
	set, err := Scan(r)
	if err != nil || len(set.Skills) != fit || len(set.Refused) != 1 || set.Refused[0].ID != fmt.Sprintf("s%02d", fit) ||
		!strings.Contains(set.Refused[0].Reason, "and the 1 entries after it") {
		t.Fatalf("got %d skills, refusals %+v, %v; want %d skills at the bound, then one refusal", len(set.Skills), set.Refused, err, fit)
	}
}
