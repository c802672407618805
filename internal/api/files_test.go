package api_test

import (
	"context"
	kilndaemon "github.com/kilnrt/kiln/daemon"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kilnrt/kiln/internal/api"
	"github.com/kilnrt/kiln/internal/serve"
)

// TestAPutKeepsTheModeOfTheFileItReplaces: a PUT over an executable file leaves it
// executable; a new file is 0644.
func TestAPutKeepsTheModeOfTheFileItReplaces(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{WorkspaceRoot: os.TempDir()})
	dir := t.TempDir()
	resp, data := d.do("POST", "/v1/sessions", map[string]any{"id": "m", "cwd": dir})
	d.want(resp, data, 201, nil)
	if err := os.WriteFile(filepath.Join(dir, "run.sh"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(dir, "run.sh"), 0o755)
	for name, want := range map[string]os.FileMode{"run.sh": 0o755, "new.txt": 0o644} {
		resp, data := d.do("PUT", "/v1/sessions/m/files/"+name, "#!/bin/sh\necho hi\n")
		d.want(resp, data, 200, nil)
		info, err := os.Stat(filepath.Join(dir, name))
		if err != nil || info.Mode().Perm() != want {
			t.Errorf("%s after a PUT: %v %v; want %v", name, info.Mode(), err, want)
		}
	}
}

// TestAPutRemovesTheTempFilesAKilledWriteLeft: a temporary file a killed daemon left
// beside a file is removed by the next write there once older than serve.StaleTemp;
// one younger, which a write under way may own, stays.
func TestAPutRemovesTheTempFilesAKilledWriteLeft(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{WorkspaceRoot: os.TempDir()})
	dir := t.TempDir()
	resp, data := d.do("POST", "/v1/sessions", map[string]any{"id": "t", "cwd": dir})
	d.want(resp, data, 201, nil)
	stale := filepath.Join(dir, ".f.kiln-0123456789abcdef")
	young := filepath.Join(dir, ".g.kiln-fedcba9876543210")
	other := filepath.Join(dir, ".f.kiln-notatemp")
	for _, p := range []string{stale, young, other} {
		if err := os.WriteFile(p, make([]byte, 1<<20), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-serve.StaleTemp - time.Minute)
	os.Chtimes(stale, old, old)
	os.Chtimes(other, old, old)
	resp, data = d.do("PUT", "/v1/sessions/t/files/f", "x")
	d.want(resp, data, 200, nil)
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the stale temporary file stays: %v", err)
	}
	for _, p := range []string{young, other} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s was removed: %v", p, err)
		}
	}
}

// TestACwdInProcIsRefused: a session whose cwd is in /proc (through a symlink too) or
// /sys is refused, saying why, rather than serving its files as empty, even under a
// workspace root that holds them.
func TestACwdInProcIsRefused(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{WorkspaceRoot: "/"})
	for i, cwd := range []string{"/proc/self", "/proc", "/sys/kernel"} {
		resp, data := d.do("POST", "/v1/sessions", map[string]any{"id": "p" + string(rune('0'+i)), "cwd": cwd})
		d.want(resp, data, 400, nil)
		if !strings.Contains(string(data), "/proc, /sys or /dev") {
			t.Errorf("cwd %s: %s", cwd, data)
		}
	}
}

// TestTheStreamBoundIsTheDaemons: with --listen, the socket's streams and the TCP
// listener's count against one MaxStreams, not one each.
func TestTheStreamBoundIsTheDaemons(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{Heartbeat: time.Hour, Listen: "127.0.0.1:0"})
	d.create("s")
	token, err := kilndaemon.Token(d.dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range api.MaxStreams {
		req, _ := http.NewRequestWithContext(ctx, "GET", d.base+"/v1/sessions/s/events", nil)
		resp, err := d.client.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("stream %d of %d on the socket: %v %v", i+1, api.MaxStreams, resp, err)
		}
		defer resp.Body.Close()
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+d.info.Listen+"/v1/sessions/s/events", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	tcp := &http.Client{}
	defer tcp.CloseIdleConnections()
	resp, err := tcp.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	d.want(resp, data, http.StatusTooManyRequests, nil)
}
