package servetests

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
	"github.com/kilnrt/kiln/internal/poll"
)

func TestDaemonSIGTERMInterruptsAndRecords(t *testing.T) {
	t.Parallel()
	dir := clitest.ShortTemp(t)
	s := clitest.StartServe(t, dir)
	s.Call("POST", "/v1/sessions", `{"id":"s"}`, 201, nil)
	s.Call("POST", "/v1/sessions/s/executions", `{"code":"import time"}`, 200, nil)
	var rec clitest.ExecRecord
	s.Call("POST", "/v1/sessions/s/executions", `{"code":"while True: time.sleep(0.01)","wait_ms":0}`, 202, &rec)
	s.Cmd.Process.Signal(syscall.SIGTERM)
	if err := <-s.Exited; err != nil {
		t.Fatalf("daemon exit: %v", err)
	}
	if _, err := os.Stat(dir + "/kiln.sock"); !os.IsNotExist(err) {
		t.Errorf("the socket is left: %v", err)
	}
	s2 := clitest.StartServe(t, dir)
	var got clitest.ExecRecord
	s2.Call("GET", "/v1/executions/"+rec.ID, "", 200, &got)
	if got.Status != "interrupted" {
		t.Fatalf("the cell running at SIGTERM: %+v", got)
	}
}

func TestCLIGoesThroughTheDaemon(t *testing.T) {
	t.Parallel()
	dir := clitest.ShortTemp(t)
	clitest.StartServe(t, dir)
	clitest.Out(t, "exec", "--data", dir, "--session", "S", "x = 41")
	if out := clitest.Out(t, "exec", "--data", dir, "--session", "S", "print('out')", "x + 1"); out != "out\n42\n" {
		t.Fatalf("the second exec printed %q; want the namespace kept", out)
	}
	if out := clitest.Out(t, "exec", "--data", dir, "--session", "S", "--json", "x"); !strings.Contains(out, `"status":"ok"`) || !strings.Contains(out, `"text":"41"`) {
		t.Fatalf("exec --json: %s", out)
	}
	out := clitest.Out(t, "send", "--data", dir, "--session", "S", "hello there")
	if !strings.HasPrefix(out, "event:") || !strings.Contains(out, "attention: wake") {
		t.Fatalf("send: %q", out)
	}
	if out := clitest.Out(t, "transcript", "show", "--data", dir, "--json", "S"); !strings.Contains(out, "hello there") {
		t.Fatalf("transcript: %s", out)
	}
	if out := clitest.Out(t, "sessions", "list", "--data", dir); !strings.Contains(out, "S ") || !strings.Contains(out, "open") {
		t.Fatalf("sessions list: %s", out)
	}

	follow := clitest.Command(t, "log", "--data", dir, "--session", "S", "--follow")
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
	clitest.Out(t, "exec", "--data", dir, "--session", "S", "'again'")
	until("c-4 g-1 ended ok")
	follow.Process.Signal(os.Interrupt)
	if err := follow.Wait(); err != nil {
		t.Fatalf("log --follow at Ctrl-C: %v", err)
	}

	// A rich final value is shown once, when the cell's output comes live: the cell goes
	// on only after its first line has reached this test.
	gate := filepath.Join(t.TempDir(), "gate")
	rich := clitest.Command(t, "exec", "--data", dir, "--session", "S", "import os, time\n"+
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

	if out := clitest.Out(t, "sessions", "stop", "--data", dir, "S"); out != "S stopped\n" {
		t.Fatalf("stop: %q", out)
	}
	if out := clitest.Out(t, "sessions", "prune", "--older-than", "1h", "--data", dir); out != "" {
		t.Fatalf("prune --older-than 1h of a session stopped just now: %q; want it kept", out)
	}
	const exitUsage = 2 // the command line was wrong
	var exit *exec.ExitError
	if err := clitest.Command(t, "sessions", "prune", "--older-than", "-1s", "--data", dir).Run(); !errors.As(err, &exit) || exit.ExitCode() != exitUsage {
		t.Fatalf("prune --older-than -1s: %v; want exit %d", err, exitUsage)
	}
	if out := clitest.Out(t, "sessions", "prune", "--data", dir); out != "S pruned\n" {
		t.Fatalf("prune: %q", out)
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
		dir := clitest.ShortTemp(b)
		s := clitest.StartServe(b, dir)
		before := clitest.RSS(b, s.Cmd.Process.Pid)
		pssBefore := pss(b, s.Cmd.Process.Pid)
		for i := range sessions {
			s.Call("POST", "/v1/sessions", `{"id":"idle-`+strconv.Itoa(i)+`"}`, 201, nil)
		}
		daemon := clitest.RSS(b, s.Cmd.Process.Pid)
		total := pss(b, s.Cmd.Process.Pid)
		workers := 0
		kids := clitest.Descendants(s.Cmd.Process.Pid)
		for _, pid := range kids {
			workers += clitest.RSS(b, pid)
			total += pss(b, pid)
		}
		b.ReportMetric(float64(before)/1024, "empty-daemon-MiB")
		b.ReportMetric(float64(daemon)/1024, "daemon-MiB")
		b.ReportMetric(float64(daemon-before)/float64(sessions), "daemon-KiB/session")
		b.ReportMetric(float64(workers)/1024, "workers-MiB")
		b.ReportMetric(float64(len(kids)), "worker-processes")
		b.ReportMetric(float64(total-pssBefore)/1024/float64(sessions), "PSS-MiB/session")
		fds, _ := os.ReadDir("/proc/" + strconv.Itoa(s.Cmd.Process.Pid) + "/fd")
		b.ReportMetric(float64(len(fds)), "daemon-fds")
		b.ReportMetric(float64(clitest.ProcStatus(b, s.Cmd.Process.Pid, "Threads:")), "daemon-threads")
		b.ReportMetric(float64(softNoFile(b, s.Cmd.Process.Pid)), "daemon-nofile-soft")
		s.Cmd.Process.Signal(syscall.SIGTERM)
		<-s.Exited
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

// TestREADMEDaemonExample runs the README's daemon block as printed, with this kiln on
// PATH.
func TestREADMEDaemonExample(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl")
	}
	data, err := os.ReadFile("../../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), "## The daemon: `kiln serve`")
	_, rest, ok2 := strings.Cut(rest, "```bash\n")
	block, _, ok3 := strings.Cut(rest, "```\n")
	if !ok || !ok2 || !ok3 {
		t.Fatal("the README has no daemon block")
	}
	bin := filepath.Dir(clitest.Command(t).Path)
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", block)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "TMPDIR="+clitest.ShortTemp(t))
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
	dir := clitest.ShortTemp(t)
	if err := os.WriteFile(filepath.Join(dir, "kiln.toml"), []byte("retention = \"1s\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	clitest.StartServe(t, dir)
	for _, s := range []string{"gone", "kept"} {
		clitest.Out(t, "exec", "--data", dir, "--session", s, "1")
	}
	clitest.Out(t, "sessions", "stop", "--data", dir, "gone")
	poll.Until(t, time.Minute, func() bool {
		return !strings.Contains(clitest.Out(t, "sessions", "list", "--data", dir), "gone")
	})
	if out := clitest.Out(t, "sessions", "list", "--data", dir); !strings.Contains(out, "kept") {
		t.Errorf("sessions list after the retention: %q; want the open session kept", out)
	}
}
