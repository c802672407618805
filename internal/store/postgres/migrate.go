package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/kilnrt/kiln/internal/store"
)

// MigrateLockKey is the advisory lock a migration holds, so that daemons starting at
// once on one database migrate it one after another ("kmig" in ASCII).
const MigrateLockKey = 0x6b6d6967

// Migrate brings the schema to len(steps), each step run in a transaction of its own with the version it reaches. A database of a
// newer version is store.ErrSchemaTooNew.
func (e *Engine) Migrate(ctx context.Context, steps []string) error {
	for version := -1; version < len(steps); {
		err := e.inTx(ctx, func(tx *sql.Tx) (err error) {
			version, err = migrateNext(ctx, tx, steps)
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// inTx runs fn in a transaction of the write pool, committed if fn returns nil.
func (e *Engine) inTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := e.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("schema: commit: %w", err)
	}
	return nil
}

// migrateNext applies the step after the database's version, if there is one, under
// MigrateLockKey, and returns the version the database is then at.
func migrateNext(ctx context.Context, tx *sql.Tx, steps []string) (int, error) {
	for _, stmt := range []string{
		`SELECT pg_advisory_xact_lock(` + fmt.Sprint(MigrateLockKey) + `)`,
		`CREATE TABLE IF NOT EXISTS schema_version (version BIGINT NOT NULL)`,
		`INSERT INTO schema_version (version) SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM schema_version)`,
	} {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return 0, fmt.Errorf("schema: %w", err)
		}
	}
	var version int
	if err := tx.QueryRowContext(ctx, `SELECT version FROM schema_version`).Scan(&version); err != nil {
		return 0, fmt.Errorf("schema: %w", err)
	}
	switch {
	case version > len(steps):
		return 0, fmt.Errorf("%w: version %d, this kiln knows %d", store.ErrSchemaTooNew, version, len(steps))
	case version == len(steps):
		return version, nil
	}
	if _, err := tx.ExecContext(ctx, steps[version]); err != nil {
		return 0, fmt.Errorf("schema: migration %d: %w", version+1, err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE schema_version SET version = $1`, version+1); err != nil {
		return 0, fmt.Errorf("schema: %w", err)
	}
	return version + 1, nil
}

// Version is the schema's version; 0 for a database no kiln has migrated.
func (e *Engine) Version(ctx context.Context) (int, error) {
	var v int
	err := e.db.QueryRowContext(ctx, `SELECT version FROM schema_version`).Scan(&v)
	if err != nil && strings.Contains(err.Error(), "SQLSTATE 42P01") { // no such table
		return 0, nil
	}
	return v, err
}

// Check looks for what PostgreSQL leaves unsound without refusing it: a foreign key or
// a check not validated, an index not valid (left by a failed concurrent build). What
// a row refers to is sound otherwise: the server enforces every constraint of the
// schema at each statement.
func (e *Engine) Check(ctx context.Context) error {
	var what, name string
	err := e.db.QueryRowContext(ctx, `
		SELECT 'constraint', conrelid::regclass::text || '.' || conname FROM pg_constraint
			WHERE NOT convalidated AND connamespace = current_schema()::regnamespace
		UNION ALL
		SELECT 'index', indexrelid::regclass::text FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
			WHERE NOT (indisvalid AND indisready) AND c.relnamespace = current_schema()::regnamespace
		LIMIT 1`).Scan(&what, &name)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("postgres: check: %w", err)
	}
	return fmt.Errorf("postgres: check: %s %s is not valid", what, name)
}
