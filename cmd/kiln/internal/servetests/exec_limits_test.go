package servetests

import (
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
	"github.com/kilnrt/kiln/internal/bombtest"
)

// TestExecThroughADaemonAppliesItsLimits runs kiln exec --session through a real
// daemon that confines nothing, with a limit each time, and a cell past it: each is
// stopped and its record names the limit; --sandbox opens the session confined. A
// session open with other limits is refused, the same ones or none attach, and a
// limit the session's profile cannot apply is refused. kiln sessions show says what
// confines the session.
func TestExecThroughADaemonAppliesItsLimits(t *testing.T) {
	t.Parallel()
	dir := clitest.ShortTemp(t)
	clitest.StartServe(t, dir)
	exec := func(args ...string) (rec map[string]any, out string, err error) {
		t.Helper()
		cmd := clitest.Command(t, append([]string{"exec", "--data", dir, "--json"}, args...)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		stdout, err := cmd.Output()
		if len(stdout) > 0 {
			if jerr := json.Unmarshal(stdout, &rec); jerr != nil {
				t.Fatalf("kiln exec %q: %s: %v", args, stdout, jerr)
			}
		}
		return rec, string(stdout) + stderr.String(), err
	}
	for _, c := range []struct {
		args  []string
		code  string
		limit string
	}{
		{[]string{"--session", "m", "--memory", "256M"}, bombtest.Memory, "memory"},
		{[]string{"--session", "c", "--cpu-seconds", "1"}, bombtest.Busy, "cpu_seconds"},
		{[]string{"--session", "p", "--sandbox", "workspace", "--max-processes", "32"}, bombtest.Fork(40), "max_processes"},
	} {
		rec, out, _ := exec(append(c.args, c.code)...)
		if rec["limit"] != c.limit {
			t.Errorf("kiln exec %q and a bomb: %s; want limit %s", c.args, out, c.limit)
		}
	}
	for _, c := range []struct {
		args []string
		says string // "" for a cell that runs
	}{
		{[]string{"--session", "m", "--memory", "100M"}, fmt.Sprintf("limits.memory_bytes %d, not %d", 256<<20, 100<<20)},
		{[]string{"--session", "m", "--sandbox", "strict"}, "is open with sandbox"},
		{[]string{"--session", "m", "--memory", "256M"}, ""},
		{[]string{"--session", "m"}, ""},
		{[]string{"--session", "x", "--sandbox", "none", "--max-processes", "32"}, "max_processes 32 needs a confining sandbox"},
		{[]string{"--session", "x", "--memory", "1M"}, "limits.memory_bytes must be 0 (none) or"},
	} {
		rec, out, err := exec(append(c.args, "6 * 7")...)
		switch {
		case c.says == "" && (err != nil || rec["status"] != "ok"):
			t.Errorf("kiln exec %q: %v %s; want the cell run", c.args, err, out)
		case c.says != "" && (err == nil || !strings.Contains(out, c.says)):
			t.Errorf("kiln exec %q: %v %s; want it refused naming %q", c.args, err, out, c.says)
		}
	}
	out, err := clitest.Command(t, "sessions", "show", "--data", dir, "p").Output()
	if err != nil {
		t.Fatal(err)
	}
	var shown struct {
		Config struct {
			Sandbox string `json:"sandbox"`
			Limits  struct {
				MaxProcesses int64 `json:"max_processes"`
			} `json:"limits"`
		} `json:"config"`
		Sandbox struct {
			Profile   string `json:"profile"`
			Processes int64  `json:"max_processes"`
			Seccomp   bool   `json:"seccomp"`
		} `json:"sandbox"`
	}
	if err := json.Unmarshal(out, &shown, json.RejectUnknownMembers(false)); err != nil {
		t.Fatalf("kiln sessions show: %s: %v", out, err)
	}
	if shown.Config.Sandbox != "workspace" || shown.Config.Limits.MaxProcesses != 32 || shown.Sandbox.Profile != "workspace" ||
		shown.Sandbox.Processes != 32 || !shown.Sandbox.Seccomp {
		t.Errorf("kiln sessions show p: %s; want the session's profile and limit, and what applied", out)
	}
}

// TestKilnTomlConfinesAndBoundsSessions checks kiln.toml's [limits], which bound every
// session of a real daemon, and [sessions.NAME], which confines and bounds one: a cell
// past each is stopped; a [sandbox] kiln does not know stops kiln serve, naming it.
func TestKilnTomlConfinesAndBoundsSessions(t *testing.T) {
	t.Parallel()
	dir := clitest.ShortTemp(t)
	toml := "[limits]\ncpu_seconds = 1\n[sessions.pids]\nsandbox = \"workspace\"\nlimits = { max_processes = 32 }\n"
	if err := os.WriteFile(filepath.Join(dir, "kiln.toml"), []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	clitest.StartServe(t, dir)
	for _, c := range []struct{ session, code, limit string }{
		{"c", bombtest.Busy, "cpu_seconds"},
		{"pids", bombtest.Fork(40), "max_processes"},
	} {
		out, _ := clitest.Command(t, "exec", "--data", dir, "--json", "--session", c.session, c.code).Output()
		var rec struct {
			Limit string `json:"limit"`
		}
		if err := json.Unmarshal(out, &rec, json.RejectUnknownMembers(false)); err != nil || rec.Limit != c.limit {
			t.Errorf("session %s, a bomb: %s %v; want limit %s", c.session, out, err, c.limit)
		}
	}

	bad := clitest.ShortTemp(t)
	if err := os.WriteFile(filepath.Join(bad, "kiln.toml"), []byte("[sandbox]\nprofile = \"jail\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := clitest.Command(t, "serve", "--data", bad, "--workspace", t.TempDir())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err == nil || !strings.Contains(stderr.String(), "kiln.toml:2: sandbox.profile") {
			t.Errorf("kiln serve with [sandbox] profile jail: %v %s; want it refused naming the key", err, stderr.String())
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-exited
		t.Fatalf("kiln serve with [sandbox] profile jail still runs after 60s")
	}
}

// TestAProfileTheKernelCannotGiveIsRefused runs a real daemon as an unprivileged user,
// who may not mount in a namespace of its own: a session that asks for workspace is
// refused, 422 cannot_apply, naming the missing namespaces; one that asks for it best
// effort opens, and says what was left out.
func TestAProfileTheKernelCannotGiveIsRefused(t *testing.T) {
	t.Parallel()
	const nobody = 65534
	setpriv, err := osexec.LookPath("setpriv")
	if os.Getuid() != 0 || err != nil {
		t.Skip("needs root, to serve as another user, and setpriv")
	}
	root, err := os.MkdirTemp("", "kn")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	bin, data, work := filepath.Join(root, "kiln"), filepath.Join(root, "d"), filepath.Join(root, "w")
	body, err := os.ReadFile(clitest.Command(t).Path)
	if err == nil {
		err = os.WriteFile(bin, body, 0o755)
	}
	for _, dir := range []string{data, work} {
		if err == nil {
			err = os.Mkdir(dir, 0o700)
		}
		if err == nil {
			err = os.Chown(dir, nobody, nobody)
		}
	}
	if err == nil {
		err = os.Chmod(root, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	// sh drops the test's own kiln from the arguments, and runs the copy as nobody.
	prefix := []string{"sh", "-c", fmt.Sprintf(`shift; exec %s --reuid=%d --regid=%d --clear-groups env KILN_PYTHON=/usr/bin/python3 %s "$@"`, setpriv, nobody, nobody, bin), "sh"}
	s := clitest.StartServeCommand(t, prefix, data, "--workspace", work)
	var p struct {
		Code   string `json:"code"`
		Detail string `json:"detail"`
	}
	s.Call("POST", "/v1/sessions", `{"id":"w","sandbox":"workspace"}`, 422, &p)
	if p.Code != "cannot_apply" || !strings.Contains(p.Detail, "workspace needs user, mount and PID namespaces") {
		t.Errorf("workspace as an unprivileged user: %+v; want cannot_apply naming the namespaces", p)
	}
	var info struct {
		Sandbox struct {
			Profile string   `json:"profile"`
			Missing []string `json:"missing"`
		} `json:"sandbox"`
	}
	s.Call("POST", "/v1/sessions", `{"id":"b","sandbox":"workspace:best-effort"}`, 201, &info)
	if info.Sandbox.Profile != "workspace:best-effort" || len(info.Sandbox.Missing) == 0 {
		t.Errorf("best effort as an unprivileged user: %+v; want it open, saying what was left out", info.Sandbox)
	}
}
