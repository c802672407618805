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

// Notify, in tx, notifies Channel of sessions and of the last sequence number tx
// journals; the server delivers it at the commit. It is sent with the COMMIT, in its
// round trip (see Commit). The payload is
// "<engine>;<last>;<id>,<id>,…", or "<engine>;<last>;" alone past maxPayload: every
// session. The engine's own listener, whose Store woke its readers as it committed,
// wakes none for it.
func (tx *engineTx) Notify(sessions []int64, last int64) error {
	var b strings.Builder
	b.WriteString(tx.e.id + ";" + strconv.FormatInt(last, 10) + ";")
	for i, id := range sessions {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(id, 10))
	}
	payload := b.String()
	if len(payload) > maxPayload {
		payload = tx.e.id + ";" + strconv.FormatInt(last, 10) + ";"
	}
	tx.notify = payload
	return nil
}

// Notify tells the other daemons' Stores, at tx's commit, that it journaled sessions up
// to sequence number last.
func (e *Engine) Notify(tx store.EngineTx, sessions []int64, last int64) error {
	t, ok := tx.(*engineTx)
	if !ok {
		return fmt.Errorf("postgres: notify: a transaction of another engine, %T", tx)
	}
	return t.Notify(sessions, last)
}

// Listen calls changed with the sessions each notification on Channel names, and with
// nil whenever the journal's last sequence number moved past every one notified (at
// most every PollInterval: a notification was missed), or the listening connection was
// lost; it reconnects until ctx ends.
func (e *Engine) Listen(ctx context.Context, changed func(sessions []int64), listening chan<- struct{}) {
	heard := int64(-1) // the last sequence number seen or notified; -1 before the first look
	for ctx.Err() == nil {
		err := e.listen(ctx, &heard, changed, listening)
		if ctx.Err() != nil {
			return
		}
		e.log(err)
		if heard < 0 { // failed before its first look: listening, it never was
			heard = 0
			close(listening)
		}
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
// journal's last sequence number every PollInterval. *heard is the last sequence number
// the listener knows of, read or notified: a number read past it is a commit whose
// notification was missed. It closes listening after its first look.
func (e *Engine) listen(ctx context.Context, heard *int64, changed func([]int64), listening chan<- struct{}) error {
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
			switch {
			case *heard < 0: // the first look: every commit after it is notified
				*heard = seq.Int64
				close(listening)
			case seq.Int64 > *heard:
				*heard = seq.Int64
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
			from, last, sessions := parsePayload(n.Payload)
			*heard = max(*heard, last)
			if from != e.id {
				changed(sessions)
			}
		case !errors.Is(err, context.DeadlineExceeded):
			return err
		}
	}
}

// parsePayload is the engine, the last sequence number and the sessions a notification
// names; nil sessions, every session, for a payload that names none or is not of
// Notify's form.
func parsePayload(payload string) (from string, last int64, sessions []int64) {
	from, rest, _ := strings.Cut(payload, ";")
	head, list, ok := strings.Cut(rest, ";")
	last, err := strconv.ParseInt(head, 10, 64)
	if !ok || err != nil || list == "" {
		return from, max(last, 0), nil
	}
	for f := range strings.SplitSeq(list, ",") {
		id, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return from, last, nil
		}
		sessions = append(sessions, id)
	}
	return from, last, sessions
}
