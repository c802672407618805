package worker

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/perfstat"
	"github.com/kilnrt/kiln/internal/wire"
)

// BenchmarkHostRequestTransport is one host-request round trip from a cell through the
// worker alone, answered by an immediate handler that does nothing: the floor under the
// router and the store. Each cell times its 100 requests itself; the CPU per request is
// the host's and the worker's together.
func BenchmarkHostRequestTransport(b *testing.B) {
	w, reportPace := startPaced(b, Config{SessionID: "bench", Generation: "g-1", Handler: answerOne{}})
	defer reportPace()
	m := perfstat.Start(w.Pid())
	n := 0
	for b.Loop() {
		n++
		rec, err := w.Execute(context.Background(), "b-"+strconv.Itoa(n), `import time
ts = []
for _ in range(100):
    t0 = time.perf_counter_ns()
    await runtime.request("x")
    ts.append(time.perf_counter_ns() - t0)
" ".join(map(str, ts))`)
		if err != nil || rec.Status != "ok" {
			b.Fatalf("%v %+v", err, rec)
		}
		for f := range strings.FieldsSeq(strings.Trim(rec.Output[0].Text, "'")) {
			ns, _ := strconv.Atoi(f)
			m.Add(time.Duration(ns))
		}
	}
	m.Report(b, 100*n)
}

// answerOne answers every request at once with 1.
type answerOne struct{}

func (answerOne) Serve(context.Context, Call) wire.Reply {
	return wire.Reply{Kind: wire.ReplyOK, Value: jsontext.Value("1")}
}

func (answerOne) Immediate(string) bool { return true }
