package policy

import (
	"context"
	"testing"

	"github.com/kilnrt/kiln/internal/zygote"
	kilnpy "github.com/kilnrt/kiln/python"
)

// A policy given a zygote pool forks its hooks worker from it, and the forked worker
// decides as a spawned one does, generation after generation.
func TestHooksWorkerForkedFromAZygote(t *testing.T) {
	t.Parallel()
	pool := zygote.NewPool(nil)
	defer pool.Close()
	cfg := Config{Python: pythonPath(t), Package: kilnpy.Sources(), SessionID: "s", ReleaseID: Initial().ID, Forker: pool}
	for range 2 {
		p := New(cfg)
		a := p.Plan(context.Background(), 1, SourceDiscordDM, 1)
		p.Close()
		if a.Action != "wake" || a.Note != "" {
			t.Fatalf("decided %+v; want the initial release's wake", a)
		}
	}
	if s := pool.Stats(); s.Forked != 2 || s.Spawned != 0 || s.Started != 1 {
		t.Errorf("pool %+v; want two hooks workers forked from one zygote", s)
	}
}
