package peertests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
	"github.com/kilnrt/kiln/daemon"
	"github.com/kilnrt/kiln/internal/certs"
	"github.com/kilnrt/kiln/internal/perfstat"
	"github.com/kilnrt/kiln/internal/poll"
	"github.com/kilnrt/kiln/internal/remote"
)

// remoteHosts are a caller daemon and its two remote daemons, each on a data directory
// of its own: "tls" over TCP with TLS and a token, "ssh" through kiln serve --stdio.
type remoteHosts struct {
	caller, tls, ssh          *clitest.Served
	callerDir, tlsDir, sshDir string
	kiln                      string // the kiln binary the exec target runs
}

// remotePrelude is Python every test cell starts with: rq makes a host request and
// returns {"ok": value} or {"error": code, "message": ...}.
const remotePrelude = `import json
async def rq(method, **kw):
    try:
        return {"ok": await runtime.request(method, **kw)}
    except runtime.HostError as e:
        return {"error": e.code, "message": e.message}
`

// startRemotes starts the three daemons; extra is more of the caller's kiln.toml.
func startRemotes(t testing.TB, extra string) *remoteHosts {
	t.Helper()
	h := &remoteHosts{callerDir: clitest.ShortTemp(t), tlsDir: clitest.ShortTemp(t), sshDir: clitest.ShortTemp(t), kiln: clitest.Command(t).Path}
	token, err := daemon.Token(h.tlsDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("KILN_TEST_REMOTE_TOKEN", token)
	t.Setenv("KILN_TEST_WRONG_TOKEN", strings.Repeat("0", len(token)))
	h.tls = clitest.StartServe(t, h.tlsDir, "--listen", "127.0.0.1:0", "--tls-self-signed")
	h.ssh = clitest.StartServe(t, h.sshDir)
	h.writeConfig(t, extra)
	h.caller = clitest.StartServe(t, h.callerDir)
	return h
}

// writeConfig writes the caller's kiln.toml, naming the two remotes.
func (h *remoteHosts) writeConfig(t testing.TB, extra string) {
	t.Helper()
	conf := fmt.Sprintf(`[remotes.tls]
kind = "kiln"
url = "https://%s"
token_env = "KILN_TEST_REMOTE_TOKEN"
ca_file = %q

[remotes.ssh]
kind = "exec"
command = [%q, "serve", "--stdio", "--data", %q]
`, h.tls.Listen, filepath.Join(h.tlsDir, "tls-cert.pem"), h.kiln, h.sshDir) + extra
	if err := os.WriteFile(filepath.Join(h.callerDir, "kiln.toml"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
}

// cell runs code (after remotePrelude) as a cell of the caller's session and returns
// what it printed last, a JSON value, decoded into v.
func cell(t testing.TB, s *clitest.Served, session, code string, v any) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"code": remotePrelude + code, "wait_ms": 120000})
	var rec clitest.ExecRecord
	s.Call("POST", "/v1/sessions/"+session+"/executions", string(body), 200, &rec)
	var printed string
	for _, o := range rec.Output {
		if o.Stream == "stdout" {
			printed += o.Text
		}
	}
	lines := strings.Split(strings.TrimSpace(printed), "\n")
	if rec.Status != "ok" || json.Unmarshal([]byte(lines[len(lines)-1]), v, json.RejectUnknownMembers(false)) != nil {
		t.Fatalf("cell %q: %+v", code, rec)
	}
}

// answer is a host request's outcome as rq returns it.
type answer struct {
	OK      map[string]any `json:"ok"`
	Error   string         `json:"error"`
	Message string         `json:"message"`
}

// record is the remote cell's record in a remote.call's or remote.cancel's reply.
func (a answer) record() map[string]any {
	r, _ := a.OK["record"].(map[string]any)
	return r
}

// result is the text of the remote cell's result.
func (a answer) result() string {
	out, _ := a.record()["output"].([]any)
	for _, o := range out {
		if m, _ := o.(map[string]any); m["stream"] == "result" {
			return m["text"].(string)
		}
	}
	return ""
}

// ensure asks for the session's namespace on target.
func ensure(t testing.TB, s *clitest.Served, session, target string) (ns, gen string) {
	t.Helper()
	var a answer
	cell(t, s, session, fmt.Sprintf("print(json.dumps(await rq('remote.ensure', target=%q)))", target), &a)
	if a.Error != "" {
		t.Fatalf("ensure %s: %s: %s", target, a.Error, a.Message)
	}
	return a.OK["namespace_id"].(string), a.OK["namespace_generation"].(string)
}

// callCode is a cell's remote.call of code as operation op, waiting waitMS.
func callCode(target, ns, gen, op, code string, waitMS int) string {
	return fmt.Sprintf("print(json.dumps(await rq('remote.call', target=%q, namespace_id=%q, namespace_generation=%q, "+
		"operation_id=%q, operation='execute', payload={'code': %q, 'wait_ms': %d})))", target, ns, gen, op, code, waitMS)
}

// remoteCall makes one remote.call from a cell of the caller's session.
func remoteCall(t testing.TB, s *clitest.Served, session, target, ns, gen, op, code string, waitMS int) answer {
	t.Helper()
	var a answer
	cell(t, s, session, callCode(target, ns, gen, op, code, waitMS), &a)
	return a
}

// cellsOf counts the cells of session in the record of dir that remote.call started for
// operation op.
func cellsOf(t *testing.T, dir, session, op string) int {
	t.Helper()
	out := clitest.Out(t, "log", "--data", dir, "--session", session, "--json")
	n := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, `"kind":"execution",`) && strings.Contains(line, "operation="+op+`\n`) {
			n++
		}
	}
	return n
}

// waitRunning waits until the daemon's session ns runs a cell.
func waitRunning(t *testing.T, s *clitest.Served, ns string) {
	t.Helper()
	running := func() bool {
		var info struct {
			Running string `json:"running"`
		}
		s.Call("GET", "/v1/sessions/"+ns, "", 200, &info)
		return info.Running != ""
	}
	if !poll.Wait(30*time.Second, running) {
		t.Fatalf("no cell runs in %s", ns)
	}
}

func TestRemoteNamespacesOnTwoDaemons(t *testing.T) {
	h := startRemotes(t, "")
	h.caller.Call("POST", "/v1/sessions", `{"id":"s"}`, 201, nil)
	for _, c := range []struct {
		target string
		remote *clitest.Served
		dir    string
	}{{"tls", h.tls, h.tlsDir}, {"ssh", h.ssh, h.sshDir}} {
		t.Run(c.target, func(t *testing.T) {
			ns, gen := ensure(t, h.caller, "s", c.target)
			if again, gen2 := ensure(t, h.caller, "s", c.target); again != ns || gen2 != gen {
				t.Fatalf("ensure again: %s %s; want %s %s", again, gen2, ns, gen)
			}
			first := remoteCall(t, h.caller, "s", c.target, ns, gen, "set", "x = 41", 30000)
			if first.Error != "" || first.record()["status"] != "ok" {
				t.Fatalf("set: %+v", first)
			}
			if got := remoteCall(t, h.caller, "s", c.target, ns, gen, "get", "x + 1", 30000); got.result() != "42" {
				t.Fatalf("state kept across calls: %+v", got)
			}
			if retry := remoteCall(t, h.caller, "s", c.target, ns, gen, "set", "x = 41", 30000); retry.OK["execution"] != first.OK["execution"] {
				t.Fatalf("a retried operation: %+v; want the first, %+v", retry, first)
			}
			if other := remoteCall(t, h.caller, "s", c.target, ns, gen, "set", "x = 0", 30000); other.Error != "invalid_request" {
				t.Fatalf("an operation id given other code: %+v", other)
			}
			if n := cellsOf(t, c.dir, ns, "set"); n != 1 {
				t.Fatalf("the remote's record holds %d cells of operation set; want 1", n)
			}
			if c.target == "tls" { // a call's code, with its guard, is a cell's at most
				host, _ := os.Hostname()
				for _, op := range []struct {
					id, want string
					over     int
				}{{"at-limit", "", 0}, {"past-limit", "invalid_request", 1}} {
					n := remote.MaxCodeBytes - remote.GuardBytes(host, "s", op.id) - 1 + op.over
					var a answer
					cell(t, h.caller, "s", fmt.Sprintf("print(json.dumps(await rq('remote.call', target='tls', namespace_id=%q, "+
						"namespace_generation=%q, operation_id=%q, operation='execute', payload={'code': '#' + '-' * %d})))", ns, gen, op.id, n), &a)
					if a.Error != op.want || (op.want == "" && a.record()["status"] != "ok") {
						t.Fatalf("code of %d bytes: %+v", n+1, a)
					}
				}
			}

			slow := remoteCall(t, h.caller, "s", c.target, ns, gen, "slow", "import time\ntime.sleep(120)", 300)
			if slow.record()["status"] != "running" {
				t.Fatalf("a call past its wait: %+v", slow)
			}
			var cancelled answer
			cell(t, h.caller, "s", fmt.Sprintf("print(json.dumps(await rq('remote.cancel', namespace_id=%q, namespace_generation=%q, operation_id='slow')))", ns, gen), &cancelled)
			if cancelled.OK["outcome"] != "interrupted" || cancelled.OK["namespace_intact"] != true {
				t.Fatalf("cancel: %+v", cancelled)
			}
			if after := remoteCall(t, h.caller, "s", c.target, ns, gen, "slow", "import time\ntime.sleep(120)", 300); after.record()["status"] != "interrupted" {
				t.Fatalf("the cancelled operation, asked again: %+v", after)
			}
			if got := remoteCall(t, h.caller, "s", c.target, ns, gen, "after", "x", 30000); got.result() != "41" {
				t.Fatalf("the namespace after an interrupt: %+v", got)
			}

			worker := remoteWorker(t, c.remote)
			syscall.Kill(worker, syscall.SIGKILL)
			// The remote may not have seen its worker die: the cell sent to it then ends
			// failed, its record saying the namespace was lost with it.
			op := "lost"
			if lost := remoteCall(t, h.caller, "s", c.target, ns, gen, op, "x", 30000); lost.Error == "" {
				if r := lost.record(); r["status"] != "failed" || r["namespace_lost"] != true {
					t.Fatalf("a call to the killed worker: %+v", lost)
				}
				op = "lost-next"
			}
			lost := remoteCall(t, h.caller, "s", c.target, ns, gen, op, "x", 30000)
			if lost.Error != "namespace_lost" || !strings.Contains(lost.Message, "generation "+gen+" is lost") ||
				!strings.Contains(lost.Message, "its current generation is g-") {
				t.Fatalf("a call after the remote worker was killed: %+v", lost)
			}
			if n := cellsOf(t, c.dir, ns, op); n != 1 {
				t.Fatalf("%d cells of the lost call", n)
			}
			if again := remoteCall(t, h.caller, "s", c.target, ns, gen, op, "x", 30000); again.Error != "namespace_lost" {
				t.Fatalf("the lost call, retried: %+v", again)
			}
			ns2, gen2 := ensure(t, h.caller, "s", c.target)
			if ns2 != ns || gen2 == gen {
				t.Fatalf("ensure after the loss: %s %s; want %s in a generation after %s", ns2, gen2, ns, gen)
			}
			if fresh := remoteCall(t, h.caller, "s", c.target, ns, gen2, "fresh", "'x' in globals()", 30000); fresh.result() != "False" {
				t.Fatalf("the fresh namespace: %+v", fresh)
			}

			var closed answer
			cell(t, h.caller, "s", fmt.Sprintf("print(json.dumps(await rq('remote.close', namespace_id=%q, namespace_generation=%q)))", ns, gen2), &closed)
			if closed.OK["closed"] != true {
				t.Fatalf("close: %+v", closed)
			}
			if late := remoteCall(t, h.caller, "s", c.target, ns, gen2, "late", "1", 30000); late.Error != "namespace_closed" {
				t.Fatalf("a call after close: %+v", late)
			}
			var info struct {
				State string `json:"state"`
			}
			c.remote.Call("GET", "/v1/sessions/"+ns, "", 200, &info)
			if info.State != "stopped" {
				t.Fatalf("the remote session after close: %+v", info)
			}
			if ns3, _ := ensure(t, h.caller, "s", c.target); ns3 == ns {
				t.Fatalf("ensure after close gave the closed namespace %s", ns)
			}
		})
	}
	// Two ensures at once, one cell's concurrent requests, make one namespace.
	h.caller.Call("POST", "/v1/sessions", `{"id":"pair"}`, 201, nil)
	var pair []answer
	cell(t, h.caller, "pair", "import asyncio\nprint(json.dumps(await asyncio.gather("+
		"rq('remote.ensure', target='tls'), rq('remote.ensure', target='tls'))))", &pair)
	if len(pair) != 2 || pair[0].Error != "" || pair[1].Error != "" ||
		pair[0].OK["namespace_id"] != pair[1].OK["namespace_id"] || pair[0].OK["created"] == pair[1].OK["created"] {
		t.Fatalf("two ensures at once: %+v; want one namespace, created once", pair)
	}
}

// remoteWorker is the workbench worker of the remote daemon's one open session: a
// process spawned to run kiln.worker, or one forked from a kiln.zygote, whose command
// line it keeps and which is init (pid 1) of a PID namespace of its own.
func remoteWorker(t *testing.T, s *clitest.Served) int {
	t.Helper()
	for _, pid := range clitest.Descendants(s.Cmd.Process.Pid) {
		proc := "/proc/" + strconv.Itoa(pid)
		cmdline, _ := os.ReadFile(proc + "/cmdline")
		status, _ := os.ReadFile(proc + "/status")
		forked := strings.Contains(string(cmdline), "kiln.zygote\x00") && regexp.MustCompile(`(?m)^NSpid:.*\s1$`).Match(status)
		if strings.Contains(string(cmdline), "kiln.worker\x00") || forked {
			return pid
		}
	}
	t.Fatal("no worker runs under the remote daemon")
	return 0
}

func TestRemoteFailuresAreExplicit(t *testing.T) {
	h := startRemotes(t, "")
	otherCA, _, err := certs.SelfSigned(t.TempDir()) // a pair that never signed the target's
	if err != nil {
		t.Fatal(err)
	}
	h.writeConfig(t, fmt.Sprintf(`
[remotes.wrongtoken]
kind = "kiln"
url = "https://%[1]s"
token_env = "KILN_TEST_WRONG_TOKEN"
ca_file = %[2]q

[remotes.wrongca]
kind = "kiln"
url = "https://%[1]s"
token_env = "KILN_TEST_REMOTE_TOKEN"
ca_file = %[3]q

[remotes.systemca]
kind = "kiln"
url = "https://%[1]s"
token_env = "KILN_TEST_REMOTE_TOKEN"

[remotes.down]
kind = "kiln"
url = "https://127.0.0.1:1"
token_env = "KILN_TEST_REMOTE_TOKEN"

[remotes.nodaemon]
kind = "exec"
command = [%[4]q, "serve", "--stdio", "--data", %[5]q]
`, h.tls.Listen, filepath.Join(h.tlsDir, "tls-cert.pem"), otherCA, h.kiln, t.TempDir()))
	h.caller.Cmd.Process.Signal(syscall.SIGTERM) // the caller reads kiln.toml as it starts
	<-h.caller.Exited
	h.caller = clitest.StartServe(t, h.callerDir)
	h.caller.Call("POST", "/v1/sessions", `{"id":"s"}`, 201, nil)
	for target, want := range map[string]string{"wrongtoken": "unauthorized", "wrongca": "tls_failed", "systemca": "tls_failed",
		"down": "target_unreachable", "nodaemon": "target_unreachable", "unknown": "not_found"} {
		var a answer
		cell(t, h.caller, "s", fmt.Sprintf("print(json.dumps(await rq('remote.ensure', target=%q)))", target), &a)
		if a.Error != want || a.Message == "" {
			t.Errorf("ensure %s: %+v; want %s", target, a, want)
		}
	}
}

// startCall starts, in a cell of the caller's session that is not waited for, a
// remote.call of code as operation op, and returns the cell's execution id.
func startCall(t *testing.T, s *clitest.Served, target, ns, gen, op, code string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"code": remotePrelude + callCode(target, ns, gen, op, code, 120000), "wait_ms": 0})
	var rec clitest.ExecRecord
	s.Call("POST", "/v1/sessions/s/executions", string(body), 202, &rec)
	return rec.ID
}

func TestRemoteCallRetriedAfterKill9(t *testing.T) {
	top := t // daemons restarted in a subtest serve the next one
	h := startRemotes(t, "")
	h.caller.Call("POST", "/v1/sessions", `{"id":"s"}`, 201, nil)
	t.Run("caller", func(t *testing.T) {
		ns, gen := ensure(t, h.caller, "s", "tls")
		code := "import time\ntime.sleep(2)\nn = globals().get('n', 0) + 1\nn"
		startCall(t, h.caller, "tls", ns, gen, "once", code)
		waitRunning(t, h.tls, ns)
		h.caller.Cmd.Process.Signal(syscall.SIGKILL)
		<-h.caller.Exited
		h.caller = clitest.StartServe(top, h.callerDir)
		if got := remoteCall(t, h.caller, "s", "tls", ns, gen, "once", code, 60000); got.record()["status"] != "ok" || got.result() != "1" {
			t.Fatalf("the operation retried after the caller's kill -9: %+v", got)
		}
		if got := remoteCall(t, h.caller, "s", "tls", ns, gen, "count", "n", 60000); got.result() != "1" {
			t.Fatalf("the code ran %s times", got.result())
		}
		if n := cellsOf(t, h.tlsDir, ns, "once"); n != 1 {
			t.Fatalf("the remote's record holds %d cells of the operation; want 1", n)
		}
	})
	t.Run("remote", func(t *testing.T) {
		ns, gen := ensure(t, h.caller, "s", "ssh")
		code := "import time\ntime.sleep(120)"
		id := startCall(t, h.caller, "ssh", ns, gen, "once", code)
		waitRunning(t, h.ssh, ns)
		h.ssh.Kill(remoteWorker(t, h.ssh))
		var first clitest.ExecRecord
		h.caller.Call("GET", "/v1/executions/"+id+"?wait_ms=60000", "", 200, &first)
		if first.Status != "ok" || !strings.Contains(first.Output[0].Text, "target_unreachable") {
			t.Fatalf("the call the remote died in: %+v", first)
		}
		h.ssh = clitest.StartServe(top, h.sshDir)
		got := remoteCall(t, h.caller, "s", "ssh", ns, gen, "once", code, 60000)
		if r := got.record(); r["status"] != "failed" || r["namespace_lost"] != true {
			t.Fatalf("the operation retried after the remote's kill -9: %+v", got)
		}
		if n := cellsOf(t, h.sshDir, ns, "once"); n != 1 {
			t.Fatalf("the remote's record holds %d cells of the operation; want 1", n)
		}
		if next := remoteCall(t, h.caller, "s", "ssh", ns, gen, "next", "1", 60000); next.Error != "namespace_lost" {
			t.Fatalf("a call in the generation the restart ended: %+v", next)
		}
	})
}

func TestServeRefusesANetworkWithoutTLS(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--listen", "0.0.0.0:0"}, "not a loopback address"},
		{[]string{"--listen", "127.0.0.1:0", "--tls-cert", "c.pem"}, "--tls-cert and --tls-key go together"},
		{[]string{"--listen", "127.0.0.1:0", "--tls-self-signed", "--tls-cert", "c.pem", "--tls-key", "k.pem"}, "not both"},
		{[]string{"--tls-self-signed"}, "give --listen too"},
		{[]string{"--stdio", "--listen", "127.0.0.1:0"}, "--listen is that daemon's"},
	} {
		cmd := clitest.Command(t, append([]string{"serve", "--data", clitest.ShortTemp(t)}, tc.args...)...)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("kiln serve %q: %v, %s; want %q", tc.args, err, out, tc.want)
		}
	}
}

// netns is a network namespace the test made, joined to the host's by a veth pair: the
// host's end is hostIP, the namespace's nsIP.
type netns struct{ name, hostIP, nsIP string }

// newNetns makes a network namespace and its veth pair, removed when the test ends; it
// skips the test, saying why, where it cannot.
func newNetns(t *testing.T) netns {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("making a network namespace and a veth pair needs root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("making a network namespace needs the ip command (iproute2)")
	}
	suffix := strconv.Itoa(os.Getpid() % 100000)
	n := netns{name: "kilntest" + suffix, hostIP: "10.231.0.1", nsIP: "10.231.0.2"}
	host, peer := "kth"+suffix, "ktn"+suffix
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %q: %v: %s", args, err, out)
		}
	}
	if out, err := exec.Command("ip", "netns", "add", n.name).CombinedOutput(); err != nil {
		t.Skipf("the kernel refuses a network namespace here: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "delete", n.name).Run() }) // takes its end of the pair with it
	run("link", "add", host, "type", "veth", "peer", "name", peer)
	t.Cleanup(func() { exec.Command("ip", "link", "delete", host).Run() })
	run("link", "set", peer, "netns", n.name)
	run("addr", "add", n.hostIP+"/30", "dev", host)
	run("link", "set", host, "up")
	run("netns", "exec", n.name, "ip", "addr", "add", n.nsIP+"/30", "dev", peer)
	run("netns", "exec", n.name, "ip", "link", "set", peer, "up")
	run("netns", "exec", n.name, "ip", "link", "set", "lo", "up")
	return n
}

func TestRemoteInANetworkNamespaceOverVeth(t *testing.T) {
	n := newNetns(t)
	remoteDir, callerDir := clitest.ShortTemp(t), clitest.ShortTemp(t)
	token, err := daemon.Token(remoteDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("KILN_TEST_REMOTE_TOKEN", token)
	remote := clitest.StartServeCommand(t, []string{"ip", "netns", "exec", n.name}, remoteDir, "--listen", n.nsIP+":0", "--tls-self-signed", "--allow-host", n.nsIP)
	if !strings.HasPrefix(remote.Listen, n.nsIP+":") {
		t.Fatalf("the remote listens on %q", remote.Listen)
	}
	conf := fmt.Sprintf("[remotes.far]\nkind = \"kiln\"\nurl = \"https://%s\"\ntoken_env = \"KILN_TEST_REMOTE_TOKEN\"\nca_file = %q\n",
		remote.Listen, filepath.Join(remoteDir, "tls-cert.pem"))
	if err := os.WriteFile(filepath.Join(callerDir, "kiln.toml"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	caller := clitest.StartServe(t, callerDir)
	caller.Call("POST", "/v1/sessions", `{"id":"s"}`, 201, nil)
	ns, gen := ensure(t, caller, "s", "far")
	if got := remoteCall(t, caller, "s", "far", ns, gen, "one", "import socket\n(1 + 1, socket.gethostname())", 30000); !strings.HasPrefix(got.result(), "(2, ") {
		t.Fatalf("a call across the veth pair: %+v", got)
	}
	out, err := exec.Command("ip", "netns", "identify", strconv.Itoa(remote.Cmd.Process.Pid)).Output()
	if err != nil || strings.TrimSpace(string(out)) != n.name {
		t.Fatalf("the remote daemon is in namespace %q (%v); want %s", out, err, n.name)
	}
}

// BenchmarkRemoteCall measures a remote.call of 1+1 over TLS on loopback, from a cell of
// the caller's session to a namespace on another daemon, beside a local cell of 1+1 sent
// to the caller over its socket: p50, p99, and the CPU of both daemons and their workers
// (and this process) per operation. The remote call's latency is the cell's own, around
// its await.
func BenchmarkRemoteCall(b *testing.B) {
	h := startRemotes(b, "")
	h.caller.Call("POST", "/v1/sessions", `{"id":"s"}`, 201, nil)
	ns, gen := ensure(b, h.caller, "s", "tls")
	pids := func() []int {
		return append(append([]int{h.caller.Cmd.Process.Pid, h.tls.Cmd.Process.Pid}, clitest.Descendants(h.caller.Cmd.Process.Pid)...),
			clitest.Descendants(h.tls.Cmd.Process.Pid)...)
	}
	const perCell = 100 // within a cell's 128 requests
	calls := 0
	remote := func(n int, m *perfstat.Meter) {
		for n > 0 {
			k := min(n, perCell)
			code := fmt.Sprintf(`import time
out = []
for i in range(%d):
    t0 = time.perf_counter_ns()
    r = await runtime.request('remote.call', target='tls', namespace_id=%q, namespace_generation=%q, operation_id='b%d-' + str(i), operation='execute', payload={'code': '1+1'})
    out.append(time.perf_counter_ns() - t0)
    assert r['record']['output'][0]['text'] == '2', r
print(json.dumps(out))`, k, ns, gen, calls)
			calls++
			var took []int64
			cell(b, h.caller, "s", code, &took)
			if m != nil {
				for _, d := range took {
					m.Add(time.Duration(d))
				}
			}
			n -= k
		}
	}
	local := func(n int, m *perfstat.Meter) {
		for range n {
			start := time.Now()
			var rec clitest.ExecRecord
			h.caller.Call("POST", "/v1/sessions/s/executions", `{"code":"1+1"}`, 200, &rec)
			if m != nil {
				m.Add(time.Since(start))
			}
			if rec.Output[0].Text != "2" {
				b.Fatalf("a local cell: %+v", rec)
			}
		}
	}
	remote(20, nil) // warm both sides
	local(20, nil)
	b.ResetTimer()
	lm := perfstat.Start(pids()...)
	local(b.N, lm)
	lf := lm.Figures(b.N)
	rm := perfstat.Start(pids()...)
	remote(b.N, rm)
	rf := rm.Figures(b.N)
	b.StopTimer()
	b.ReportMetric(lf.P50, "local-p50-µs")
	b.ReportMetric(lf.P99, "local-p99-µs")
	b.ReportMetric(lf.CPU, "local-cpu-µs/op")
	b.ReportMetric(rf.P50, "remote-p50-µs")
	b.ReportMetric(rf.P99, "remote-p99-µs")
	b.ReportMetric(rf.CPU, "remote-cpu-µs/op")
}
