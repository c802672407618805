package storetests

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-json-experiment/json"

	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
	"github.com/kilnrt/kiln/internal/pgtest"
	"github.com/kilnrt/kiln/internal/poll"
	"github.com/kilnrt/kiln/internal/store"
)

// testLeaseTTL is the daemons' lease term in these tests: short, for a quick takeover.
const testLeaseTTL = "2s"

// serveRenewals are the renewals a daemon makes within a term (store.RenewalsPerTTL).
const serveRenewals = store.RenewalsPerTTL

// sessionView is what these tests read of a session.
type sessionView struct {
	ID     string `json:"id"`
	State  string `json:"state"`
	HeldBy string `json:"held_by"`
}

// problemView is what these tests read of a problem.
type problemView struct {
	Code   string `json:"code"`
	Holder string `json:"holder"`
}

// TestDaemonsShareARecordOnPostgres: three daemons, each with a data directory of its
// own, on one database. Any daemon reads any session; a write to a session another
// daemon holds is refused 409 held_elsewhere, naming the holder's URL. kill -9 of the
// holder mid-cell: another daemon takes the session over within the lease term, its
// running cell recorded failed once, the next cell starting in a new namespace that
// says so; an input recorded before the kill and one after are each in the record once;
// an event stream followed through the third daemon across the takeover sees every
// entry of the journal once, in order.
func TestDaemonsShareARecordOnPostgres(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.Database(t, "multi")
	args := []string{"--store", url, "--lease-ttl", testLeaseTTL, "--listen", "127.0.0.1:0"}
	a := clitest.StartServe(t, clitest.ShortTemp(t), args...)
	b := clitest.StartServe(t, clitest.ShortTemp(t), args...)
	c := clitest.StartServe(t, clitest.ShortTemp(t), args...)
	aURL, bURL := "http://"+a.Listen, "http://"+b.Listen
	t.Logf("a %s b %s c %s", aURL, bURL, c.Listen)

	a.Call("POST", "/v1/sessions", `{"id":"s"}`, 201, nil)
	a.Call("POST", "/v1/sessions/s/executions", `{"code":"x = 41"}`, 200, nil)
	worker := workerPid(t, a, "s")

	// Reads on any daemon, from the shared record.
	var view sessionView
	b.Call("GET", "/v1/sessions/s", "", 200, &view)
	if view.State != "open" || view.HeldBy != aURL {
		t.Fatalf("session s read on another daemon: %+v; want open, held by %s", view, aURL)
	}
	var list struct {
		Sessions []sessionView `json:"sessions"`
	}
	c.Call("GET", "/v1/sessions", "", 200, &list)
	if len(list.Sessions) != 1 || list.Sessions[0].ID != "s" || list.Sessions[0].HeldBy != aURL {
		t.Fatalf("the sessions listed on a third daemon: %+v", list)
	}
	var first clitest.ExecRecord
	b.Call("GET", "/v1/executions/s:c-1", "", 200, &first)
	if first.Status != "ok" {
		t.Fatalf("a cell read on another daemon: %+v", first)
	}

	// Writes to a session another daemon holds: 409, naming it.
	for _, w := range []struct{ method, path, body string }{
		{"POST", "/v1/sessions/s/executions", `{"code":"x"}`},
		{"POST", "/v1/sessions/s/inputs", `{"text":"not here"}`},
		{"DELETE", "/v1/sessions/s", ""},
		{"POST", "/v1/sessions", `{"id":"s"}`},
	} {
		var p problemView
		b.Call(w.method, w.path, w.body, 409, &p)
		if p.Code != "held_elsewhere" || p.Holder != aURL {
			t.Errorf("%s %s on another daemon: %+v; want held_elsewhere, holder %s", w.method, w.path, p, aURL)
		}
	}

	// An event stream followed through the third daemon.
	streamCtx, stopStream := context.WithCancel(t.Context())
	defer stopStream()
	seen := make(chan int64, 1024)
	streamDone := make(chan struct{})
	req, _ := http.NewRequestWithContext(streamCtx, "GET", "http://kiln/v1/sessions/s/events", nil)
	resp, err := c.Client.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the event stream: %v %v", resp, err)
	}
	go func() {
		defer close(streamDone)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var e struct {
				Seq  int64  `json:"seq"`
				Kind string `json:"kind"`
			}
			if json.Unmarshal(sc.Bytes(), &e, json.RejectUnknownMembers(false)) == nil && e.Kind != "heartbeat" {
				seen <- e.Seq
			}
		}
	}()

	a.Call("POST", "/v1/sessions/s/inputs", `{"text":"before the kill"}`, 201, nil)
	var running clitest.ExecRecord
	a.Call("POST", "/v1/sessions/s/executions", `{"code":"import time\ntime.sleep(100)","wait_ms":0}`, 202, &running)
	a.Kill(worker)
	killed := time.Now()

	// Taken over: the cell the dead daemon ran is recorded failed, by the daemon that
	// took the session.
	var closed clitest.ExecRecord
	poll.Until(t, clitest.ReadyWithin, func() bool {
		status, data := b.Do("GET", "/v1/executions/"+running.ID, "")
		return status == 200 && json.Unmarshal(data, &closed, json.RejectUnknownMembers(false)) == nil && closed.Status != "running"
	})
	t.Logf("the session taken over %s after kill -9 (lease term %s)", time.Since(killed).Round(time.Millisecond), testLeaseTTL)
	if closed.Status != "failed" || !closed.NamespaceLost || closed.Error == nil || !strings.Contains(*closed.Error, "host ended") {
		t.Fatalf("the cell the holder died in: %+v", closed)
	}
	// The daemon that closed the cell gives the session up once it has (no agent holds
	// it): until then a write elsewhere is refused 409, naming it.
	var next clitest.ExecRecord
	var status int
	var data []byte
	poll.Until(t, clitest.ReadyWithin, func() bool {
		status, data = b.Do("POST", "/v1/sessions/s/executions", `{"code":"'x' in dir()"}`)
		return status != 409
	})
	if status != 200 || json.Unmarshal(data, &next, json.RejectUnknownMembers(false)) != nil || !next.FreshNamespace || len(next.Output) != 1 || next.Output[0].Text != "False" {
		t.Fatalf("the next cell, on another daemon: %d %s", status, data)
	}
	b.Call("POST", "/v1/sessions/s/inputs", `{"text":"after the kill"}`, 201, nil)
	c.Call("GET", "/v1/sessions/s", "", 200, &view)
	if view.HeldBy != bURL {
		t.Fatalf("session s after the takeover, read on the third daemon: %+v; want held by %s", view, bURL)
	}

	st, sess := recordedSession(t, url, "s")
	entries, err := st.Log(t.Context(), store.LogFilter{Session: sess.ID})
	if err != nil {
		t.Fatal(err)
	}
	var inputs []string
	var ends int
	var want []int64
	for _, e := range entries {
		want = append(want, e.Seq)
		if ev, ok := e.Record.(store.Event); ok {
			inputs = append(inputs, string(ev.Payload))
		}
		if x, ok := e.Record.(store.Execution); ok && e.Kind == store.KindExecutionEnd && x.CellID == closed.ID[len("s:"):] {
			ends++
		}
	}
	if !slices.Equal(inputs, []string{`{"text":"before the kill"}`, `{"text":"after the kill"}`}) {
		t.Errorf("the inputs in the record: %v; want each once", inputs)
	}
	if ends != 1 {
		t.Errorf("the cell the holder died in ended %d times in the journal; want once", ends)
	}
	// The stream has every entry once, in order, up to the last.
	var got []int64
	poll.Until(t, clitest.ReadyWithin, func() bool {
		for {
			select {
			case seq := <-seen:
				got = append(got, seq)
				continue
			default:
			}
			return len(got) >= len(want)
		}
	})
	stopStream()
	<-streamDone
	if !slices.Equal(got, want) {
		t.Errorf("the stream followed through the third daemon: %v; the journal: %v", got, want)
	}
}

// TestAPausedHolderLosesItsSessionAtTheEndOfItsTerm: a holder that stops renewing
// (SIGSTOP) while its process lives keeps its session until its lease's term ends;
// then another daemon takes it, its next cell in a new namespace. The holder, resumed,
// learns at its next renewal that it lost the lease, closes the session's runtime, and
// refuses the session's writes, naming the new holder.
func TestAPausedHolderLosesItsSessionAtTheEndOfItsTerm(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.Database(t, "paused")
	args := []string{"--store", url, "--lease-ttl", testLeaseTTL, "--listen", "127.0.0.1:0"}
	a := clitest.StartServe(t, clitest.ShortTemp(t), args...)
	b := clitest.StartServe(t, clitest.ShortTemp(t), args...)
	bURL := "http://" + b.Listen
	a.Call("POST", "/v1/sessions", `{"id":"p"}`, 201, nil)
	worker := workerPid(t, a, "p")

	a.Cmd.Process.Signal(syscall.SIGSTOP)
	paused := time.Now()
	resumed := false
	resume := func() {
		if !resumed {
			a.Cmd.Process.Signal(syscall.SIGCONT)
			resumed = true
		}
	}
	defer resume()
	var next clitest.ExecRecord
	var status int
	var data []byte
	poll.Until(t, clitest.ReadyWithin, func() bool {
		status, data = b.Do("POST", "/v1/sessions/p/executions", `{"code":"'x' in dir()"}`)
		return status != 409
	})
	taken := time.Since(paused)
	if status != 200 || json.Unmarshal(data, &next, json.RejectUnknownMembers(false)) != nil || !next.FreshNamespace ||
		len(next.Output) != 1 || next.Output[0].Text != "False" {
		t.Fatalf("a cell on another daemon once the paused holder's term ended: %d %s", status, data)
	}
	ttl, _ := time.ParseDuration(testLeaseTTL)
	if taken < ttl-ttl/serveRenewals {
		t.Errorf("the session of a living holder was taken %s after its last renewal could have been; its term is %s", taken, ttl)
	}
	t.Logf("taken from a paused holder %s after the pause (lease term %s)", taken.Round(time.Millisecond), testLeaseTTL)

	resume()
	poll.Until(t, clitest.ReadyWithin, func() bool { return !clitest.ProcessExists(worker) }) // the runtime closed
	var p problemView
	a.Call("POST", "/v1/sessions/p/executions", `{"code":"1"}`, 409, &p)
	if p.Code != "held_elsewhere" || p.Holder != bURL {
		t.Errorf("a write on the resumed holder: %+v; want held_elsewhere, holder %s", p, bURL)
	}
}

// workerPid is the pid of the worker running session sid's cells on daemon d, as a cell
// of its own reads it; it sets x.
func workerPid(t testing.TB, d *clitest.Served, sid string) int {
	t.Helper()
	var rec clitest.ExecRecord
	// NSpid's first field is the pid in the host's namespace, where the worker is in one
	// of its own as well.
	d.Call("POST", "/v1/sessions/"+sid+"/executions",
		`{"code":"x = [l.split()[1] for l in open('/proc/self/status') if l.startswith('NSpid:')][0]\nprint(x)"}`, 200, &rec)
	if len(rec.Output) != 1 {
		t.Fatalf("the worker's pid: %+v", rec)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(rec.Output[0].Text))
	if err != nil {
		t.Fatalf("the worker's pid: %+v", rec)
	}
	return pid
}

// TestAWaitingAgentResumesOnTheDaemonThatTakesItsSession: an agent's session waits on a
// timer on one daemon, which is killed, or stopped; the daemon that takes the session
// over opens it, and the agent there takes the timer when it fires and runs its turn.
func TestAWaitingAgentResumesOnTheDaemonThatTakesItsSession(t *testing.T) {
	srv := pgtest.Start(t)
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) { waitingAgentResumes(t, srv, sig) })
	}
}

func waitingAgentResumes(t *testing.T, srv *pgtest.Server, sig syscall.Signal) {
	url := srv.Database(t, "agent-"+sig.String())
	replies := []string{clitest.CodeReply(`await runtime.wait(1, reason="a nap")`), clitest.CodeReply(`await runtime.wait(None, reason="done")`)}
	var dirs [2]string
	for i := range dirs {
		dirs[i] = clitest.AgentDir(t, replies...)
		path := filepath.Join(dirs[i], "kiln.toml")
		cfg, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		clitest.WriteFile(t, path, "store = \""+url+"\"\nlease_ttl = \""+testLeaseTTL+"\"\n"+string(cfg))
	}
	a := clitest.StartServe(t, dirs[0])
	b := clitest.StartServe(t, dirs[1])
	a.Call("POST", "/v1/sessions", `{"id":"s"}`, 201, nil)
	a.Call("POST", "/v1/sessions/s/inputs", `{"text":"nap"}`, 201, nil)
	first := clitest.Follow(t, dirs[0], "s", 0, "turn.end")
	a.Cmd.Process.Signal(sig)
	<-a.Exited

	got := clitest.Follow(t, dirs[1], "s", first[len(first)-1].Seq, "turn.end")
	timer := clitest.HasTimer(got)
	if r := clitest.EndReason(t, got[len(got)-1]); r != "waited" || !timer {
		t.Fatalf("on the daemon that took the session: timer %v, end %q", timer, r)
	}
	var view struct {
		HeldBy     string `json:"held_by"`
		Generation string `json:"generation"`
	}
	b.Call("GET", "/v1/sessions/s", "", 200, &view)
	if view.HeldBy != "" || view.Generation == "" {
		t.Fatalf("session s on the daemon that took it: %+v; want its runtime live there", view)
	}
}
