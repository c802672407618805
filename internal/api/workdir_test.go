package api_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	kilndaemon "github.com/kilnrt/kiln/daemon"
	"github.com/kilnrt/kiln/internal/api"
	"github.com/kilnrt/kiln/internal/datadir"
)

// TestASessionRunsInADirectoryOfItsOwn: without a workspace root, a session's cells and
// files are in <data>/sessions/<id>/work, made 0700 at its opening, and a client's cwd
// is refused, saying how an operator allows one; pruning the stopped session removes
// its directory.
func TestASessionRunsInADirectoryOfItsOwn(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{})
	d.create("a")
	work, err := datadir.SessionWork(d.dir, "a")
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{filepath.Dir(filepath.Dir(work)), filepath.Dir(work), work} {
		if info, err := os.Stat(dir); err != nil || info.Mode().Perm() != 0o700 {
			t.Fatalf("%s: %v %v; want a directory, 0700", dir, info, err)
		}
	}
	resp, data := d.do("PUT", "/v1/sessions/a/files/note.txt", "hello")
	d.want(resp, data, 200, nil)
	if got, err := os.ReadFile(filepath.Join(work, "note.txt")); err != nil || string(got) != "hello" {
		t.Fatalf("the file PUT: %q %v; want it in %s", got, err, work)
	}
	if _, rec := d.execute("a", "import os\n(os.getcwd(), open('note.txt').read())", 60000); result(rec) != "("+pyRepr(work)+", 'hello')" {
		t.Fatalf("the cell runs in %s; want %s", result(rec), work)
	}
	resp, data = d.do("PUT", "/v1/sessions/a/files/%2Fetc%2Fkiln-test", "x")
	d.want(resp, data, 403, nil)
	wantCode(t, data, api.CodeFileRefused)

	resp, data = d.do("POST", "/v1/sessions", map[string]any{"id": "b", "cwd": t.TempDir()})
	d.want(resp, data, 400, nil)
	if !strings.Contains(string(data), "--workspace-root") {
		t.Errorf("a client's cwd without a workspace root: %s; want it to name --workspace-root", data)
	}

	resp, data = d.do("DELETE", "/v1/sessions/a", nil)
	d.want(resp, data, 200, nil)
	resp, data = d.do("POST", "/v1/sessions:prune", nil)
	d.want(resp, data, 200, nil)
	if _, err := os.Stat(filepath.Dir(work)); !os.IsNotExist(err) {
		t.Errorf("the pruned session's directory: %v; want it removed", err)
	}
}

// TestACwdMustResolveInsideTheWorkspaceRoot: with a workspace root, a client's cwd is
// taken at the root and inside it, through a symlink that stays inside too; one step
// out of it, by ".." or by a symlink, is refused.
func TestACwdMustResolveInsideTheWorkspaceRoot(t *testing.T) {
	base := t.TempDir()
	root, outside := filepath.Join(base, "root"), filepath.Join(base, "outside")
	for _, dir := range []string{filepath.Join(root, "in"), outside} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	os.Symlink("in", filepath.Join(root, "in-link"))
	os.Symlink(outside, filepath.Join(root, "out-link"))
	d := startDaemon(t, kilndaemon.Options{WorkspaceRoot: root})
	for i, tt := range []struct {
		cwd, dir string // dir: where it runs, "" when refused
	}{
		{root, root},
		{"in", filepath.Join(root, "in")},
		{filepath.Join(root, "in"), filepath.Join(root, "in")},
		{"in-link", filepath.Join(root, "in")},
		{"..", ""},
		{"in/../../outside", ""},
		{"out-link", ""},
		{filepath.Join(root, "out-link"), ""},
	} {
		id := "s" + strconv.Itoa(i)
		resp, data := d.do("POST", "/v1/sessions", map[string]any{"id": id, "cwd": tt.cwd})
		if tt.dir == "" {
			d.want(resp, data, 400, nil)
			if !strings.Contains(string(data), "outside the workspace root") {
				t.Errorf("cwd %q: %s; want it refused as outside the workspace root", tt.cwd, data)
			}
			continue
		}
		d.want(resp, data, 201, nil)
		resp, data = d.do("PUT", "/v1/sessions/"+id+"/files/f", id)
		d.want(resp, data, 200, nil)
		if got, err := os.ReadFile(filepath.Join(tt.dir, "f")); err != nil || string(got) != id {
			t.Errorf("cwd %q: the file is %q %v in %s", tt.cwd, got, err, tt.dir)
		}
		resp, data = d.do("DELETE", "/v1/sessions/"+id, nil)
		d.want(resp, data, 200, nil)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("a session wrote outside the root: %v", ents)
	}
}

// pyRepr is s as Python's repr shows a plain string.
func pyRepr(s string) string { return "'" + s + "'" }
