package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// migration16: the idempotency keys a session's clients gave with their cells.
const migration16 = `
CREATE TABLE idempotency_keys (
	session_id    BIGINT NOT NULL REFERENCES sessions(id),
	key           TEXT NOT NULL,
	digest        TEXT NOT NULL,    -- hex SHA-256 of the code the key was given with
	after_id      BIGINT NOT NULL, -- the session's last execution row when the key was claimed
	cell_id       TEXT,             -- the cell it started; null until its start is known
	created_at_ms BIGINT NOT NULL,
	PRIMARY KEY (session_id, key)
);
CREATE INDEX idempotency_keys_by_age ON idempotency_keys(created_at_ms);
`

// IdemKey is what an idempotency key of a session names: the digest of the code it was
// given with, and the cell that code started, "" while that is not known.
type IdemKey struct {
	Digest    string
	Cell      string
	CreatedAt time.Time
}

// ClaimKey claims key for session with the code of digest (hex SHA-256), within one
// transaction that first forgets every key older than ttl. A key held already is
// returned (claimed false): its cell, found in the record when the process that claimed
// it died between the cell's start and noting it. A key whose claim named no cell that
// ever started is claimed again: the caller holds its running claims apart.
func (s *Store) ClaimKey(ctx context.Context, session int64, key, digest string, ttl time.Duration) (k IdemKey, claimed bool, err error) {
	err = s.Update(ctx, func(tx *Tx) error {
		if _, err := tx.exec(`DELETE FROM idempotency_keys WHERE created_at_ms < $1`, ms(tx.now.Add(-ttl))); err != nil {
			return fmt.Errorf("store: expire keys: %w", err)
		}
		var found bool
		if k, found, err = tx.key(session, key); err != nil || (found && k.Cell != "") {
			return err
		}
		claimed = true
		k = IdemKey{Digest: digest, CreatedAt: time.UnixMilli(ms(tx.now))}
		_, err := tx.exec(`INSERT INTO idempotency_keys (session_id, key, digest, after_id, created_at_ms)
			VALUES ($1, $2, $3, (SELECT COALESCE(MAX(id), 0) FROM executions WHERE session_id = $4), $5)
			ON CONFLICT (session_id, key) DO UPDATE SET digest = excluded.digest, after_id = excluded.after_id, created_at_ms = excluded.created_at_ms`,
			session, key, digest, session, ms(tx.now))
		if err != nil {
			return fmt.Errorf("store: claim key: %w", err)
		}
		return nil
	})
	return k, claimed, err
}

// key reads session's key, resolving a claim with no cell noted to the first cell of
// its code the session started after the claim, if one did, and noting it.
func (tx *Tx) key(session int64, key string) (k IdemKey, found bool, err error) {
	var cell sql.NullString
	var after, at int64
	err = tx.queryRow(`SELECT digest, after_id, cell_id, created_at_ms FROM idempotency_keys WHERE session_id = $1 AND key = $2`,
		session, key).Scan(&k.Digest, &after, &cell, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return IdemKey{}, false, nil
	}
	if err != nil {
		return IdemKey{}, false, fmt.Errorf("store: read key: %w", err)
	}
	k.Cell, k.CreatedAt = cell.String, time.UnixMilli(at)
	if k.Cell != "" {
		return k, true, nil
	}
	err = tx.queryRow(`SELECT cell_id FROM executions WHERE session_id = $1 AND id > $2 AND code_sha256 = $3 ORDER BY id LIMIT 1`,
		session, after, k.Digest).Scan(&k.Cell)
	if errors.Is(err, sql.ErrNoRows) {
		return k, true, nil
	}
	if err != nil {
		return IdemKey{}, false, fmt.Errorf("store: resolve key: %w", err)
	}
	return k, true, tx.noteKeyCell(session, key, k.Cell)
}

func (tx *Tx) noteKeyCell(session int64, key, cell string) error {
	if _, err := tx.exec(`UPDATE idempotency_keys SET cell_id = $1 WHERE session_id = $2 AND key = $3`, cell, session, key); err != nil {
		return fmt.Errorf("store: note key's cell: %w", err)
	}
	return nil
}

// NoteKeyCell notes the cell session's key started.
func (s *Store) NoteKeyCell(ctx context.Context, session int64, key, cell string) error {
	return s.Update(ctx, func(tx *Tx) error { return tx.noteKeyCell(session, key, cell) })
}

// ReleaseKey forgets session's key, whose code never started a cell, so that it may be
// given again.
func (s *Store) ReleaseKey(ctx context.Context, session int64, key string) error {
	return s.Update(ctx, func(tx *Tx) error {
		if _, err := tx.exec(`DELETE FROM idempotency_keys WHERE session_id = $1 AND key = $2 AND cell_id IS NULL`, session, key); err != nil {
			return fmt.Errorf("store: release key: %w", err)
		}
		return nil
	})
}

// Key returns session's key as ClaimKey would find it, or ErrNotFound for a key never
// claimed or older than ttl.
func (s *Store) Key(ctx context.Context, session int64, key string, ttl time.Duration) (IdemKey, error) {
	var k IdemKey
	err := s.Update(ctx, func(tx *Tx) error {
		var found bool
		var err error
		k, found, err = tx.key(session, key)
		if err == nil && (!found || k.CreatedAt.Before(tx.now.Add(-ttl))) {
			err = fmt.Errorf("%w: idempotency key %q", ErrNotFound, key)
		}
		return err
	})
	return k, err
}
