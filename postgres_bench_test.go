package kiln_test

import (
	"context"
	"testing"
	"time"

	"github.com/kilnrt/kiln"
	"github.com/kilnrt/kiln/internal/perfstat"
	"github.com/kilnrt/kiln/internal/pgtest"
	"github.com/kilnrt/kiln/internal/session"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/store/postgres"
)

// BenchmarkRoundTripOnPostgres is BenchmarkRoundTrip with the record in a PostgreSQL
// database on a local socket: p50, p99, and the CPU per cell of the host, its worker
// and the server's backends together. fsync=on commits as a server's default does;
// fsync=off compares with SQLite's synchronous=NORMAL, which syncs no commit either.
func BenchmarkRoundTripOnPostgres(b *testing.B) {
	for _, fsync := range []string{"on", "off"} {
		b.Run("fsync="+fsync, func(b *testing.B) {
			srv := pgtest.Start(b, "fsync="+fsync)
			url := srv.Database(b, "bench")
			ctx := context.Background()
			st, err := postgres.OpenStore(ctx, url, store.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			s, err := session.Open(ctx, session.Config{ID: "bench", DataDir: b.TempDir(), Store: st, Workspace: b.TempDir(),
				Sandbox: kiln.SandboxNone})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			rec, err := s.Execute(ctx, pidCell, session.Watch{})
			if err != nil || len(rec.Output) != 1 {
				b.Fatalf("%v %+v", err, rec)
			}
			worker := hostPid(b, rec.Output[0].Text)
			m := perfstat.Start(append([]int{worker}, pgtest.Backends(b, url)...)...)
			n := 0
			for b.Loop() {
				n++
				start := time.Now()
				rec, err := s.Execute(ctx, "1+1", session.Watch{})
				m.Add(time.Since(start))
				if err != nil || len(rec.Output) != 1 || rec.Output[0].Text != "2" {
					b.Fatalf("%v %+v", err, rec)
				}
			}
			m.Report(b, n)
		})
	}
}
