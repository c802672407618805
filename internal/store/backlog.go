package store

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// The backlog holds the records of requests the host answered without changing anything
// (a runtime.inspect, a refusal): one append to a file per request, which survives the
// death of the process as a committed transaction does, and costs a small fraction of
// one. The records are folded into the database soon after, in order, and always before
// any other write of the same Store, inside that write's transaction; a Store's reads of
// requests and of the journal fold first too. A host killed before folding leaves its
// backlog file behind, and the next Store opened on the data directory folds it.
//
// A backlog file is a sequence of records: a 4-byte big-endian payload length, the
// payload's 4-byte CRC-32C, then the payload, one answered request as JSON. A record cut
// short by the death of its writer ends the file: its reply was never sent. The database
// remembers, per file, how much of it has been folded (backlog_folded), in the
// transaction that folds it, so that no record is folded twice.

// backlogDirName is the directory of the backlog files inside the data directory.
const backlogDirName = "backlog"

// backlogExt ends every backlog file's name.
const backlogExt = ".log"

// FoldDelay is the longest an answered request waits in the backlog when no other write
// of its Store folds it sooner.
const FoldDelay = 50 * time.Millisecond

// backlogRotateSize is the size past which a wholly folded backlog file is replaced by a
// new one.
const backlogRotateSize = 4 << 20

// backlogHeaderSize is a record's length and checksum.
const backlogHeaderSize = 8

// maxBacklogRecord bounds one record's payload: a request and its reply, each within a
// frame.
const maxBacklogRecord = 4 << 20

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// answered is one answered request awaiting its fold, and the backlog's size once its
// record was appended.
type answered struct {
	req   Request
	reply Reply
	end   int64
}

// backlogRecord is an answered request as a backlog file holds it.
type backlogRecord struct {
	SessionID    int64          `json:"session_id"`
	Generation   string         `json:"generation"`
	ExecutionID  string         `json:"execution_id"`
	RequestID    string         `json:"request_id"`
	Method       string         `json:"method"`
	Request      jsontext.Value `json:"request"`
	ReceivedAtMS int64          `json:"received_at_ms"`
	Kind         string         `json:"kind"`
	Value        jsontext.Value `json:"value,omitempty"`
	Code         string         `json:"code,omitempty"`
	Message      string         `json:"message,omitempty"`
	RepliedAtMS  int64          `json:"replied_at_ms"`
}

func newBacklogRecord(req Request, reply Reply) backlogRecord {
	return backlogRecord{SessionID: req.SessionID, Generation: req.Generation, ExecutionID: req.ExecutionID,
		RequestID: req.RequestID, Method: req.Method, Request: req.Body, ReceivedAtMS: ms(req.ReceivedAt),
		Kind: reply.Kind, Value: reply.Value, Code: reply.Code, Message: reply.Message, RepliedAtMS: ms(reply.RepliedAt)}
}

func (r backlogRecord) answered() answered {
	return answered{
		req: Request{SessionID: r.SessionID, Generation: r.Generation, ExecutionID: r.ExecutionID,
			RequestID: r.RequestID, Method: r.Method, Body: r.Request, ReceivedAt: time.UnixMilli(r.ReceivedAtMS)},
		reply: Reply{Kind: r.Kind, Value: r.Value, Code: r.Code, Message: r.Message, RepliedAt: time.UnixMilli(r.RepliedAtMS)},
	}
}

// backlog is one Store's backlog file, made at its first record and locked for the
// Store's life, with the records not yet folded.
type backlog struct {
	dir string

	mu     sync.Mutex
	file   *os.File // nil until the first record
	name   string   // the file's base name, its key in backlog_folded
	size   int64    // bytes appended to file
	queue  []answered
	due    bool  // a fold is scheduled
	broken error // a failed append that could not be undone: no more records
	closed bool
	buf    []byte
}

// RecordAnswered records a request the host answered without changing anything, with its
// reply, durably: when it returns nil, the record survives the death of the process. It
// reaches the database within FoldDelay, or at the Store's next write, whichever is
// first. A zero ReceivedAt or RepliedAt is now.
func (s *Store) RecordAnswered(ctx context.Context, req Request, reply Reply) error {
	now := s.now()
	if req.ReceivedAt.IsZero() {
		req.ReceivedAt = now
	}
	if reply.RepliedAt.IsZero() {
		reply.RepliedAt = now
	}
	if s.backlog == nil { // an ephemeral store has no files: nothing to outlive
		return s.Update(ctx, func(tx *Tx) error { return tx.insertAnswered([]answered{{req: req, reply: reply}}) })
	}
	schedule, err := s.backlog.append(req, reply)
	if err != nil {
		return err
	}
	if schedule {
		time.AfterFunc(FoldDelay, s.foldDue)
	}
	return nil
}

// foldDue folds the backlog when its delay has passed; a fold that fails is tried again.
func (s *Store) foldDue() {
	b := s.backlog
	b.mu.Lock()
	b.due = false
	pending := len(b.queue) > 0 && !b.closed
	b.mu.Unlock()
	if !pending {
		return
	}
	if err := s.Update(context.Background(), func(*Tx) error { return nil }); err != nil {
		b.mu.Lock()
		closed := b.closed // the Store closed meanwhile, folding what it held first
		retry := !closed && !b.due
		b.due = b.due || retry
		b.mu.Unlock()
		if closed {
			return
		}
		s.log.Error("folding the backlog into the database", "err", err)
		if retry {
			time.AfterFunc(FoldDelay, s.foldDue)
		}
	}
}

// settle folds the backlog now, for a read that must see every answered request.
func (s *Store) settle(ctx context.Context) error {
	if s.backlog == nil || !s.backlog.pending() {
		return nil
	}
	return s.Update(ctx, func(*Tx) error { return nil })
}

// append writes one record and queues it; it reports whether a fold must be scheduled.
func (b *backlog) append(req Request, reply Reply) (schedule bool, err error) {
	payload, err := json.Marshal(newBacklogRecord(req, reply))
	if err != nil {
		return false, fmt.Errorf("store: backlog record: %w", err)
	}
	if len(payload) > maxBacklogRecord {
		return false, fmt.Errorf("%w: a backlog record of %d bytes, over %d", ErrInvalid, len(payload), maxBacklogRecord)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.closed:
		return false, errors.New("store: closed")
	case b.broken != nil:
		return false, b.broken
	case b.file == nil:
		if err := b.create(); err != nil {
			return false, err
		}
	}
	frame := binary.BigEndian.AppendUint32(b.buf[:0], uint32(len(payload)))
	frame = binary.BigEndian.AppendUint32(frame, crc32.Checksum(payload, castagnoli))
	frame = append(frame, payload...)
	b.buf = frame[:0]
	if n, err := b.file.Write(frame); err != nil {
		err = fmt.Errorf("store: backlog %s: %w", b.name, err)
		if n > 0 { // a torn record would end the file: take it back, or append no more
			if terr := b.file.Truncate(b.size); terr != nil {
				b.broken = fmt.Errorf("%w; and undoing the torn record: %v", err, terr)
			}
		}
		return false, err
	}
	b.size += int64(len(frame))
	b.queue = append(b.queue, answered{req: req, reply: reply, end: b.size})
	schedule = !b.due
	b.due = true
	return schedule, nil
}

// create makes a new backlog file of this Store, locked for its life. b.mu is held.
func (b *backlog) create() error {
	if err := os.MkdirAll(b.dir, 0o700); err != nil {
		return fmt.Errorf("store: backlog directory: %w", err)
	}
	var random [6]byte
	rand.Read(random[:])
	name := fmt.Sprintf("%d-%d-%s%s", time.Now().UnixNano(), os.Getpid(), hex.EncodeToString(random[:]), backlogExt)
	f, err := os.OpenFile(filepath.Join(b.dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("store: backlog: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		os.Remove(f.Name())
		return fmt.Errorf("store: locking backlog %s: %w", name, err)
	}
	b.file, b.name, b.size = f, name, 0
	return nil
}

// pending reports whether records await their fold.
func (b *backlog) pending() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue) > 0
}

// foldInto inserts the queued records in tx and notes how far the file is folded; it
// returns how many it inserted, to be dropped once tx commits.
func (b *backlog) foldInto(tx *Tx) (int, error) {
	b.mu.Lock()
	batch, name := b.queue, b.name
	b.mu.Unlock()
	if len(batch) == 0 {
		return 0, nil
	}
	if err := tx.insertAnswered(batch); err != nil {
		return 0, err
	}
	if err := tx.noteFolded(name, batch[len(batch)-1].end); err != nil {
		return 0, err
	}
	return len(batch), nil
}

// folded drops the first n queued records, committed; a large file wholly folded is
// replaced by a new one, made at the next record.
func (b *backlog) folded(n int) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.queue = b.queue[n:]
	if len(b.queue) == 0 {
		b.queue = nil
		if b.size > backlogRotateSize {
			b.retire()
		}
	}
}

// retire closes and removes the file, wholly folded; b.mu is held.
func (b *backlog) retire() {
	if b.file == nil {
		return
	}
	os.Remove(b.file.Name())
	b.file.Close()
	b.file, b.name, b.size = nil, "", 0
}

// close stops appending. A file wholly folded is removed; one that is not stays for the
// next Store to fold.
func (b *backlog) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	if len(b.queue) == 0 {
		b.retire()
	} else if b.file != nil {
		b.file.Close()
	}
}

// foldChunk is how many answered requests one statement inserts.
const foldChunk = 64

// insertAnswered records answered requests and their replies, in order, a chunk of them
// per statement: a row's own statement would cost several times its insertion. The
// requests' ids follow the largest recorded, which the transaction holds still.
func (tx *Tx) insertAnswered(batch []answered) error {
	var last int64
	if err := tx.queryRow(`SELECT coalesce(max(id), 0) FROM host_requests`).Scan(&last); err != nil {
		return fmt.Errorf("store: record requests: %w", err)
	}
	for len(batch) > 0 {
		chunk := batch[:min(len(batch), foldChunk)]
		batch = batch[len(chunk):]
		requests := make([]any, 0, 8*len(chunk))
		replies := make([]any, 0, 6*len(chunk))
		journal := make([]any, 0, 8*len(chunk))
		for _, a := range chunk {
			last++
			q, r := a.req, a.reply
			requests = append(requests, last, q.SessionID, q.Generation, q.ExecutionID, q.RequestID, q.Method,
				string(q.Body), ms(q.ReceivedAt))
			value, code, message := replyColumns(r)
			replies = append(replies, last, r.Kind, value, code, message, ms(r.RepliedAt))
			journal = append(journal, q.SessionID, ms(tx.now), KindRequest, last, q.SessionID, ms(tx.now), KindReply, last)
		}
		for _, insert := range []struct {
			table, columns string
			row            int // placeholders per row
			args           []any
		}{
			{"host_requests", "id, session_id, generation, execution_id, request_id, method, request, received_at_ms", 8, requests},
			{"host_replies", "request_id, kind, value, code, message, replied_at_ms", 6, replies},
			{"journal", "session_id, at_ms, kind, ref_id", 4, journal},
		} {
			rows := len(insert.args) / insert.row
			row := "(?" + strings.Repeat(", ?", insert.row-1) + ")"
			query := "INSERT INTO " + insert.table + " (" + insert.columns + ") VALUES " +
				row + strings.Repeat(", "+row, rows-1)
			if _, err := tx.exec(query, insert.args...); err != nil {
				return fmt.Errorf("store: record answered requests: %s: %w", insert.table, err)
			}
		}
	}
	return nil
}

// noteFolded records that file is folded up to offset.
func (tx *Tx) noteFolded(file string, offset int64) error {
	_, err := tx.exec(`INSERT INTO backlog_folded (file, offset) VALUES (?, ?)
		ON CONFLICT (file) DO UPDATE SET offset = excluded.offset`, file, offset)
	if err != nil {
		return fmt.Errorf("store: backlog %s: %w", file, err)
	}
	return nil
}

// recoverBacklogs folds the backlog files that no living Store holds, left by hosts that
// died, and forgets the folded offsets of files that are gone.
func (s *Store) recoverBacklogs(ctx context.Context) error {
	entries, err := os.ReadDir(s.backlog.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("store: backlog directory: %w", err)
	}
	present := map[string]bool{}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), backlogExt) {
			continue
		}
		present[e.Name()] = true
		if err := s.recoverBacklog(ctx, e.Name()); err != nil {
			return err
		}
	}
	return s.Update(ctx, func(tx *Tx) error {
		rows, err := tx.query(`SELECT file FROM backlog_folded`)
		if err != nil {
			return err
		}
		var gone []string
		for rows.Next() {
			var name string
			if err := rows.Scan(&name); err != nil {
				rows.Close()
				return err
			}
			if !present[name] {
				gone = append(gone, name)
			}
		}
		rows.Close()
		for _, name := range gone {
			if _, err := tx.exec(`DELETE FROM backlog_folded WHERE file = ?`, name); err != nil {
				return err
			}
		}
		return rows.Err()
	})
}

// recoverBacklog folds one backlog file if its Store is gone (its lock is free), and
// removes it.
func (s *Store) recoverBacklog(ctx context.Context, name string) error {
	path := filepath.Join(s.backlog.dir, name)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) { // another Store recovered it meanwhile
		return nil
	}
	if err != nil {
		return fmt.Errorf("store: backlog %s: %w", name, err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) { // a living Store's
			return nil
		}
		return fmt.Errorf("store: locking backlog %s: %w", name, err)
	}
	// Locked: is it still the file of that name, and not one another Store recovered and
	// removed while this one waited?
	held, err := f.Stat()
	if err != nil {
		return fmt.Errorf("store: backlog %s: %w", name, err)
	}
	if named, err := os.Stat(path); err != nil || !os.SameFile(held, named) {
		return nil
	}
	err = s.Update(ctx, func(tx *Tx) error {
		var offset int64
		switch err := tx.queryRow(`SELECT offset FROM backlog_folded WHERE file = ?`, name).Scan(&offset); {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return err
		}
		records, end, err := readBacklog(f, offset)
		if err != nil {
			return err
		}
		batch := make([]answered, len(records))
		for i, r := range records {
			batch[i] = r.answered()
		}
		if err := tx.insertAnswered(batch); err != nil {
			return err
		}
		if end > offset {
			return tx.noteFolded(name, end)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: folding backlog %s: %w", name, err)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("store: backlog %s: %w", name, err)
	}
	return nil
}

// readBacklog reads the whole records of a backlog file from offset, and returns them
// with the offset past the last. A record cut short, or whose checksum fails, ends the
// file.
func readBacklog(f *os.File, offset int64) ([]backlogRecord, int64, error) {
	data, err := io.ReadAll(io.NewSectionReader(f, offset, 1<<62))
	if err != nil {
		return nil, offset, err
	}
	var records []backlogRecord
	for len(data) >= backlogHeaderSize {
		size := binary.BigEndian.Uint32(data)
		sum := binary.BigEndian.Uint32(data[4:])
		if size == 0 || size > maxBacklogRecord || len(data)-backlogHeaderSize < int(size) {
			break
		}
		payload := data[backlogHeaderSize : backlogHeaderSize+int(size)]
		if crc32.Checksum(payload, castagnoli) != sum {
			break
		}
		var r backlogRecord
		if err := json.Unmarshal(bytes.Clone(payload), &r); err != nil {
			break
		}
		records = append(records, r)
		data = data[backlogHeaderSize+int(size):]
		offset += int64(backlogHeaderSize + int(size))
	}
	return records, offset, nil
}
