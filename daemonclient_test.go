package kiln_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/kilnrt/kiln"
)

// TestDaemonExecuteAbandonsAStartNeverAnswered: a daemon that never answers a cell's
// start holds Daemon.Execute no longer than DaemonStartGrace past its ctx's end, by
// and the request is abandoned.
func TestDaemonExecuteAbandonsAStartNeverAnswered(t *testing.T) {
	arrived := make(chan struct{}, 1)
	abandoned := make(chan bool, 1) // false: answered instead
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body) // as the daemon does: the server sees the client leave only after it
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
			abandoned <- true
		case <-time.After(10 * kiln.DaemonStartGrace): // a client that waits on: answer, and fail the test
			http.Error(w, "answered late", http.StatusServiceUnavailable)
			abandoned <- false
		}
	}))
	defer srv.Close()
	d := kiln.ConnectDaemon(srv.URL, "")
	defer d.Close()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := d.Execute(ctx, "s", "1", nil)
		done <- err
	}()
	<-arrived
	cancel() // as Ctrl-C, or --timeout's deadline, does
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Execute: %v; want it abandoned as cancelled", err)
	}
	if !<-abandoned {
		t.Error("the start request was answered, not abandoned")
	}
}
