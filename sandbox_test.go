package kiln_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kilnrt/kiln"
	"github.com/kilnrt/kiln/client"
	"github.com/kilnrt/kiln/daemon"
)

// escapeCell is cell code that tries, from a workbench, what its workspace should
// keep it from: a file in the home directory, the durable record, and a write outside
// the workspace through workspace.run. It prints one line per attempt.
func escapeCell(home, data, outside string) string {
	return fmt.Sprintf(`import os
def attempt(name, f):
    try:
        f()
        print(name, "escaped")
    except OSError as e:
        print(name, "refused", e.errno)
attempt("home", lambda: open(%q).read())
attempt("record", lambda: open(%q, "rb").read(16))
r = await runtime.workspace.run(["sh", "-c", "echo x > %s/planted"])
print("run", "escaped" if r["exit_code"] == 0 else "refused", r["exit_code"])
`, filepath.Join(home, "secret"), filepath.Join(data, "kiln.db"), outside)
}

// TestAWorkbenchStaysInItsWorkspace runs the escapes in a workbench under workspace,
// where each is refused, and under none, where each works; runtime.inspect says which
// profile confines the cell.
func TestAWorkbenchStaysInItsWorkspace(t *testing.T) {
	home, outside := t.TempDir(), t.TempDir()
	t.Setenv("HOME", home)
	os.WriteFile(filepath.Join(home, "secret"), []byte("s"), 0o600)
	for _, profile := range []string{kiln.SandboxWorkspace, kiln.SandboxNone} {
		t.Run(profile, func(t *testing.T) {
			data := t.TempDir()
			wb, err := kiln.OpenWorkbench(context.Background(), kiln.WorkbenchOptions{DataDir: data, Workspace: t.TempDir(), Sandbox: profile})
			if err != nil {
				t.Fatal(err)
			}
			defer wb.Close()
			rec, err := wb.Execute(context.Background(), escapeCell(home, data, outside))
			if err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			for _, o := range rec.Output {
				out.WriteString(o.Text)
			}
			want := "escaped"
			if profile != kiln.SandboxNone {
				want = "refused"
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if len(lines) != 3 {
				t.Fatalf("status %s, output %q", rec.Status, out.String())
			}
			for _, line := range lines {
				if strings.Fields(line)[1] != want {
					t.Errorf("%s: %q; want %s", profile, line, want)
				}
			}
			rec, err = wb.Execute(context.Background(), `(await runtime.inspect())["sandbox"]["profile"]`)
			if err != nil || rec.Status != kiln.StatusOK || len(rec.Output) != 1 || rec.Output[0].Text != "'"+profile+"'" {
				t.Errorf("runtime.inspect's sandbox: %v %+v; want profile %s", err, rec, profile)
			}
		})
	}
}

// TestAProgramRecordsItsSandbox checks that a program run under workspace cannot
// write outside its directory, and that its result says what confined it.
func TestAProgramRecordsItsSandbox(t *testing.T) {
	outside := t.TempDir()
	r, err := kiln.NewRunner(context.Background(), kiln.RunnerOptions{Dir: t.TempDir(), Sandbox: kiln.SandboxWorkspace})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	res, err := r.Run(context.Background(), kiln.Program{Source: fmt.Sprintf(`try:
    open(%q, "w")
    return "escaped"
except OSError as e:
    return "refused"`, filepath.Join(outside, "planted"))})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != kiln.RunOK || fmt.Sprint(res.Value) != "refused" {
		t.Errorf("status %s, value %v, error %q; want refused", res.Status, res.Value, res.Error)
	}
	if res.Sandbox == nil || res.Sandbox.Profile != kiln.SandboxWorkspace || !res.Sandbox.Seccomp || res.Sandbox.Landlock == 0 {
		t.Errorf("sandbox %+v; want workspace with Landlock and seccomp", res.Sandbox)
	}
	data, err := res.MarshalJSON()
	if err != nil || !strings.Contains(string(data), `"sandbox":{"profile":"workspace"`) {
		t.Errorf("JSON %s, %v; want the sandbox in it", data, err)
	}
}

// takeover is the cell of session attacker that reaches the daemon's socket and asks
// it to run code in session victim, printing what came back.
func takeover(data string) string {
	return fmt.Sprintf(`import http.client, json, socket
class Unix(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(%q)
try:
    c = Unix("kiln")
    c.request("POST", "/v1/sessions/victim/executions", json.dumps({"code": "secret"}), {"Content-Type": "application/json"})
    print("took over:", c.getresponse().read().decode())
except OSError as e:
    print("refused", e.errno)
`, filepath.Join(data, client.SocketFile))
}

// TestACellCannotTakeOverAnotherSession runs the cross-session takeover through a
// daemon: under workspace the attacker's cell cannot reach the daemon's socket; under
// none it reads the victim's variable.
func TestACellCannotTakeOverAnotherSession(t *testing.T) {
	t.Parallel()
	for _, profile := range []string{kiln.SandboxWorkspace, kiln.SandboxNone} {
		t.Run(profile, func(t *testing.T) {
			data := t.TempDir()
			servedWith(t, daemon.Options{DataDir: data, Workspace: t.TempDir(), Sandbox: profile}, func(d *client.Daemon) {
				ctx := context.Background()
				for _, s := range []string{"victim", "attacker"} {
					if _, err := d.OpenSession(ctx, s); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := d.Execute(ctx, "victim", "secret = 4141", nil); err != nil {
					t.Fatal(err)
				}
				rec, err := d.Execute(ctx, "attacker", takeover(data), nil)
				if err != nil {
					t.Fatal(err)
				}
				var out strings.Builder
				for _, o := range rec.Output {
					out.WriteString(o.Text)
				}
				took := strings.Contains(out.String(), "4141")
				if profile == kiln.SandboxNone && !took || profile != kiln.SandboxNone && (took || !strings.HasPrefix(out.String(), "refused")) {
					t.Errorf("%s: %q", profile, out.String())
				}
			})
		})
	}
}

// servedWith is served with the daemon's options.
func servedWith(t *testing.T, opts daemon.Options, fn func(*client.Daemon)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan struct{}), make(chan error, 1)
	opts.Ready = func(daemon.Info) { close(ready) }
	go func() { done <- daemon.Serve(ctx, opts) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	select {
	case <-ready:
	case err := <-done:
		done <- err
		t.Fatalf("serve: %v", err)
	}
	d, err := client.DialDaemon(ctx, opts.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	fn(d)
}
