package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// DaemonSession is what a daemon keeps of a session in the record, for every daemon on
// it to read: State is its own encoding (JSON) of how the session was opened and
// whether it is open.
type DaemonSession struct {
	Name  string
	State []byte
}

// SaveDaemonSession writes state as session name's, replacing what was there.
func (s *Store) SaveDaemonSession(ctx context.Context, name string, state []byte) error {
	err := s.Update(ctx, func(tx *Tx) error {
		_, err := tx.exec(`INSERT INTO daemon_sessions (name, state) VALUES ($1, $2)
			ON CONFLICT (name) DO UPDATE SET state = excluded.state`, name, string(state))
		return err
	})
	if err != nil {
		return fmt.Errorf("store: daemon session %s: %w", name, err)
	}
	return nil
}

// RemoveDaemonSession forgets session name's state; one not there is no error.
func (s *Store) RemoveDaemonSession(ctx context.Context, name string) error {
	err := s.Update(ctx, func(tx *Tx) error {
		_, err := tx.exec(`DELETE FROM daemon_sessions WHERE name = $1`, name)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: daemon session %s: %w", name, err)
	}
	return nil
}

// DaemonSessionState is session name's state, or ErrNotFound.
func (s *Store) DaemonSessionState(ctx context.Context, name string) ([]byte, error) {
	var state string
	err := s.readRow(ctx, `SELECT state FROM daemon_sessions WHERE name = $1`, name).Scan(&state)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: daemon session %s", ErrNotFound, name)
	}
	if err != nil {
		return nil, fmt.Errorf("store: daemon session %s: %w", name, err)
	}
	return []byte(state), nil
}

// DaemonSessions are every session's state, by name.
func (s *Store) DaemonSessions(ctx context.Context) ([]DaemonSession, error) {
	rows, err := s.readRows(ctx, `SELECT name, state FROM daemon_sessions ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("store: daemon sessions: %w", err)
	}
	defer rows.Close()
	var out []DaemonSession
	for rows.Next() {
		var d DaemonSession
		var state string
		if err := rows.Scan(&d.Name, &state); err != nil {
			return nil, fmt.Errorf("store: daemon sessions: %w", err)
		}
		d.State = []byte(state)
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: daemon sessions: %w", err)
	}
	return out, nil
}
