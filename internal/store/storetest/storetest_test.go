package storetest_test

import (
	"testing"

	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/store/storetest"
)

// TestSQLite runs the suite against the SQLite engine, in a data directory as a daemon
// keeps it.
func TestSQLite(t *testing.T) {
	storetest.Run(t, func(t testing.TB, dir string, opts store.Options) (*store.Store, error) {
		return store.OpenDir(t.Context(), dir, opts)
	})
}
