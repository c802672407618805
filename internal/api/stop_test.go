package api_test

import (
	"net"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	kilndaemon "github.com/kilnrt/kiln/daemon"
)

// stubborn is a cell that connects to b, sends "r" once it catches interrupts, then
// reads from the connection until it ends, sending "i" back for each interrupt rather
// than stopping: only a hard stop ends it.
func stubborn(b *blocker) string {
	return "import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect(" + strconv.Quote(b.path) + ")\nsay = b'r'\n" +
		"while True:\n    try:\n        s.send(say)\n        if not s.recv(1):\n            break\n    except KeyboardInterrupt:\n        say = b'i'"
}

// told reads the byte a cell sends on conn, within a bound, and fails t unless it is want.
func told(t *testing.T, conn net.Conn, want byte, what string) {
	t.Helper()
	got := make(chan error, 1)
	b := make([]byte, 1)
	go func() {
		_, err := conn.Read(b)
		got <- err
	}()
	if err := await(t, got, what); err != nil || b[0] != want {
		t.Fatalf("%s: read %q, %v; want %q", what, b, err, want)
	}
}

// stopping creates session id with an interrupt grace of 500 ms, runs a stubborn cell
// there and deletes the session. It returns once the stop has interrupted the cell,
// which holds the stop until the grace runs out, with the DELETE's status to come.
func stopping(t *testing.T, d *daemon, b *blocker, id string) <-chan int {
	t.Helper()
	resp, data := d.do("POST", "/v1/sessions", map[string]any{"id": id, "limits": map[string]any{"interrupt_grace_ms": 500}})
	d.want(resp, data, http.StatusCreated, nil)
	d.execute(id, stubborn(b), 0)
	conn := await(t, b.accepted, "the cell's connection")
	t.Cleanup(func() { conn.Close() })
	told(t, conn, 'r', "the cell's readiness")
	deleted := make(chan int, 1)
	go func() {
		resp, _ := d.do("DELETE", "/v1/sessions/"+id, nil)
		deleted <- resp.StatusCode
	}()
	told(t, conn, 'i', "the stop's interrupt")
	return deleted
}

// TestCreatingASessionThatStopsWaitsForItsStop creates a session's id again while its
// DELETE still waits for a cell that outlasts its interrupt: the create waits for the
// stop (the old runtime holds the session's lease), then opens the session anew.
func TestCreatingASessionThatStopsWaitsForItsStop(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{Heartbeat: time.Hour})
	b := newBlocker(t)
	deleted := stopping(t, d, b, "r")
	resp, data := d.do("POST", "/v1/sessions", map[string]any{"id": "r"})
	d.want(resp, data, http.StatusCreated, nil)
	if code := await(t, deleted, "the DELETE"); code != http.StatusOK {
		t.Errorf("DELETE: %d", code)
	}
	var info struct {
		State string `json:"state"`
	}
	resp, data = d.do("GET", "/v1/sessions/r", nil)
	d.want(resp, data, http.StatusOK, &info)
	state, err := sessionFile(t, d, "r")
	if info.State != "open" || state != "open" || err != nil {
		t.Errorf("the session created again is %q; its file says %q (%v)", info.State, state, err)
	}
	if _, rec := d.execute("r", "1 + 1", 10000); result(rec) != "2" {
		t.Errorf("a cell of the session created again: %+v", rec)
	}
}

// TestAPruneLeavesASessionThatStops prunes while a DELETE still waits for a cell that
// outlasts its interrupt: the session is kept until its stop has ended, so that the
// stop cannot write the file of a session pruned.
func TestAPruneLeavesASessionThatStops(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{Heartbeat: time.Hour})
	b := newBlocker(t)
	deleted := stopping(t, d, b, "p")
	var pruned struct {
		Pruned []string `json:"pruned"`
	}
	resp, data := d.do("POST", "/v1/sessions:prune", nil)
	d.want(resp, data, http.StatusOK, &pruned)
	if len(pruned.Pruned) != 0 {
		t.Errorf("a prune while the session stops: %s; want it kept until stopped", data)
	}
	if code := await(t, deleted, "the DELETE"); code != http.StatusOK {
		t.Errorf("DELETE: %d", code)
	}
	resp, data = d.do("POST", "/v1/sessions:prune", nil)
	d.want(resp, data, http.StatusOK, &pruned)
	if len(pruned.Pruned) != 1 || pruned.Pruned[0] != "p" {
		t.Errorf("a prune once the session stopped: %s", data)
	}
	if state, err := sessionFile(t, d, "p"); !os.IsNotExist(err) {
		t.Errorf("the file of the session pruned: %q %v", state, err)
	}
	resp, data = d.do("GET", "/v1/sessions/p", nil)
	d.want(resp, data, http.StatusNotFound, nil)
}
