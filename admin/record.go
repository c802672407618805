package admin

import (
	"context"
	"errors"
	"path/filepath"
	"time"

	"github.com/kilnrt/kiln/internal/config"
	"github.com/kilnrt/kiln/internal/datadir"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/store/postgres"
)

// Record is what MigrateRecord and CheckRecord say of a durable record.
type Record struct {
	Name          string // the database file, or the PostgreSQL URL without its password
	SchemaVersion int    // the record's schema version
	KilnVersion   int    // the schema version this kiln writes
	MigratedFrom  int    // MigrateRecord's: the version before it migrated
	// Leases are the leases the record holds; CheckRecord's.
	Leases []Lease
	// LastSeq is the journal's last sequence number and LastAt when it was recorded:
	// how far behind the record a reader that has seen less is. CheckRecord's.
	LastSeq int64
	LastAt  time.Time
}

// Lease is a lease the record holds.
type Lease struct {
	Key    string
	Holder string // the process, its host and since when
	Live   bool   // false: its holder is dead, and the next to ask takes it over
}

// MigrateRecord brings the record of dataDir ("" for DefaultDataDir) to this kiln's
// schema: the PostgreSQL database storeURL names, else the one kiln.toml's store
// names, else the data directory's SQLite file, made if need be. A record of a newer
// schema is refused (errors.Is store's ErrSchemaTooNew, as SchemaTooNew tells).
func MigrateRecord(ctx context.Context, dataDir, storeURL string) (Record, error) {
	st, err := openRecord(ctx, dataDir, storeURL, false)
	if err != nil {
		return Record{}, err
	}
	defer st.Close()
	rec := Record{Name: st.Path(), KilnVersion: store.SchemaVersion, MigratedFrom: st.MigratedFrom()}
	rec.SchemaVersion, err = st.Version(ctx)
	return rec, err
}

// CheckRecord reads the record MigrateRecord would migrate, changing nothing: its
// schema version, which must be this kiln's, its leases and its last journal entry. The
// error is the first problem of the record's integrity found, if any (SQLite's
// integrity and foreign key checks; PostgreSQL's constraints and indexes not valid),
// with the Record read so far.
func CheckRecord(ctx context.Context, dataDir, storeURL string) (Record, error) {
	st, err := openRecord(ctx, dataDir, storeURL, true)
	if err != nil {
		return Record{}, err
	}
	defer st.Close()
	rec := Record{Name: st.Path(), KilnVersion: store.SchemaVersion}
	if rec.SchemaVersion, err = st.Version(ctx); err != nil {
		return rec, err
	}
	leases, err := st.Leases(ctx)
	if err != nil {
		return rec, err
	}
	for _, l := range leases {
		rec.Leases = append(rec.Leases, Lease{Key: l.Key, Holder: l.Holder.String(), Live: l.Live})
	}
	if rec.LastSeq, rec.LastAt, err = st.LastEntry(ctx); err != nil {
		return rec, err
	}
	return rec, st.Check(ctx)
}

// SchemaTooNew reports whether err is a record of a newer schema than this kiln's.
func SchemaTooNew(err error) bool { return errors.Is(err, store.ErrSchemaTooNew) }

// openRecord opens the record of dataDir or storeURL, as MigrateRecord says.
func openRecord(ctx context.Context, dataDir, storeURL string, readOnly bool) (*store.Store, error) {
	dataDir, err := datadir.OrDefault(dataDir)
	if err != nil {
		return nil, err
	}
	if storeURL == "" {
		cfg, err := config.Load(filepath.Join(dataDir, config.FileName), true)
		if err != nil {
			return nil, err
		}
		storeURL = cfg.Store
	}
	opts := store.Options{ReadOnly: readOnly}
	if storeURL != "" {
		return postgres.OpenStore(ctx, storeURL, opts)
	}
	return store.OpenDir(ctx, dataDir, opts)
}
