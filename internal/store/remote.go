package store

import (
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/go-json-experiment/json/jsontext"
)

// This file holds a session's remote namespaces: for each target, the session on another
// daemon that is its namespace there, and the operations made in it with their outcomes.
// A remote namespace outlives its caller's host: the mapping is read again after a
// restart, and an operation's id names one outcome for as long as the record is kept.

// migration19: remote namespaces and the operations made in them.
const migration19 = `
CREATE TABLE remote_namespaces (
	session_id    BIGINT NOT NULL REFERENCES sessions(id),
	namespace_id  TEXT NOT NULL,    -- the session's name on the remote daemon
	target        TEXT NOT NULL,    -- the target's name in kiln.toml
	generation    TEXT NOT NULL,    -- the remote generation the namespace lives in; "" until known
	marker        TEXT NOT NULL,    -- the value that marks the namespace in that generation
	state         TEXT NOT NULL CHECK (state IN ('open', 'closed')),
	created_at_ms BIGINT NOT NULL,
	updated_at_ms BIGINT NOT NULL,
	PRIMARY KEY (session_id, namespace_id)
);
CREATE UNIQUE INDEX remote_namespaces_open ON remote_namespaces(session_id, target) WHERE state = 'open';
CREATE TABLE remote_operations (
	session_id     BIGINT NOT NULL REFERENCES sessions(id),
	namespace_id   TEXT NOT NULL,
	operation_id   TEXT NOT NULL,
	generation     TEXT NOT NULL,   -- the namespace generation the operation was made in
	marker         TEXT NOT NULL,   -- the namespace's marker in that generation
	digest         TEXT NOT NULL,   -- hex SHA-256 of the operation and its payload
	request_id     BIGINT NOT NULL REFERENCES host_requests(id), -- the request that first made it
	execution      TEXT,            -- the remote execution, once known
	outcome        TEXT,            -- the outcome as replied, once final (JSON)
	created_at_ms  BIGINT NOT NULL,
	finished_at_ms BIGINT,
	PRIMARY KEY (session_id, namespace_id, operation_id),
	FOREIGN KEY (session_id, namespace_id) REFERENCES remote_namespaces(session_id, namespace_id)
);
`

// Remote namespace states.
const (
	RemoteOpen   = "open"
	RemoteClosed = "closed"
)

// RemoteNamespace is a session's namespace on a remote target.
type RemoteNamespace struct {
	SessionID   int64
	NamespaceID string
	Target      string
	Generation  string // "" until the remote named it
	Marker      string
	State       string // RemoteOpen or RemoteClosed
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// RemoteOperation is an operation made in a remote namespace.
type RemoteOperation struct {
	SessionID   int64
	NamespaceID string
	OperationID string
	Generation  string
	Marker      string
	Digest      string
	RequestID   int64
	Execution   string         // the remote execution, "" until known
	Outcome     jsontext.Value // nil until final
	CreatedAt   time.Time
}

const remoteNamespaceColumns = `session_id, namespace_id, target, generation, marker, state, created_at_ms, updated_at_ms
	FROM remote_namespaces`

func scanRemoteNamespace(row *sql.Row) (RemoteNamespace, error) {
	var n RemoteNamespace
	var created, updated int64
	err := row.Scan(&n.SessionID, &n.NamespaceID, &n.Target, &n.Generation, &n.Marker, &n.State, &created, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return RemoteNamespace{}, ErrNotFound
	}
	if err != nil {
		return RemoteNamespace{}, fmt.Errorf("store: remote namespace: %w", err)
	}
	n.CreatedAt, n.UpdatedAt = time.UnixMilli(created), time.UnixMilli(updated)
	return n, nil
}

// OpenRemoteNamespace returns session's open namespace on target, or ErrNotFound.
func (tx *Tx) OpenRemoteNamespace(session int64, target string) (RemoteNamespace, error) {
	return scanRemoteNamespace(tx.queryRow(`SELECT `+remoteNamespaceColumns+` WHERE session_id = $1 AND target = $2 AND state = $3`,
		session, target, RemoteOpen))
}

// RemoteNamespaceByID returns session's namespace id, open or closed, or ErrNotFound.
func (tx *Tx) RemoteNamespaceByID(session int64, id string) (RemoteNamespace, error) {
	return scanRemoteNamespace(tx.queryRow(`SELECT `+remoteNamespaceColumns+` WHERE session_id = $1 AND namespace_id = $2`,
		session, id))
}

// InsertRemoteNamespace records n, open, for its session and target.
func (tx *Tx) InsertRemoteNamespace(n *RemoteNamespace) error {
	n.State, n.CreatedAt, n.UpdatedAt = RemoteOpen, time.UnixMilli(ms(tx.now)), time.UnixMilli(ms(tx.now))
	_, err := tx.exec(`INSERT INTO remote_namespaces (session_id, namespace_id, target, generation, marker, state,
		created_at_ms, updated_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, n.SessionID, n.NamespaceID, n.Target, n.Generation,
		n.Marker, RemoteOpen, ms(tx.now), ms(tx.now))
	if err != nil {
		return fmt.Errorf("store: remote namespace: %w", err)
	}
	return nil
}

// SetRemoteGeneration records that session's namespace id lives in generation, marked by
// marker.
func (tx *Tx) SetRemoteGeneration(session int64, id, generation, marker string) error {
	_, err := tx.exec(`UPDATE remote_namespaces SET generation = $1, marker = $2, updated_at_ms = $3 WHERE session_id = $4 AND namespace_id = $5`,
		generation, marker, ms(tx.now), session, id)
	if err != nil {
		return fmt.Errorf("store: remote namespace: %w", err)
	}
	return nil
}

// CloseRemoteNamespace records session's namespace id closed.
func (tx *Tx) CloseRemoteNamespace(session int64, id string) error {
	_, err := tx.exec(`UPDATE remote_namespaces SET state = $1, updated_at_ms = $2 WHERE session_id = $3 AND namespace_id = $4`,
		RemoteClosed, ms(tx.now), session, id)
	if err != nil {
		return fmt.Errorf("store: remote namespace: %w", err)
	}
	return nil
}

// RemoteOperationByID returns the operation of session's namespace, or ErrNotFound.
func (tx *Tx) RemoteOperationByID(session int64, namespace, operation string) (RemoteOperation, error) {
	var op RemoteOperation
	var exec, outcome sql.NullString
	var created int64
	err := tx.queryRow(`SELECT session_id, namespace_id, operation_id, generation, marker, digest, request_id, execution, outcome,
		created_at_ms FROM remote_operations WHERE session_id = $1 AND namespace_id = $2 AND operation_id = $3`,
		session, namespace, operation).Scan(&op.SessionID, &op.NamespaceID, &op.OperationID, &op.Generation, &op.Marker, &op.Digest,
		&op.RequestID, &exec, &outcome, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return RemoteOperation{}, ErrNotFound
	}
	if err != nil {
		return RemoteOperation{}, fmt.Errorf("store: remote operation: %w", err)
	}
	op.Execution, op.CreatedAt = exec.String, time.UnixMilli(created)
	if outcome.Valid {
		op.Outcome = jsontext.Value(outcome.String)
	}
	return op, nil
}

// StartRemoteOperation records op as made, before it is sent.
func (tx *Tx) StartRemoteOperation(op *RemoteOperation) error {
	op.CreatedAt = time.UnixMilli(ms(tx.now))
	_, err := tx.exec(`INSERT INTO remote_operations (session_id, namespace_id, operation_id, generation, marker, digest,
		request_id, created_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, op.SessionID, op.NamespaceID, op.OperationID, op.Generation,
		op.Marker, op.Digest, op.RequestID, ms(tx.now))
	if err != nil {
		return fmt.Errorf("store: remote operation: %w", err)
	}
	return nil
}

// NoteRemoteOperation records the remote execution of an operation and, when final, its
// outcome.
func (tx *Tx) NoteRemoteOperation(session int64, namespace, operation, execution string, outcome jsontext.Value) error {
	var out, finished any
	if outcome != nil {
		out, finished = string(outcome), ms(tx.now)
	}
	_, err := tx.exec(`UPDATE remote_operations SET execution = COALESCE(NULLIF($1, ''), execution), outcome = COALESCE($2, outcome),
		finished_at_ms = COALESCE($3, finished_at_ms) WHERE session_id = $4 AND namespace_id = $5 AND operation_id = $6`,
		execution, out, finished, session, namespace, operation)
	if err != nil {
		return fmt.Errorf("store: remote operation: %w", err)
	}
	return nil
}
