package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kilnrt/kiln/internal/store"
)

// Channel is the LISTEN/NOTIFY channel on which each commit names the sessions it
// journaled, for the Stores of other daemons on the database.
const Channel = "kiln_journal"

// PollInterval bounds how long a change another daemon committed goes unseen when its
// notification is missed (the listening connection broke, or the server dropped it):
// the listener reads the journal's last sequence number at least this often.
const PollInterval = time.Second

// maxPayload is the longest notification payload the engine sends; PostgreSQL takes up
// to 8000 bytes. A commit naming more sessions sends an empty one: every session.
const maxPayload = 7900

// Notify, in tx, notifies Channel of sessions; the server delivers it at the commit.
func (tx *engineTx) Notify(sessions []int64) error {
	var b strings.Builder
	for i, id := range sessions {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(id, 10))
	}
	payload := b.String()
	if len(payload) > maxPayload {
		payload = ""
	}
	_, err := tx.conn.ExecContext(tx.ctx, `SELECT pg_notify($1, $2)`, Channel, payload)
	return err
}

// Notify tells the other daemons' Stores, at tx's commit, that it journaled sessions.
func (e *Engine) Notify(tx store.EngineTx, sessions []int64) error {
	t, ok := tx.(*engineTx)
	if !ok {
		return fmt.Errorf("postgres: notify: a transaction of another engine, %T", tx)
	}
	return t.Notify(sessions)
}

// Listen calls changed with the sessions each notification on Channel names, and with
// nil whenever the journal's last sequence number moved without one (at most every
// PollInterval), or the listening connection was lost; it reconnects until ctx ends.
func (e *Engine) Listen(ctx context.Context, changed func(sessions []int64)) {
	var last int64
	for ctx.Err() == nil {
		err := e.listen(ctx, &last, changed)
		if ctx.Err() != nil {
			return
		}
		e.log(err)
		changed(nil) // a notification may have been missed while the connection was down
		select {
		case <-ctx.Done():
		case <-time.After(PollInterval):
		}
	}
}

// log notes a listening connection that broke.
func (e *Engine) log(err error) {
	if e.logger != nil {
		e.logger.Warn("listening for other daemons' commits; polling until it is back", "err", err)
	}
}

// listen holds one listening connection until it fails or ctx ends, reading the
// journal's last sequence number (kept in *last) every PollInterval.
func (e *Engine) listen(ctx context.Context, last *int64, changed func([]int64)) error {
	conn, err := pgx.ConnectConfig(ctx, e.cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, `LISTEN `+Channel); err != nil {
		return err
	}
	next := time.Now()
	for {
		if !time.Now().Before(next) { // every PollInterval, notifications or none
			var seq sql.NullInt64
			if err := conn.QueryRow(ctx, `SELECT max(seq) FROM journal`).Scan(&seq); err != nil {
				return err
			}
			if seq.Int64 != *last {
				*last = seq.Int64
				changed(nil)
			}
			next = time.Now().Add(PollInterval)
		}
		wait, cancel := context.WithDeadline(ctx, next)
		n, err := conn.WaitForNotification(wait)
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err == nil:
			changed(parsePayload(n.Payload))
		case !errors.Is(err, context.DeadlineExceeded):
			return err
		}
	}
}

// parsePayload is the sessions a notification names; nil, every session, for an empty
// payload or one that is not a list of ids.
func parsePayload(payload string) []int64 {
	if payload == "" {
		return nil
	}
	var ids []int64
	for f := range strings.SplitSeq(payload, ",") {
		id, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return nil
		}
		ids = append(ids, id)
	}
	return ids
}
