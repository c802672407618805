// Package admin is what an operator does to a data directory without a daemon: make
// it, build and activate policy releases, read the active hooks, list and make
// skills, and record an input.
package admin

import (
	"context"
	"fmt"
	"os"

	"github.com/kilnrt/kiln/internal/datadir"
	"github.com/kilnrt/kiln/internal/skills"
	"github.com/kilnrt/kiln/internal/store"
)

// DefaultDataDir is the data directory used when none is given:
// $XDG_DATA_HOME/kiln, else ~/.local/share/kiln, with getenv reading the environment.
func DefaultDataDir(getenv func(string) string) (string, error) {
	return store.DefaultDir(getenv)
}

// DataDirInfo is what a data directory holds once InitDataDir has made it.
type DataDirInfo struct {
	Record        string // the durable record's database file
	SchemaVersion int    // the record's schema version
	Skills        string // the managed skills root
}

// InitDataDir makes dataDir ("" for DefaultDataDir), its durable record and its
// managed skills root, or finds them made; a record of an older schema is migrated.
// It is safe to call again, and concurrently with a running host.
func InitDataDir(ctx context.Context, dataDir string) (DataDirInfo, error) {
	dataDir, err := datadir.OrDefault(dataDir)
	if err != nil {
		return DataDirInfo{}, err
	}
	st, err := store.OpenDir(ctx, dataDir, store.Options{})
	if err != nil {
		return DataDirInfo{}, err
	}
	defer st.Close()
	info := DataDirInfo{Record: st.Path(), Skills: skills.ManagedRoot(st.Dir())}
	if info.SchemaVersion, err = st.Version(ctx); err != nil {
		return DataDirInfo{}, err
	}
	if err := os.MkdirAll(info.Skills, 0o700); err != nil {
		return DataDirInfo{}, fmt.Errorf("kiln: managed skills root: %w", err)
	}
	return info, nil
}
