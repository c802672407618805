package api_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	kilndaemon "github.com/kilnrt/kiln/daemon"

	"github.com/kilnrt/kiln/internal/api"
	"github.com/kilnrt/kiln/internal/poll"
)

// MaxLongPolls requests may wait for a running cell at once; one past them is answered
// 429 with a Retry-After, and once they have gone a wait is served again.
func TestLongPollsAtTheLimit(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{})
	d.create("s")
	_, rec := d.execute("s", "import time\nwhile True: time.sleep(0.01)", 0) // 202: it runs
	loc := "/v1/executions/" + rec.ID
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
		d.do("POST", loc+"/interrupt", nil)
	}()
	for range api.MaxLongPolls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A wait refused while the probe below held the last place asks again: each
			// goroutine holds a place until it is cancelled.
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, "GET", d.base+loc+"?wait_ms=300000", nil)
				resp, err := d.client.Do(req)
				if err != nil { // cancelled
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusTooManyRequests {
					return
				}
			}
		}()
	}
	// A wait of 1 ms is a long poll too: answered 200 until the others all wait.
	probe := func() (*http.Response, []byte) { return d.do("GET", loc+"?wait_ms=1", nil) }
	resp, data := untilStatus(t, probe, http.StatusTooManyRequests)
	wantCode(t, data, api.CodeTooMany)
	if got := resp.Header.Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After %q; want 1", got)
	}
	// A request that does not wait is served still.
	resp, data = d.do("GET", loc, nil)
	d.want(resp, data, 200, nil)
	cancel()
	wg.Wait()
	untilStatus(t, probe, http.StatusOK)
}

// untilStatus repeats do until it answers status, and returns that answer.
func untilStatus(t *testing.T, do func() (*http.Response, []byte), status int) (*http.Response, []byte) {
	t.Helper()
	var resp *http.Response
	var data []byte
	if !poll.Wait(30*time.Second, func() bool { resp, data = do(); return resp.StatusCode == status }) {
		t.Fatalf("status %d %s; want %d within 30s", resp.StatusCode, data, status)
	}
	return resp, data
}
