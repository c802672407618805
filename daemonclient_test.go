package kiln_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/kilnrt/kiln"
	"github.com/kilnrt/kiln/client"
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
		case <-time.After(10 * client.DaemonStartGrace): // a client that waits on: answer, and fail the test
			http.Error(w, "answered late", http.StatusServiceUnavailable)
			abandoned <- false
		}
	}))
	defer srv.Close()
	d := client.ConnectDaemon(srv.URL, "")
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

// TestDaemonExecuteStreamsDisplaysInPlace: through a daemon, the Go client is handed a
// display, with its data, where the cell made it, and what it is handed is the record's
// output up to the result.
func TestDaemonExecuteStreamsDisplaysInPlace(t *testing.T) {
	t.Parallel()
	served(t, t.TempDir(), func(d *client.Daemon) {
		ctx := context.Background()
		if _, err := d.OpenSession(ctx, "s"); err != nil {
			t.Fatal(err)
		}
		var got []kiln.Output
		rec, err := d.Execute(ctx, "s", "class H:\n    def _repr_html_(self): return '<b>h</b>'\n"+
			"print('a')\ndisplay(H())\nprint('b')", func(_ string, o kiln.Output) {
			if n := len(got); n > 0 && o.Stream != "display" && got[n-1].Stream == o.Stream {
				got[n-1].Text += o.Text // chunk boundaries are the runtime's to choose
				return
			}
			got = append(got, o)
		})
		if err != nil || rec.Status != kiln.StatusOK || len(rec.Output) != 3 || rec.Output[1].Data["text/html"] != "<b>h</b>" {
			t.Fatalf("got %v %+v", err, rec)
		}
		if !reflect.DeepEqual(got, rec.Output) {
			t.Errorf("handed %+v; want the record's output %+v", got, rec.Output)
		}
	})
}
