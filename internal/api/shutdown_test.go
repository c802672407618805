package api_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	kilndaemon "github.com/kilnrt/kiln/daemon"
	"github.com/kilnrt/kiln/internal/poll"
)

// interruptible is a cell that connects to b, sends "r" once it catches interrupts, and
// reads from the connection until it ends; an interrupt closes the connection, which
// tells b's end.
func interruptible(b *blocker) string {
	return "import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect(" + strconv.Quote(b.path) + ")\n" +
		"try:\n    s.send(b'r')\n    while s.recv(1):\n        pass\nexcept KeyboardInterrupt:\n    s.close()\n    raise"
}

// dialRaw opens a connection to d's socket, closed when the test ends.
func dialRaw(t *testing.T, d *daemon) net.Conn {
	t.Helper()
	conn, err := net.Dial("unix", d.info.Socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// readLine reads a line the daemon sends on r, within a bound.
func readLine(t *testing.T, conn net.Conn, r *bufio.Reader, what string) string {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return line
}

// TestStalledClientsHoldNeitherTheCellsNorTheStop stops the daemon while one client
// holds an event stream it never reads and another sends half a file: the running cell
// is interrupted at once, not once the answers have drained; the stalled clients are cut
// off within ShutdownGrace; and no handler outlives Serve, so the file never lands.
func TestStalledClientsHoldNeitherTheCellsNorTheStop(t *testing.T) {
	work := t.TempDir()
	d := startDaemon(t, kilndaemon.Options{Heartbeat: time.Hour, Workspace: work})
	d.create("b")
	for range 15 { // more events than a socket's buffers hold
		d.execute("b", "print('x' * 60000)", 10000)
	}
	b := newBlocker(t)
	d.execute("b", interruptible(b), 0)
	cell := await(t, b.accepted, "the cell's connection")
	defer cell.Close()
	told(t, cell, 'r', "the cell's readiness")

	stream := dialRaw(t, d)
	fmt.Fprintf(stream, "GET /v1/events HTTP/1.1\r\nHost: kiln\r\n\r\n")
	if line := readLine(t, stream, bufio.NewReader(stream), "the stream's answer"); !strings.HasPrefix(line, "HTTP/1.1 200") {
		t.Fatalf("the stream: %q", line)
	}
	upload := dialRaw(t, d)
	fmt.Fprintf(upload, "PUT /v1/sessions/b/files/late.bin HTTP/1.1\r\nHost: kiln\r\nContent-Length: 100000\r\nExpect: 100-continue\r\n\r\n")
	uploaded := bufio.NewReader(upload)
	if line := readLine(t, upload, uploaded, "the upload's go-ahead"); !strings.HasPrefix(line, "HTTP/1.1 100") {
		t.Fatalf("the upload: %q", line) // sent once the handler reads the body
	}
	readLine(t, upload, uploaded, "the go-ahead's end")
	io.WriteString(upload, "zzzz")

	began := time.Now()
	stopped := make(chan error, 1)
	go func() { stopped <- d.stop() }()
	interrupted := make(chan error, 1)
	go func() {
		_, err := cell.Read(make([]byte, 1))
		interrupted <- err
	}()
	await(t, interrupted, "the cell's interrupt")
	if took := time.Since(began); took >= kilndaemon.ShutdownGrace {
		t.Errorf("the cell was interrupted %v after the stop; want at once, not after the %v the answers drain", took, kilndaemon.ShutdownGrace)
	}
	if err := await(t, stopped, "Serve's return"); err != nil {
		t.Errorf("Serve: %v", err)
	}
	if n := goroutinesIn("internal/api.(*api)."); n != 0 {
		t.Errorf("%d handlers outlive Serve", n)
	}
	// The stalled connections were closed: the stream ends, and the upload, finished,
	// is answered nothing.
	stream.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, stream); err != nil && !strings.Contains(err.Error(), "reset") {
		t.Errorf("the stalled stream after Serve returned: %v; want it ended", err)
	}
	upload.Write(make([]byte, 100000-4))
	upload.SetReadDeadline(time.Now().Add(10 * time.Second))
	if resp, err := http.ReadResponse(uploaded, nil); err == nil {
		t.Errorf("the stalled upload, finished after Serve returned, is answered %s", resp.Status)
	}
	if _, err := os.Stat(filepath.Join(work, "late.bin")); !os.IsNotExist(err) {
		t.Errorf("the stalled upload landed: %v", err)
	}
}

// TestLongPollsCutByTheStopAnswerTheInterruptedRecord stops the daemon while a POST of
// a cell and a GET of it both wait for its end: each is answered the record the stop
// wrote, interrupted, not the running one and not a 503.
func TestLongPollsCutByTheStopAnswerTheInterruptedRecord(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{Heartbeat: time.Hour})
	d.create("p")
	b := newBlocker(t)
	type answer struct {
		status int
		rec    record
		err    error
	}
	longPoll := func(method, path string, body string) <-chan answer {
		got := make(chan answer, 1)
		go func() {
			req, err := http.NewRequest(method, d.base+path, strings.NewReader(body))
			if err != nil {
				got <- answer{err: err}
				return
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := d.client.Do(req)
			if err != nil {
				got <- answer{err: err}
				return
			}
			defer resp.Body.Close()
			var a answer
			a.status = resp.StatusCode
			data, err := io.ReadAll(resp.Body)
			if err == nil {
				err = json.Unmarshal(data, &a.rec)
			}
			a.err = err
			if a.status != http.StatusOK {
				a.err = fmt.Errorf("%d %s", a.status, data)
			}
			got <- a
		}()
		return got
	}
	body, err := json.Marshal(map[string]any{"code": interruptible(b), "wait_ms": 60000})
	if err != nil {
		t.Fatal(err)
	}
	posted := longPoll("POST", "/v1/sessions/p/executions", string(body))
	cell := await(t, b.accepted, "the cell's connection")
	defer cell.Close()
	told(t, cell, 'r', "the cell's readiness")
	got := longPoll("GET", "/v1/executions/p:c-1?wait_ms=60000", "")
	// Both wait once two handlers are in the session's Wait.
	if !poll.Wait(30*time.Second, func() bool { return goroutinesIn("serve.(*Session).Wait") >= 2 }) {
		t.Fatalf("%d long polls wait after 30s; want 2", goroutinesIn("serve.(*Session).Wait"))
	}
	if err := d.stop(); err != nil {
		t.Errorf("Serve: %v", err)
	}
	for what, ch := range map[string]<-chan answer{"the POST": posted, "the GET": got} {
		a := await(t, ch, what)
		if a.err != nil || a.rec.Status != "interrupted" {
			t.Errorf("%s: %s, %v; want 200 with the interrupted record", what, a.rec.Status, a.err)
		}
	}
}
