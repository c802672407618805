package peertests

import (
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
	"github.com/kilnrt/kiln/internal/pgtest"
)

// TestCellsCannotReachTheRecordOnPostgres: a confined cell of a daemon whose record is
// a PostgreSQL database reached through a Unix socket outside /tmp (as
// /run/postgresql is) can neither connect to that socket nor read the password the
// daemon was given in PGPASSWORD, whether its worker was forked or spawned.
func TestCellsCannotReachTheRecordOnPostgres(t *testing.T) {
	t.Parallel()
	srv := pgtest.Start(t)
	u, err := url.Parse(srv.Database(t, "reach"))
	if err != nil {
		t.Fatal(err)
	}
	sockets, err := os.MkdirTemp("/var/tmp", "kiln-pg")
	if err != nil {
		t.Skipf("no directory outside /tmp for the socket: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(sockets) })
	q := u.Query()
	socket := filepath.Join(sockets, ".s.PGSQL.5432")
	relay(t, socket, filepath.Join(q.Get("host"), ".s.PGSQL.5432"))
	q.Set("host", sockets)
	u.RawQuery = q.Encode()
	const secret = "the-records-password"
	code := `import os, socket
print("PGPASSWORD" in os.environ, ` + strconvQuote(secret) + `.encode() in open("/proc/self/environ", "rb").read())
try:
    socket.socket(socket.AF_UNIX).connect(` + strconvQuote(socket) + `)
    print("connected")
except OSError as e:
    print("refused", type(e).__name__)
`
	for _, start := range []string{"forked", "spawned"} {
		t.Run(start, func(t *testing.T) {
			zygote := "KILN_ZYGOTE="
			if start == "spawned" {
				zygote += "off"
			}
			s := clitest.StartServeCommand(t, []string{"env", "PGPASSWORD=" + secret, zygote}, clitest.ShortTemp(t),
				"--store", u.String(), "--sandbox", "workspace:best-effort")
			s.Call("POST", "/v1/sessions", `{"id":"`+start+`"}`, 201, nil)
			if sandbox := sessionSandbox(t, s, start); !strings.Contains(sandbox, "mount") || !strings.Contains(sandbox, `"`+start+`"`) {
				t.Skipf("the kernel gives no private view of files, or the worker was not %s: %s", start, sandbox)
			}
			if got := peerCell(t, s, start, code); got != "False False\nrefused FileNotFoundError\n" {
				t.Errorf("a cell printed %q; want the password absent and the socket hidden", got)
			}
		})
	}
}

// relay listens on the Unix socket path and carries each connection to the socket
// target, until the test ends.
func relay(t *testing.T, path, target string) {
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("unix", target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, up)
			mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); io.Copy(up, c); up.Close() }()
			go func() { defer wg.Done(); io.Copy(c, up); c.Close() }()
		}
	}()
}
