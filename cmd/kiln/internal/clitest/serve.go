package clitest

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/internal/poll"
)

// Served is a kiln serve subprocess and an HTTP client on its socket.
type Served struct {
	T      testing.TB
	Cmd    *exec.Cmd
	Client *http.Client
	Exited chan error // the daemon's exit, once its stderr has ended
	Listen string     // the TCP listener's address, with --listen
}

// StartServe starts kiln serve on dir and waits until it serves.
func StartServe(t testing.TB, dir string, args ...string) *Served {
	t.Helper()
	return StartServeCommand(t, nil, dir, args...)
}

// StartServeCommand is StartServe with kiln run by the command prefix, such as ip netns
// exec NAME, which ends by executing it.
func StartServeCommand(t testing.TB, prefix []string, dir string, args ...string) *Served {
	t.Helper()
	if !slices.Contains(args, "--sandbox") {
		// Cells here reach the tests' files outside their workspace (a gate in a temporary
		// directory, say): they run unconfined unless a test asks.
		args = append([]string{"--sandbox", "none"}, args...)
	}
	cmd := Command(t, append([]string{"serve", "--data", dir, "--workspace", t.TempDir()}, args...)...)
	if len(prefix) > 0 {
		cmd = exec.Command(prefix[0], append(append(prefix[1:], cmd.Path), cmd.Args[1:]...)...)
	}
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &Served{T: t, Cmd: cmd, Exited: make(chan error, 1)}
	ready := make(chan struct{})
	last := "kiln: serving on " // the last line of the announcement: the TCP listener's, with --listen
	if slices.Contains(args, "--listen") {
		last = "kiln: serving on http"
	}
	go func() {
		sc := bufio.NewScanner(pipe)
		signal := ready
		for sc.Scan() {
			if signal != nil && strings.HasPrefix(sc.Text(), last) {
				if addr, ok := strings.CutPrefix(sc.Text(), last); ok && last != "kiln: serving on " {
					addr = strings.TrimPrefix(strings.TrimPrefix(addr, "s"), "://")
					s.Listen, _, _ = strings.Cut(addr, " ")
				}
				close(signal)
				signal = nil
			}
		}
		s.Exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Signal(syscall.SIGTERM)
			<-s.Exited
		}
	})
	select {
	case <-ready:
	case err := <-s.Exited:
		t.Fatalf("kiln serve exited before serving: %v", err)
	}
	sock := dir + "/kiln.sock"
	s.Client = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	t.Cleanup(s.Client.CloseIdleConnections)
	return s
}

// Call sends a JSON request and decodes the answer into v, checking its status.
func (s *Served) Call(method, path, body string, status int, v any) {
	s.T.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, "http://kiln"+path, r)
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.Client.Do(req)
	if err != nil {
		s.T.Fatalf("%s %s: %v", method, path, err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != status {
		s.T.Fatalf("%s %s: %d %s; want %d", method, path, resp.StatusCode, data, status)
	}
	if v != nil {
		if err := json.Unmarshal(data, v, json.RejectUnknownMembers(false)); err != nil {
			s.T.Fatalf("%s: %v", data, err)
		}
	}
}

// Do sends a request and returns the answer's status and body, whatever they are; 0
// for a daemon that does not answer.
func (s *Served) Do(method, path, body string) (int, []byte) {
	req, _ := http.NewRequest(method, "http://kiln"+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.Client.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// Kill ends the daemon with SIGKILL, and fails the test unless its worker and every
// process below it end with it.
func (s *Served) Kill(worker int) {
	s.T.Helper()
	// Every process below the daemon: its zygote and the workers forked from it are
	// its children too.
	all := append(Descendants(s.Cmd.Process.Pid), worker)
	s.Cmd.Process.Signal(syscall.SIGKILL)
	<-s.Exited
	for _, pid := range all {
		if !poll.Wait(5*time.Second, func() bool { return !ProcessExists(pid) }) {
			syscall.Kill(pid, syscall.SIGKILL)
			s.T.Fatalf("process %d outlived the daemon", pid)
		}
	}
}

// ExecRecord is what the tests read of an execution.
type ExecRecord struct {
	ID             string  `json:"id"`
	Status         string  `json:"status"`
	Generation     string  `json:"generation"`
	Error          *string `json:"error"`
	NamespaceLost  bool    `json:"namespace_lost"`
	FreshNamespace bool    `json:"fresh_namespace"`
	Output         []struct {
		Stream string `json:"stream"`
		Text   string `json:"text"`
	} `json:"output"`
}
