package peertests

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/client"
	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
	"github.com/kilnrt/kiln/internal/perfstat"
	"github.com/kilnrt/kiln/internal/proc"
)

// peerBenchScript: a parent's agent opens a peer, sends it a request and waits in the
// same cell for its result, timing both, then stops the peer; the peer's agent answers.
var peerBenchScript = []string{
	clitest.CodeReply(`import time
me = (await runtime.inspect())["session_id"]
if "." not in me:
    t0 = time.perf_counter_ns()
    p = await runtime.request("peer.open", mode="independent", evidence=[])
    t1 = time.perf_counter_ns()
    await runtime.request("peer.send", peer_id=p["peer_id"], request_id="r", content="answer 1", evidence=[])
    r = await runtime.request("peer.result", request_id="r", wait_ms=120000)
    t2 = time.perf_counter_ns()
    assert r["state"] == "completed", r
    print("took", t1 - t0, t2 - t1)
    await runtime.request("peer.stop", peer_id=p["peer_id"], drain=False)
else:
    await runtime.request("peer.submit_result", request_id="r", result=1)
await runtime.wait(None, reason="idle")`),
	clitest.CodeReply(`await runtime.wait(None, reason="idle")`),
}

// treeCPU is the CPU time pid and its children used: its own, its reaped children's,
// and its live descendants'.
func treeCPU(pid int) time.Duration {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	var ticks int64
	for _, f := range fields[11:15] { // utime, stime, cutime, cstime
		n, _ := strconv.ParseInt(f, 10, 64)
		ticks += n
	}
	total := time.Duration(ticks) * 10 * time.Millisecond
	for _, d := range clitest.Descendants(pid) {
		if c, err := proc.ProcessCPU(d); err == nil {
			total += c
		}
	}
	return total
}

// BenchmarkPeerRoundTrip measures, through a daemon whose agents run a script route, a
// parent's agent opening a peer (peer.open, to its session's start), and its first
// request's round trip to a result (peer.send, the peer's agent taking the input, a model
// call, a cell submitting the result, and peer.result answering), timed in the parent's
// cell; the CPU is the daemon's and all its processes', per peer. Then the memory a
// peer adds: the daemon's resident set, and its workers'.
func BenchmarkPeerRoundTrip(b *testing.B) {
	dir := clitest.AgentDir(b, peerBenchScript...)
	s := clitest.StartServe(b, dir)
	d, err := client.DialDaemon(b.Context(), dir)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	iteration := 0
	once := func(opens, trips *perfstat.Meter) {
		iteration++
		session := fmt.Sprintf("b%d", iteration)
		s.Call("POST", "/v1/sessions", `{"id":"`+session+`"}`, 201, nil)
		s.Call("POST", "/v1/sessions/"+session+"/inputs", `{"text":"go"}`, 201, nil)
		var took string
		err := d.Events(b.Context(), session, 0, true, func(e client.Event) error {
			if e.Kind != "execution.end" {
				return nil
			}
			var rec struct {
				Record struct {
					Output []struct {
						Text string `json:"text"`
					} `json:"output"`
				} `json:"record"`
			}
			json.Unmarshal(e.Raw, &rec, json.RejectUnknownMembers(false))
			for _, o := range rec.Record.Output {
				took += o.Text
			}
			return clitest.ErrFound
		})
		var open, trip int64
		if !errors.Is(err, clitest.ErrFound) || !strings.HasPrefix(took, "took ") {
			b.Fatalf("the parent's cell: %q %v", took, err)
		}
		fmt.Sscanf(took, "took %d %d", &open, &trip)
		if opens != nil {
			opens.Add(time.Duration(open))
			trips.Add(time.Duration(trip))
		}
		s.Call("DELETE", "/v1/sessions/"+session, "", 200, nil)
	}
	once(nil, nil) // warm the daemon
	pid := s.Cmd.Process.Pid
	cpu0 := treeCPU(pid)
	opens, trips := perfstat.Start(), perfstat.Start()
	b.ResetTimer()
	for range b.N {
		once(opens, trips)
	}
	b.StopTimer()
	cpu := float64((treeCPU(pid) - cpu0).Microseconds()) / float64(b.N)
	of, tf := opens.Figures(b.N), trips.Figures(b.N)
	b.ReportMetric(of.P50, "open-p50-µs")
	b.ReportMetric(of.P99, "open-p99-µs")
	b.ReportMetric(tf.P50, "request-result-p50-µs")
	b.ReportMetric(tf.P99, "request-result-p99-µs")
	b.ReportMetric(cpu, "cpu-µs/peer")

	// The memory peers add: eight open, idle, with their agents.
	const peers = 8
	s.Call("POST", "/v1/sessions", `{"id":"mem"}`, 201, nil)
	before, workers0 := clitest.RSS(b, pid), 0
	for _, p := range clitest.Descendants(pid) {
		workers0 += clitest.RSS(b, p)
	}
	var rec clitest.ExecRecord
	s.Call("POST", "/v1/sessions/mem/executions", `{"code":"for i in range(`+strconv.Itoa(peers)+`):\n    await runtime.request(\"peer.open\", mode=\"independent\", evidence=[])"}`, 200, &rec)
	if rec.Status != "ok" {
		b.Fatalf("opening peers: %+v", rec)
	}
	workers := 0
	for _, p := range clitest.Descendants(pid) {
		workers += clitest.RSS(b, p)
	}
	b.ReportMetric(float64(clitest.RSS(b, pid)-before)/peers, "daemon-KiB/peer")
	b.ReportMetric(float64(workers-workers0)/1024/peers, "workers-MiB/peer")
}
