package api_test

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
	kilndaemon "github.com/kilnrt/kiln/daemon"
	"github.com/kilnrt/kiln/internal/api"
)

// sessionFile reads the state daemon d keeps of session id in its data directory.
func sessionFile(t *testing.T, d *daemon, id string) (state string, err error) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(d.dir, "serve", "sessions", id+".json"))
	if err != nil {
		return "", err
	}
	var st struct {
		State string `json:"state"`
	}
	if err := json.Unmarshal(data, &st, json.RejectUnknownMembers(false)); err != nil {
		t.Fatalf("session file %s: %v", data, err)
	}
	return st.State, nil
}

// TestACellForASessionWhoseCreationFailsFindsNone sends cells to a session while its
// creation waits for its interpreter, which then fails: the cell waiting for the
// opening finds no session (404), rather than opening the session again unlisted.
func TestACellForASessionWhoseCreationFailsFindsNone(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{Heartbeat: time.Hour})
	b := newBlocker(t)
	dir := t.TempDir()
	mark, hold := filepath.Join(dir, "mark"), filepath.Join(dir, "hold.py")
	held := "import socket, sys\ns = socket.socket(socket.AF_UNIX)\ns.connect(sys.argv[1])\ns.recv(1)\nsys.exit(1)\n"
	if err := os.WriteFile(hold, []byte(held), 0o600); err != nil {
		t.Fatal(err)
	}
	// The first run of the interpreter holds until released, then fails; later ones run.
	py := filepath.Join(dir, "python3")
	script := "#!/bin/sh\nif [ ! -e " + mark + " ]; then\n  : > " + mark + "\n  exec python3 " + hold + " " + b.path + "\nfi\nexec python3 \"$@\"\n"
	if err := os.WriteFile(py, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	created := make(chan int, 1)
	go func() {
		resp, _ := d.do("POST", "/v1/sessions", map[string]any{"id": "o", "python": py})
		created <- resp.StatusCode
	}()
	var conn net.Conn
	select {
	case conn = <-b.accepted: // the session is listed while it opens
	case code := <-created:
		t.Fatalf("the create ended (%d) before its interpreter ran", code)
	}
	defer conn.Close()
	// Two cells: one waits for the opening, the other is refused busy at once.
	answers := make(chan *http.Response, 2)
	for range 2 {
		go func() {
			resp, _ := d.do("POST", "/v1/sessions/o/executions", map[string]any{"code": "1 + 1", "wait_ms": 10000})
			answers <- resp
		}()
	}
	if resp := await(t, answers, "the first cell's answer"); resp.StatusCode != http.StatusConflict {
		t.Fatalf("one of two cells while the session opens: %d; want 409", resp.StatusCode)
	}
	conn.Close()
	if code := await(t, created, "the create"); code == http.StatusCreated {
		t.Fatalf("the create of a session whose interpreter failed: %d", code)
	}
	if resp := await(t, answers, "the waiting cell's answer"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("the cell that waited for a session whose creation failed: %d; want 404", resp.StatusCode)
	}
	resp, data := d.do("GET", "/v1/sessions/o", nil)
	d.want(resp, data, http.StatusNotFound, nil)
	wantCode(t, data, api.CodeNoSession)
	if _, err := sessionFile(t, d, "o"); !os.IsNotExist(err) {
		t.Errorf("the session whose creation failed has a file: %v", err)
	}
	resp, data = d.do("POST", "/v1/sessions", map[string]any{"id": "o"})
	d.want(resp, data, http.StatusCreated, nil)
}
