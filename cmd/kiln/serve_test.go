package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/internal/poll"
)

// served is a kiln serve subprocess and an HTTP client on its socket.
type served struct {
	t      testing.TB
	cmd    *exec.Cmd
	client *http.Client
	exited chan error // the daemon's exit, once its stderr has ended
	listen string     // the TCP listener's address, with --listen
}

// shortTemp is a temporary directory with a path short enough for a Unix socket.
func shortTemp(t testing.TB) string {
	dir, err := os.MkdirTemp("", "ks")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// startServe starts kiln serve on dir and waits until it serves.
func startServe(t testing.TB, dir string, args ...string) *served {
	t.Helper()
	return startServeCommand(t, nil, dir, args...)
}

// startServeCommand is startServe with kiln run by the command prefix, such as ip netns
// exec NAME, which ends by executing it.
func startServeCommand(t testing.TB, prefix []string, dir string, args ...string) *served {
	t.Helper()
	if !slices.Contains(args, "--sandbox") {
		// Cells here reach the tests' files outside their workspace (a gate in a temporary
		// directory, say): they run unconfined unless a test asks.
		args = append([]string{"--sandbox", "none"}, args...)
	}
	cmd := kilnCommand(t, append([]string{"serve", "--data", dir, "--workspace", t.TempDir()}, args...)...)
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
	s := &served{t: t, cmd: cmd, exited: make(chan error, 1)}
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
					s.listen, _, _ = strings.Cut(addr, " ")
				}
				close(signal)
				signal = nil
			}
		}
		s.exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Signal(syscall.SIGTERM)
			<-s.exited
		}
	})
	select {
	case <-ready:
	case err := <-s.exited:
		t.Fatalf("kiln serve exited before serving: %v", err)
	}
	sock := dir + "/kiln.sock"
	s.client = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	t.Cleanup(s.client.CloseIdleConnections)
	return s
}

// call sends a JSON request and decodes the answer into v, checking its status.
func (s *served) call(method, path, body string, status int, v any) {
	s.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, "http://kiln"+path, r)
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != status {
		s.t.Fatalf("%s %s: %d %s; want %d", method, path, resp.StatusCode, data, status)
	}
	if v != nil {
		if err := json.Unmarshal(data, v, json.RejectUnknownMembers(false)); err != nil {
			s.t.Fatalf("%s: %v", data, err)
		}
	}
}

// execRecord is what these tests read of an execution.
type execRecord struct {
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

func TestDaemonKilledMidCellIsRecordedHonestlyAfterRestart(t *testing.T) {
	t.Parallel()
	killedMidCell(t)
}

// killedMidCell kills a daemon started with args while a cell runs, and checks what the
// next daemon on the same record says of the cell and the session.
func killedMidCell(t *testing.T, args ...string) {
	dir := shortTemp(t)
	s := startServe(t, dir, args...)
	s.call("POST", "/v1/sessions", `{"id":"s"}`, 201, nil)
	s.call("POST", "/v1/sessions/s/executions", `{"code":"x = 1"}`, 200, nil)
	var rec execRecord
	s.call("POST", "/v1/sessions/s/executions", `{"code":"import time\ntime.sleep(100)","wait_ms":0}`, 202, &rec)
	worker := waitForChild(t, s.cmd.Process.Pid)
	s.kill(worker)

	s2 := startServe(t, dir, args...)
	var list struct {
		Sessions []struct {
			ID    string `json:"id"`
			State string `json:"state"`
		} `json:"sessions"`
	}
	s2.call("GET", "/v1/sessions", "", 200, &list)
	if len(list.Sessions) != 1 || list.Sessions[0].ID != "s" || list.Sessions[0].State != "open" {
		t.Fatalf("sessions after the restart: %+v", list)
	}
	var closed execRecord
	s2.call("GET", "/v1/executions/"+rec.ID, "", 200, &closed)
	if closed.Status != "failed" || !closed.NamespaceLost || closed.Error == nil || !strings.Contains(*closed.Error, "host ended") {
		t.Fatalf("the cell the daemon died in: %+v", closed)
	}
	var next execRecord
	s2.call("POST", "/v1/sessions/s/executions", `{"code":"'x' in dir()"}`, 200, &next)
	if !next.FreshNamespace || next.Generation == closed.Generation || len(next.Output) != 1 || next.Output[0].Text != "False" {
		t.Fatalf("the next cell: %+v", next)
	}
}

func TestDaemonSIGTERMInterruptsAndRecords(t *testing.T) {
	t.Parallel()
	dir := shortTemp(t)
	s := startServe(t, dir)
	s.call("POST", "/v1/sessions", `{"id":"s"}`, 201, nil)
	s.call("POST", "/v1/sessions/s/executions", `{"code":"import time"}`, 200, nil)
	var rec execRecord
	s.call("POST", "/v1/sessions/s/executions", `{"code":"while True: time.sleep(0.01)","wait_ms":0}`, 202, &rec)
	s.cmd.Process.Signal(syscall.SIGTERM)
	if err := <-s.exited; err != nil {
		t.Fatalf("daemon exit: %v", err)
	}
	if _, err := os.Stat(dir + "/kiln.sock"); !os.IsNotExist(err) {
		t.Errorf("the socket is left: %v", err)
	}
	s2 := startServe(t, dir)
	var got execRecord
	s2.call("GET", "/v1/executions/"+rec.ID, "", 200, &got)
	if got.Status != "interrupted" {
		t.Fatalf("the cell running at SIGTERM: %+v", got)
	}
}

func TestSecondServeFailsNamingTheFirst(t *testing.T) {
	t.Parallel()
	dir := shortTemp(t)
	s := startServe(t, dir)
	var out, errs strings.Builder
	code := run(t.Context(), []string{"serve", "--data", dir}, strings.NewReader(""), &out, &errs)
	if code != exitFail || !strings.Contains(errs.String(), "held by another daemon") ||
		!strings.Contains(errs.String(), "pid "+itoa(s.cmd.Process.Pid)) {
		t.Fatalf("second serve: exit %d, %q", code, errs.String())
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// kilnOut runs kiln with args in a subprocess and returns its stdout, failing the test
// unless it exits 0.
func kilnOut(t *testing.T, args ...string) string {
	t.Helper()
	cmd := kilnCommand(t, args...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kiln %q: %v\nstdout %s\nstderr %s", args, err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

func TestCLIGoesThroughTheDaemon(t *testing.T) {
	t.Parallel()
	dir := shortTemp(t)
	startServe(t, dir)
	kilnOut(t, "exec", "--data", dir, "--session", "S", "x = 41")
	if out := kilnOut(t, "exec", "--data", dir, "--session", "S", "print('out')", "x + 1"); out != "out\n42\n" {
		t.Fatalf("the second exec printed %q; want the namespace kept", out)
	}
	if out := kilnOut(t, "exec", "--data", dir, "--session", "S", "--json", "x"); !strings.Contains(out, `"status":"ok"`) || !strings.Contains(out, `"text":"41"`) {
		t.Fatalf("exec --json: %s", out)
	}
	out := kilnOut(t, "send", "--data", dir, "--session", "S", "hello there")
	if !strings.HasPrefix(out, "event:") || !strings.Contains(out, "attention: wake") {
		t.Fatalf("send: %q", out)
	}
	if out := kilnOut(t, "transcript", "show", "--data", dir, "--json", "S"); !strings.Contains(out, "hello there") {
		t.Fatalf("transcript: %s", out)
	}
	if out := kilnOut(t, "sessions", "list", "--data", dir); !strings.Contains(out, "S ") || !strings.Contains(out, "open") {
		t.Fatalf("sessions list: %s", out)
	}

	follow := kilnCommand(t, "log", "--data", dir, "--session", "S", "--follow")
	pipe, _ := follow.StdoutPipe()
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	defer follow.Process.Kill()
	lines := bufio.NewScanner(pipe)
	until := func(want string) {
		t.Helper()
		for lines.Scan() {
			if strings.Contains(lines.Text(), want) {
				return
			}
		}
		t.Fatalf("the log ended before %q", want)
	}
	until("c-3 g-1 ended ok")
	kilnOut(t, "exec", "--data", dir, "--session", "S", "'again'")
	until("c-4 g-1 ended ok")
	follow.Process.Signal(os.Interrupt)
	if err := follow.Wait(); err != nil {
		t.Fatalf("log --follow at Ctrl-C: %v", err)
	}

	// A rich final value is shown once, when the cell's output comes live: the cell goes
	// on only after its first line has reached this test.
	gate := filepath.Join(t.TempDir(), "gate")
	rich := kilnCommand(t, "exec", "--data", dir, "--session", "S", "import os, time\n"+
		"class H:\n    def _repr_html_(self): return '<b>h</b>'\n    def __repr__(self): return 'H()'\n"+
		"print('before', flush=True)\nwhile not os.path.exists("+strconv.Quote(gate)+"): time.sleep(0.01)\nH()")
	richOut, _ := rich.StdoutPipe()
	if err := rich.Start(); err != nil {
		t.Fatal(err)
	}
	richLines := bufio.NewReader(richOut)
	if line, err := richLines.ReadString('\n'); line != "before\n" {
		t.Fatalf("the rich cell's first line: %q, %v", line, err)
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(richLines)
	if err := rich.Wait(); err != nil || string(rest) != "H()\n" {
		t.Fatalf("a rich final value through the daemon printed %q after its first line (%v); want it once", rest, err)
	}

	if out := kilnOut(t, "sessions", "stop", "--data", dir, "S"); out != "S stopped\n" {
		t.Fatalf("stop: %q", out)
	}
	if out := kilnOut(t, "sessions", "prune", "--older-than", "1h", "--data", dir); out != "" {
		t.Fatalf("prune --older-than 1h of a session stopped just now: %q; want it kept", out)
	}
	if code := run(t.Context(), []string{"sessions", "prune", "--older-than", "-1s", "--data", dir}, strings.NewReader(""), io.Discard, io.Discard); code != exitUsage {
		t.Fatalf("prune --older-than -1s: exit %d; want %d", code, exitUsage)
	}
	if out := kilnOut(t, "sessions", "prune", "--data", dir); out != "S pruned\n" {
		t.Fatalf("prune: %q", out)
	}
}

func TestCLIWithoutADaemon(t *testing.T) {
	dir := shortTemp(t)
	var out, errs strings.Builder
	if code := run(t.Context(), []string{"sessions", "list", "--data", dir}, strings.NewReader(""), &out, &errs); code != exitFail ||
		!strings.Contains(errs.String(), "no daemon serves") {
		t.Fatalf("sessions list without a daemon: %d %q", code, errs.String())
	}
	errs.Reset()
	if code := run(t.Context(), []string{"log", "--follow", "--data", dir}, strings.NewReader(""), &out, &errs); code != exitFail ||
		!strings.Contains(errs.String(), "kiln serve") {
		t.Fatalf("log --follow without a daemon: %d %q", code, errs.String())
	}
}

// BenchmarkIdleSessions measures a kiln serve daemon holding idle sessions (100, or
// KILN_BENCH_SESSIONS: 1000 is the count the daemon is held to), their workbenches
// forked from a zygote and, A/B, spawned (KILN_ZYGOTE=off): its resident set, its
// workers', the processes it keeps, the proportional set size (PSS, from smaps_rollup)
// of the daemon and its workers together per session, less the empty daemon's, and the
// daemon's descriptors and threads beside its soft limit of open files.
func BenchmarkIdleSessions(b *testing.B) {
	sessions := 100
	if n, err := strconv.Atoi(os.Getenv("KILN_BENCH_SESSIONS")); err == nil && n > 0 {
		sessions = n
	}
	for _, start := range []string{"forked", "spawned"} {
		b.Run(start, func(b *testing.B) {
			if start == "spawned" {
				b.Setenv("KILN_ZYGOTE", "off")
			}
			benchmarkIdleSessions(b, sessions)
		})
	}
}

// benchmarkIdleSessions is BenchmarkIdleSessions with the environment set.
func benchmarkIdleSessions(b *testing.B, sessions int) {
	for b.Loop() {
		dir := shortTemp(b)
		s := startServe(b, dir)
		before := rss(b, s.cmd.Process.Pid)
		pssBefore := pss(b, s.cmd.Process.Pid)
		for i := range sessions {
			s.call("POST", "/v1/sessions", `{"id":"idle-`+strconv.Itoa(i)+`"}`, 201, nil)
		}
		daemon := rss(b, s.cmd.Process.Pid)
		total := pss(b, s.cmd.Process.Pid)
		workers := 0
		kids := descendants(s.cmd.Process.Pid)
		for _, pid := range kids {
			workers += rss(b, pid)
			total += pss(b, pid)
		}
		b.ReportMetric(float64(before)/1024, "empty-daemon-MiB")
		b.ReportMetric(float64(daemon)/1024, "daemon-MiB")
		b.ReportMetric(float64(daemon-before)/float64(sessions), "daemon-KiB/session")
		b.ReportMetric(float64(workers)/1024, "workers-MiB")
		b.ReportMetric(float64(len(kids)), "worker-processes")
		b.ReportMetric(float64(total-pssBefore)/1024/float64(sessions), "PSS-MiB/session")
		fds, _ := os.ReadDir("/proc/" + strconv.Itoa(s.cmd.Process.Pid) + "/fd")
		b.ReportMetric(float64(len(fds)), "daemon-fds")
		b.ReportMetric(float64(procStatus(b, s.cmd.Process.Pid, "Threads:")), "daemon-threads")
		b.ReportMetric(float64(softNoFile(b, s.cmd.Process.Pid)), "daemon-nofile-soft")
		s.cmd.Process.Signal(syscall.SIGTERM)
		<-s.exited
	}
}

// pss is the proportional set size of pid in KiB, from smaps_rollup; 0 for a process
// that has gone.
func pss(b testing.TB, pid int) int {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "Pss:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}

// rss is the resident set of pid in KiB.
func rss(b testing.TB, pid int) int { return procStatus(b, pid, "VmRSS:") }

// procStatus is the number of field (with its colon) in pid's /proc status, a size in
// KiB or a count.
func procStatus(b testing.TB, pid int, field string) int {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}

// softNoFile is pid's soft limit of open files, from /proc.
func softNoFile(b testing.TB, pid int) int {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/limits")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "Max open files"); ok {
			n, _ := strconv.Atoi(strings.Fields(v)[0])
			return n
		}
	}
	return 0
}

// descendants are the processes below pid, from /proc.
func descendants(pid int) []int {
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(p) + "/task/*/children")
		for _, f := range tasks {
			data, _ := os.ReadFile(f)
			for _, field := range strings.Fields(string(data)) {
				child, _ := strconv.Atoi(field)
				out = append(out, child)
				queue = append(queue, child)
			}
		}
	}
	return out
}

// TestREADMEDaemonExample runs the README's daemon block as printed, with this kiln on
// PATH.
func TestREADMEDaemonExample(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl")
	}
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), "## The daemon: `kiln serve`")
	_, rest, ok2 := strings.Cut(rest, "```bash\n")
	block, _, ok3 := strings.Cut(rest, "```\n")
	if !ok || !ok2 || !ok3 {
		t.Fatal("the README has no daemon block")
	}
	bin := filepath.Dir(kilnCommand(t).Path)
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", block)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "TMPDIR="+shortTemp(t))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the README's block: %v\n%s", err, out)
	}
	for _, want := range []string{"21\n", `"text":"40"`, `"status":"running"`, `"status":"interrupted"`, `"code":"invalid_request"`, "demo"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
}

// TestServeAppliesTheRetention: kiln serve reads retention from kiln.toml and forgets a
// session stopped longer ago by itself, keeping an open one.
func TestServeAppliesTheRetention(t *testing.T) {
	t.Parallel()
	dir := shortTemp(t)
	if err := os.WriteFile(filepath.Join(dir, "kiln.toml"), []byte("retention = \"1s\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	startServe(t, dir)
	for _, s := range []string{"gone", "kept"} {
		kilnOut(t, "exec", "--data", dir, "--session", s, "1")
	}
	kilnOut(t, "sessions", "stop", "--data", dir, "gone")
	poll.Until(t, time.Minute, func() bool {
		return !strings.Contains(kilnOut(t, "sessions", "list", "--data", dir), "gone")
	})
	if out := kilnOut(t, "sessions", "list", "--data", dir); !strings.Contains(out, "kept") {
		t.Errorf("sessions list after the retention: %q; want the open session kept", out)
	}
}
