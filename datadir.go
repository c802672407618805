package kiln

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/kilnrt/kiln/internal/store"
)

// ErrNoRecord is a data directory that holds no durable record yet, asked of by a
// reader, which never makes one.
var ErrNoRecord = errors.New("kiln: no durable record")

// openExisting opens the durable record of dataDir, which must already exist; readOnly
// opens it for reading only, which needs no write access.
func openExisting(ctx context.Context, dataDir string, readOnly bool) (*store.Store, error) {
	if !hasRecord(dataDir) {
		return nil, fmt.Errorf("%w in %s (kiln init makes one, as kiln exec does)", ErrNoRecord, dataDir)
	}
	return store.OpenDir(ctx, dataDir, store.Options{ReadOnly: readOnly})
}

// hasRecord says whether dataDir holds a durable record.
func hasRecord(dataDir string) bool {
	_, err := os.Stat(filepath.Join(dataDir, store.FileName))
	return !errors.Is(err, fs.ErrNotExist)
}
