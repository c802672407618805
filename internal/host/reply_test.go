package host_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/host"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/wire"
)

// sized is an ok reply whose value, a JSON string, is n bytes.
func sized(n int) wire.Reply {
	return wire.Reply{Kind: wire.ReplyOK, Value: jsontext.Value(`"` + strings.Repeat("x", n-2) + `"`)}
}

// A reply is sent and recorded up to MaxReplyBytes; one byte more is refused with
// reply_too_large, and the refusal is what is recorded, whether the reply was made
// outside a transaction or inside one.
func TestRepliesOverTheLimitAreRefusedAndTheRefusalRecorded(t *testing.T) {
	big := func(req *host.Request) int {
		var p struct {
			N int `json:"n"`
		}
		req.Decode(&p)
		return p.N
	}
	b := newBench(t, map[string]host.Service{
		"test.plain": host.ServiceFunc(func(_ context.Context, req *host.Request) host.Outcome {
			return host.Reply(sized(big(req)))
		}),
		"test.commit": host.ServiceFunc(func(_ context.Context, req *host.Request) host.Outcome {
			return host.Outcome{Commit: func(*store.Tx, *host.Request) (wire.Reply, error) { return sized(big(req)), nil }}
		}),
	})
	ctx := context.Background()
	for _, method := range []string{"test.plain", "test.commit"} {
		for _, c := range []struct {
			n    int
			want string
		}{{host.MaxReplyBytes, strconv.Itoa(host.MaxReplyBytes - 2)}, {host.MaxReplyBytes + 1, host.CodeReplyTooLarge}} {
			rec, _ := b.run(ctx, `try:
    r = len(await runtime.request("`+method+`", n=`+strconv.Itoa(c.n)+`))
except Exception as e:
    r = e.code
r`)
			if got := result(rec); got != "'"+c.want+"'" && got != c.want {
				t.Errorf("%s of %d bytes: the cell got %s; want %s", method, c.n, got, c.want)
			}
		}
	}
	entries, err := b.store.Log(ctx, store.LogFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		if r, ok := e.Record.(store.RequestRecord); ok && e.Kind == store.KindReply {
			if r.Reply.Kind == "ok" {
				got = append(got, r.Method+" ok "+strconv.Itoa(len(r.Reply.Value)))
			} else {
				got = append(got, r.Method+" "+r.Reply.Code)
			}
		}
	}
	n := strconv.Itoa(host.MaxReplyBytes)
	want := []string{"test.plain ok " + n, "test.plain " + host.CodeReplyTooLarge, "test.commit ok " + n, "test.commit " + host.CodeReplyTooLarge}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("recorded:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
