package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// KindOutput is the journal kind of a piece of a running cell's output.
const KindOutput = "output"

// MaxOutputBytes bounds the text of one cell's output chunks together, as a cell's
// output is bounded (65536 bytes); a chunk past it is refused with ErrInvalid.
const MaxOutputBytes = 65536

// OutputChunk is a piece of a cell's stdout or stderr, recorded as the cell wrote it.
// A cell's chunks, merged by stream, are its record's output.
type OutputChunk struct {
	ID        int64     `json:"id"`
	SessionID int64     `json:"-"`
	CellID    string    `json:"execution_id"` // the cell's id, c-N
	Index     int       `json:"index"`        // 0 for the cell's first chunk, and on
	Stream    string    `json:"stream"`
	Text      string    `json:"text"`
	At        time.Time `json:"at"`
}

// AppendOutput records the next chunk of output of the session's running cell. A cell
// not running is ErrNotFound; an empty chunk, a stream other than stdout or stderr, or
// a chunk that takes the cell's chunks past MaxOutputBytes is ErrInvalid.
func (s *Store) AppendOutput(ctx context.Context, session int64, cellID, stream, text string) (OutputChunk, error) {
	if stream != "stdout" && stream != "stderr" {
		return OutputChunk{}, fmt.Errorf("%w: output stream %q", ErrInvalid, stream)
	}
	if text == "" {
		return OutputChunk{}, fmt.Errorf("%w: an empty output chunk", ErrInvalid)
	}
	c := OutputChunk{SessionID: session, CellID: cellID, Stream: stream, Text: text}
	err := s.UpdateSession(ctx, session, func(tx *Tx) error {
		var execution int64
		err := tx.queryRow(`SELECT id FROM executions WHERE session_id = $1 AND cell_id = $2 AND ended_at_ms IS NULL`,
			session, cellID).Scan(&execution)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: running execution %q", ErrNotFound, cellID)
		}
		if err != nil {
			return fmt.Errorf("store: append output: %w", err)
		}
		var last, total int64 = -1, 0
		err = tx.queryRow(`SELECT idx, total_bytes FROM output_chunks WHERE execution_id = $1 ORDER BY idx DESC LIMIT 1`,
			execution).Scan(&last, &total)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("store: append output: %w", err)
		}
		if total += int64(len(text)); total > MaxOutputBytes {
			return fmt.Errorf("%w: %s's output totals more than %d bytes", ErrInvalid, cellID, MaxOutputBytes)
		}
		c.Index, c.At = int(last+1), time.UnixMilli(ms(tx.now))
		c.ID, err = tx.insert(`INSERT INTO output_chunks (session_id, execution_id, idx, stream, text, total_bytes, at_ms)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`, session, execution, c.Index, stream, text, total, ms(tx.now))
		if err != nil {
			return fmt.Errorf("store: append output: %w", err)
		}
		return tx.journal(session, KindOutput, c.ID)
	})
	if err != nil {
		return OutputChunk{}, err
	}
	return c, nil
}

// OutputChunkByID returns the session's output chunk id, or ErrNotFound.
func (s *Store) OutputChunkByID(ctx context.Context, session, id int64) (OutputChunk, error) {
	c := OutputChunk{ID: id, SessionID: session}
	var at int64
	err := s.readRow(ctx, `SELECT e.cell_id, o.idx, o.stream, o.text, o.at_ms
		FROM output_chunks o JOIN executions e ON e.id = o.execution_id
		WHERE o.id = $1 AND o.session_id = $2`, id, session).Scan(&c.CellID, &c.Index, &c.Stream, &c.Text, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return OutputChunk{}, fmt.Errorf("%w: output chunk %d", ErrNotFound, id)
	}
	if err != nil {
		return OutputChunk{}, fmt.Errorf("store: output chunk %d: %w", id, err)
	}
	c.At = time.UnixMilli(at)
	return c, nil
}
