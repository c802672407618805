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
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/jsonbuf"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// The backlog holds the records of requests the host answered without changing anything
// (a runtime.inspect, a refusal), and of the starts and ends of a session's cells: one
// append to a file per record, which survives the death of the process as a committed
// transaction does, and costs a small fraction of one. The records are folded into the
// database soon after, in order, and always before any other write of the same Store,
// inside that write's transaction; a Store's reads of requests and of the journal fold
// first too. A host killed before folding leaves its
// backlog files behind, and the next Store opened on the data directory folds them.
//
// A backlog file begins with backlogMagic and is made at its full size, zeros, mapped
// into the Store's memory; it is then a sequence of records, each at an offset that is a
// multiple of 8: a 4-byte big-endian payload length, the payload's 4-byte CRC-32C, the
// payload (one answered request, or a cell's start or end, as JSON), and zeros up to the
// next multiple of 8. A record is written payload first and header last, by one aligned 8-byte store, so a zero
// header ends the records: past it, at most a record whose writer died before its reply
// was sent. An append costs a copy into memory the kernel keeps for the file, not a
// system call. A file is
// locked (flock) by its Store from before it bears its name until it is removed, so a
// Store recovering files never takes a living one's. The database remembers, per file,
// how much of it has been folded (backlog_folded), in the transaction that folds it, so
// that no record is folded twice.
//
// The format won an A/B against appending each record by one write(2) to a file made
// empty; docs/host.md has the figures.

// backlogDirName is the directory of the backlog files inside the data directory.
const backlogDirName = "backlog"

// Backlog file name endings: a file being made (not yet locked and named), a file of
// records, and a file that could not be folded, kept for a person to look at.
const (
	backlogNewExt = ".new"
	backlogExt    = ".log"
	backlogBadExt = ".bad"
)

// FoldDelay is the longest an answered request waits in the backlog when no other write
// of its Store folds it sooner.
const FoldDelay = 50 * time.Millisecond

// halfMadeAge is how old a backlog file left half made must be for a Store to remove it.
const halfMadeAge = time.Minute

// backlogFileSize is the size a backlog file is made at; a record that does not fit in
// what is left goes to a new file, and the old one is removed once its records are
// folded. A record larger than a file gets a file of its own size.
const backlogFileSize = 4 << 20

// backlogMagic opens every backlog file written in the mapped format.
const backlogMagic = "KILNBL02"

// backlogHeaderSize is a record's length and checksum.
const backlogHeaderSize = 8

// maxBacklogRecord bounds one record's payload: a request and its reply, each within a
// frame.
const maxBacklogRecord = 4 << 20

// castagnoli is the CRC-32C table, made at its first use: making it costs a process that
// never writes or reads a backlog, every kiln command's start among them, 0.14 ms.
var castagnoli = sync.OnceValue(func() *crc32.Table { return crc32.MakeTable(crc32.Castagnoli) })

// errBacklogCorrupt is a backlog file holding something its writer cannot have written.
var errBacklogCorrupt = errors.New("store: backlog file corrupt")

// errBacklogTooLarge is a record over maxBacklogRecord.
var errBacklogTooLarge = fmt.Errorf("%w: a backlog record over %d bytes", ErrInvalid, maxBacklogRecord)

// backlogFile is one backlog file a Store holds locked, mapped.
type backlogFile struct {
	f    *os.File
	mem  []byte // the whole file, mapped shared
	path string
	name string // its base name, its key in backlog_folded
	size int64  // bytes written: the magic and the records
	room int64  // the most bytes it takes
}

// release unmaps and closes the file.
func (file *backlogFile) release() {
	if file.mem != nil {
		syscall.Munmap(file.mem)
	}
	file.f.Close()
}

// queued is one record awaiting its fold: an answered request or, start set, a cell's
// start (see StartNextExecution), or, finish set, a cell's end (see EndExecution); with
// the file its record is in and the file's size once the record was appended.
type queued struct {
	req    Request
	reply  Reply
	start  *Execution
	finish *ending
	file   *backlogFile
	end    int64
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
	Value        jsontext.Value `json:"value,omitzero"`
	Code         string         `json:"code,omitzero"`
	Message      string         `json:"message,omitzero"`
	RepliedAtMS  int64          `json:"replied_at_ms"`
	// Start, set, makes the record a cell's start: with the session, generation and
	// execution id its only other members.
	Start *backlogStart `json:"start,omitzero"`
	// End, set, makes the record a cell's end, as Start does its start.
	End *backlogEnd `json:"end,omitzero"`
}

// backlogCellEnd is a backlog record of a cell's end as its file holds it: its names and
// its end member alone.
type backlogCellEnd struct {
	SessionID   int64       `json:"session_id"`
	Generation  string      `json:"generation"`
	ExecutionID string      `json:"execution_id"`
	End         *backlogEnd `json:"end"`
}

// backlogStart is what a backlog record of a cell's start holds beyond its names.
type backlogStart struct {
	Code        string `json:"code"`
	StartedAtMS int64  `json:"started_at_ms"`
}

// backlogEnd is what a backlog record of a cell's end holds beyond its names: the
// columns of its end (see ExecutionEnd).
type backlogEnd struct {
	Status         string         `json:"status"`
	ReportedStatus string         `json:"reported_status,omitzero"`
	EndedAtMS      int64          `json:"ended_at_ms"`
	Output         jsontext.Value `json:"output,omitzero"`
	TruncatedBytes int64          `json:"truncated_bytes,omitzero"`
	Error          *string        `json:"error,omitzero"`
	Exception      jsontext.Value `json:"exception,omitzero"`
	Raw            jsontext.Value `json:"raw,omitzero"`
	NamespaceLost  bool           `json:"namespace_lost,omitzero"`
	NotRun         bool           `json:"not_run,omitzero"`
	Limit          string         `json:"limit,omitzero"`
}

func newBacklogRecord(q queued) backlogRecord {
	if e := q.start; e != nil {
		return backlogRecord{SessionID: e.SessionID, Generation: e.Generation, ExecutionID: e.CellID,
			Start: &backlogStart{Code: e.Code, StartedAtMS: ms(e.StartedAt)}}
	}
	if x := q.finish; x != nil {
		end := x.end
		return backlogRecord{SessionID: x.cell.SessionID, Generation: x.cell.Generation, ExecutionID: x.cell.CellID,
			End: &backlogEnd{Status: end.Status, ReportedStatus: end.ReportedStatus, EndedAtMS: ms(end.EndedAt),
				Output: end.Output, TruncatedBytes: end.TruncatedBytes, Error: end.Error, Exception: end.Exception,
				Raw: end.Raw, NamespaceLost: end.NamespaceLost, NotRun: end.NotRun, Limit: end.Limit}}
	}
	req, reply := q.req, q.reply

	return backlogRecord{SessionID: req.SessionID, Generation: req.Generation, ExecutionID: req.ExecutionID,
		RequestID: req.RequestID, Method: req.Method, Request: req.Body, ReceivedAtMS: ms(req.ReceivedAt),
		Kind: reply.Kind, Value: reply.Value, Code: reply.Code, Message: reply.Message, RepliedAtMS: ms(reply.RepliedAt)}
}

// appendJSON appends the record's JSON object, made by hand because a record is written
// for every request a cell makes: for an answered request what json.Marshal gives for
// it, and for a cell's start its names and its start member alone. A cell's end, its
// names and its end member, is json.Marshal's.
func (r backlogRecord) appendJSON(dst []byte) ([]byte, error) {
	if r.End != nil {
		out, err := json.Marshal(backlogCellEnd{SessionID: r.SessionID, Generation: r.Generation,
			ExecutionID: r.ExecutionID, End: r.End})
		return append(dst, out...), err
	}
	b := jsonbuf.New(dst)
	b.Raw(`{"session_id":`)
	b.Int(r.SessionID)
	members := []struct{ name, value string }{{`,"generation":`, r.Generation},
		{`,"execution_id":`, r.ExecutionID}, {`,"request_id":`, r.RequestID}, {`,"method":`, r.Method}}
	if r.Start != nil {
		members = members[:2]
	}
	for _, member := range members {
		b.Raw(member.name)
		b.String(member.value)
	}
	if r.Start != nil {
		b.Raw(`,"start":{"code":`)
		b.String(r.Start.Code)
		b.Raw(`,"started_at_ms":`)
		b.Int(r.Start.StartedAtMS)
		b.Raw("}}")
		return b.Bytes()
	}
	b.Raw(`,"request":`)
	b.Value(r.Request)
	b.Raw(`,"received_at_ms":`)
	b.Int(r.ReceivedAtMS)
	b.Raw(`,"kind":`)
	b.String(r.Kind)
	if len(r.Value) > 0 {
		b.Raw(`,"value":`)
		b.Value(r.Value)
	}
	if r.Code != "" {
		b.Raw(`,"code":`)
		b.String(r.Code)
	}
	if r.Message != "" {
		b.Raw(`,"message":`)
		b.String(r.Message)
	}
	b.Raw(`,"replied_at_ms":`)
	b.Int(r.RepliedAtMS)
	b.Raw("}")
	return b.Bytes()
}

func (r backlogRecord) queued() queued {
	if r.Start != nil {
		return queued{start: newExecution(r.SessionID, r.Generation, r.ExecutionID, r.Start.Code,
			time.UnixMilli(r.Start.StartedAtMS))}
	}
	if e := r.End; e != nil {
		return queued{finish: &ending{
			cell: Execution{SessionID: r.SessionID, Generation: r.Generation, CellID: r.ExecutionID},
			end: ExecutionEnd{Status: e.Status, ReportedStatus: e.ReportedStatus, EndedAt: time.UnixMilli(e.EndedAtMS),
				Output: e.Output, TruncatedBytes: e.TruncatedBytes, Error: e.Error, Exception: e.Exception, Raw: e.Raw,
				NamespaceLost: e.NamespaceLost, NotRun: e.NotRun, Limit: e.Limit}}}
	}
	return queued{
		req: Request{SessionID: r.SessionID, Generation: r.Generation, ExecutionID: r.ExecutionID,
			RequestID: r.RequestID, Method: r.Method, Body: r.Request, ReceivedAt: time.UnixMilli(r.ReceivedAtMS)},
		reply: Reply{Kind: r.Kind, Value: r.Value, Code: r.Code, Message: r.Message, RepliedAt: time.UnixMilli(r.RepliedAtMS)},
	}
}

// backlog is one Store's backlog files and the records not yet folded.
type backlog struct {
	dir string
	now func() time.Time // the Store's clock; nil is time.Now

	mu      sync.Mutex
	current *backlogFile   // appended to; nil until the first record
	older   []*backlogFile // rotated out, removed once their records are folded
	queue   []queued
	due     bool // a fold is scheduled
	closed  bool
	stamp   int64 // the time in the name of the file made last (see create)
}

// RecordAnswered records a request the host answered without changing anything, with its
// reply, durably: when it returns nil, the record survives the death of the process. It
// reaches the database within FoldDelay, or at the Store's next write, whichever is
// first. A zero ReceivedAt or RepliedAt is now.
func (s *Store) RecordAnswered(ctx context.Context, req Request, reply Reply) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("store: recording an answer: %w", err)
	}
	now := s.now()
	if req.ReceivedAt.IsZero() {
		req.ReceivedAt = now
	}
	if reply.RepliedAt.IsZero() {
		reply.RepliedAt = now
	}
	if len(reply.Value) == 0 {
		reply.Value = nil // no value is null, here as in the database
	}
	if reply.Kind != "ok" && reply.Kind != "error" {
		// Refused here, not by the fold, where it would hold up every write after it.
		return fmt.Errorf("%w: a reply of kind %q", ErrInvalid, reply.Kind)
	}
	if s.backlog == nil { // no files (an ephemeral store, a database server): a transaction
		return s.UpdateSession(ctx, req.SessionID, func(tx *Tx) error {
			if err := tx.InsertRequest(&req); err != nil {
				return err
			}
			return tx.InsertReply(req.SessionID, req.ID, reply)
		})
	}
	return s.enqueue(queued{req: req, reply: reply})
}

// enqueue appends q to the backlog, durably, and has it folded within FoldDelay.
func (s *Store) enqueue(q queued) error {
	schedule, err := s.backlog.append(q)
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
func (b *backlog) append(q queued) (schedule bool, err error) {
	size := 256 + len(q.req.Body) + len(q.reply.Value) + len(q.reply.Message) // the record, about
	switch {
	case q.start != nil:
		size = 256 + len(q.start.Code)
	case q.finish != nil:
		end := q.finish.end
		size = 256 + len(end.Output) + len(end.Exception) + len(end.Raw)
	}
	payload, err := newBacklogRecord(q).appendJSON(make([]byte, 0, size))
	if err != nil {
		return false, fmt.Errorf("store: backlog record: %w", err)
	}
	if len(payload) > maxBacklogRecord {
		return false, fmt.Errorf("%w: %d bytes", errBacklogTooLarge, len(payload))
	}
	need := align8(backlogHeaderSize + len(payload))
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.closed:
		return false, errors.New("store: closed")
	case b.current == nil || b.current.size+int64(need) > b.current.room:
		file, err := b.create(max(backlogFileSize, len(backlogMagic)+need))
		if err != nil {
			return false, err
		}
		if b.current != nil {
			b.older = append(b.older, b.current)
		}
		b.current = file
	}
	file := b.current
	var header [backlogHeaderSize]byte
	binary.BigEndian.PutUint32(header[:], uint32(len(payload)))
	binary.BigEndian.PutUint32(header[4:], crc32.Checksum(payload, castagnoli()))
	at := file.size
	copy(file.mem[at+backlogHeaderSize:], payload)
	// One store, after the payload's: a record is whole once its header is there.
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&file.mem[at])), binary.NativeEndian.Uint64(header[:]))
	file.size += int64(need)
	q.file, q.end = file, file.size
	b.queue = append(b.queue, q)
	schedule = !b.due
	b.due = true
	return schedule, nil
}

// align8 is n rounded up to a multiple of 8.
func align8(n int) int { return (n + 7) &^ 7 }

// create makes a new backlog file of size bytes, locked before it bears a name recovery
// looks at, with its blocks allocated and its magic written, and maps it. b.mu is held.
func (b *backlog) create(size int) (_ *backlogFile, err error) {
	if err := os.MkdirAll(b.dir, 0o700); err != nil {
		return nil, fmt.Errorf("store: backlog directory: %w", err)
	}
	var random [6]byte
	rand.Read(random[:])
	// Recovery folds a dead host's files in the order of their names: each of a Store's
	// is named after the one before it, whatever the clock did meanwhile.
	now := time.Now
	if b.now != nil {
		now = b.now
	}
	b.stamp = max(now().UnixNano(), b.stamp+1)
	base := fmt.Sprintf("%d-%d-%s", b.stamp, os.Getpid(), hex.EncodeToString(random[:]))
	making := filepath.Join(b.dir, base+backlogNewExt)
	f, err := os.OpenFile(making, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("store: backlog: %w", err)
	}
	defer func() {
		if err != nil {
			os.Remove(making)
			f.Close()
		}
	}()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return nil, fmt.Errorf("store: locking backlog %s: %w", base, err)
	}
	// Blocks allocated now: a write into the mapping finds its block there, where a full
	// disk would otherwise end the process.
	if err := allocate(f, size); err != nil {
		return nil, fmt.Errorf("store: backlog %s: %w", base, err)
	}
	if _, err := f.WriteAt([]byte(backlogMagic), 0); err != nil {
		return nil, fmt.Errorf("store: backlog %s: %w", base, err)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("store: mapping backlog %s: %w", base, err)
	}
	path := filepath.Join(b.dir, base+backlogExt)
	if err := os.Rename(making, path); err != nil {
		syscall.Munmap(mem)
		return nil, fmt.Errorf("store: backlog: %w", err)
	}
	return &backlogFile{f: f, mem: mem, path: path, name: base + backlogExt, size: int64(len(backlogMagic)), room: int64(size)}, nil
}

// allocate gives f size bytes of zeros, with their blocks: by fallocate(2), or, on a
// file system without it, by writing them.
func allocate(f *os.File, size int) error {
	err := syscall.Fallocate(int(f.Fd()), 0, 0, int64(size))
	if !errors.Is(err, syscall.EOPNOTSUPP) && !errors.Is(err, syscall.ENOSYS) {
		return err
	}
	zeros := make([]byte, 1<<20)
	for at := 0; at < size; at += len(zeros) {
		if _, err := f.WriteAt(zeros[:min(len(zeros), size-at)], int64(at)); err != nil {
			return err
		}
	}
	return nil
}

// pending reports whether records await their fold.
func (b *backlog) pending() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue) > 0
}

// foldInto inserts the queued records in tx and notes how far each of their files is
// folded; it returns how many it inserted, to be dropped once tx commits. A closed
// backlog folds nothing: its files may be another Store's to recover already.
func (b *backlog) foldInto(tx *Tx) (int, error) {
	b.mu.Lock()
	batch, closed := b.queue, b.closed
	b.mu.Unlock()
	if len(batch) == 0 || closed {
		return 0, nil
	}
	if err := tx.foldQueued(batch); err != nil {
		return 0, err
	}
	// A cell's start or end folded again is a no-op (see foldStart and foldEnd): a file's
	// offset is noted only past an answered request, which a second fold would record
	// twice.
	requests := false
	for i, a := range batch {
		requests = requests || a.start == nil && a.finish == nil
		if i == len(batch)-1 || batch[i+1].file != a.file {
			if requests {
				if err := tx.noteFolded(a.file.name, a.end); err != nil {
					return 0, err
				}
			}
			requests = false
		}
	}
	return len(batch), nil
}

// folded drops the first n queued records, committed, and removes the rotated-out files
// none of the rest is in.
func (b *backlog) folded(n int) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.queue = b.queue[n:]
	if len(b.queue) == 0 {
		b.queue = nil
	}
	b.older = slices.DeleteFunc(b.older, func(old *backlogFile) bool {
		if slices.ContainsFunc(b.queue, func(q queued) bool { return q.file == old }) {
			return false
		}
		retire(old)
		return true
	})
}

// retire removes a wholly folded file, and only then lets go of its lock.
func retire(file *backlogFile) {
	os.Remove(file.path)
	file.release()
}

// close stops appending. Files wholly folded are removed; the others stay for the next
// Store to fold.
func (b *backlog) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	files := b.older
	if b.current != nil {
		files = append(files, b.current)
	}
	for _, file := range files {
		if len(b.queue) == 0 {
			retire(file)
		} else {
			file.release()
		}
	}
	b.current, b.older = nil, nil
}

// foldQueued records batch in order: each run of answered requests as foldAnswered
// does, and each cell's start and end as foldCell does.
func (tx *Tx) foldQueued(batch []queued) error {
	for len(batch) > 0 {
		n := slices.IndexFunc(batch, func(q queued) bool { return q.start != nil || q.finish != nil })
		switch n {
		case 0:
			var err error
			if n, err = tx.foldCell(batch); err != nil {
				return err
			}
		case -1:
			n = len(batch)
			fallthrough
		default:
			if err := tx.foldAnswered(batch[:n]); err != nil {
				return err
			}
		}
		batch = batch[n:]
	}
	return nil
}

// foldAnswered records answered requests as insertAnswered does; should the database
// refuse one (a session that does not exist), each is tried alone and a refused one is
// logged and left out, so that it does not hold up every write after it.
func (tx *Tx) foldAnswered(batch []queued) error {
	err := tx.insertAnsweredWhole(batch)
	if !refused(err) {
		return err
	}
	for _, a := range batch {
		if err := tx.insertAnsweredWhole([]queued{a}); refused(err) {
			tx.s.log.Error("an answered request the database refuses is left out of the record",
				"session", a.req.SessionID, "execution", a.req.ExecutionID, "request", a.req.RequestID,
				"method", a.req.Method, "err", err)
		} else if err != nil {
			return err
		}
	}
	return nil
}

// foldCell records the cell's start or end that batch begins with, and returns how many
// of batch's records it took: a start and the end that follows it in the batch, or the
// end that the transaction records, make one row, not a row and its change.
func (tx *Tx) foldCell(batch []queued) (int, error) {
	e := batch[0].start
	if e == nil {
		return 1, tx.foldEnd(batch[0].finish)
	}
	same := func(x *ending) bool {
		return x != nil && x.cell.SessionID == e.SessionID && x.cell.CellID == e.CellID && x.cell.Generation == e.Generation
	}
	if len(batch) > 1 && same(batch[1].finish) {
		x := batch[1].finish
		if err := tx.foldStart(e, x); err != nil {
			return 0, err
		}
		return 2, tx.foldEnd(x)
	}
	var x *ending
	if same(tx.ending) {
		x = tx.ending
	}
	return 1, tx.foldStart(e, x)
}

// foldStart records a cell's start as StartExecution would have, superseding no wait
// (its host knew none was open), and, x set, ended as x says, setting x.id. A start
// whose cell is recorded already (folded before, its file's offset not noted) changes
// nothing. Should the database refuse it (a session that does not exist), it is logged
// and left out, as a refused request is.
func (tx *Tx) foldStart(e *Execution, x *ending) error {
	end := ExecutionEnd{Status: StatusRunning}
	if x != nil {
		end = x.end
	}
	// One statement may be refused, and SQLite then undoes that statement alone.
	inserted, err := tx.insertExecutionEnded(e, end, true)
	if refused(err) {
		tx.s.log.Error("a cell's start the database refuses is left out of the record",
			"session", e.SessionID, "execution", e.CellID, "err", err)
		return nil
	}
	if err != nil {
		return err
	}
	if !inserted {
		return tx.sameStart(e)
	}
	if x != nil {
		x.id = e.ID
	}
	if n, ok := cellNumber(e.CellID); ok {
		if _, err := tx.exec(`UPDATE sessions SET cells = $1 WHERE id = $2 AND cells < $1`, n, e.SessionID); err != nil {
			return fmt.Errorf("store: start execution: %w", err)
		}
	}
	return tx.journal(e.SessionID, KindExecution, e.ID)
}

// foldEnd records the end of x's cell, as EndExecution would have: its row, unless the
// fold of its start wrote it ended, and its journal entry. An end whose cell is not
// running (folded before, or ended by a host that took the session over) changes
// nothing.
func (tx *Tx) foldEnd(x *ending) error {
	if x.id == 0 {
		ended, err := tx.endRow(x)
		if err != nil || !ended {
			return err
		}
	}
	return tx.journal(x.cell.SessionID, KindExecutionEnd, x.id)
}

// sameStart checks that the cell already recorded under e's id is e, folded before: a
// different one is a clash the record cannot hold both sides of, and is logged as such.
func (tx *Tx) sameStart(e *Execution) error {
	var sum string
	var started int64
	err := tx.queryRow(`SELECT code_sha256, started_at_ms FROM executions WHERE session_id = $1 AND cell_id = $2`,
		e.SessionID, e.CellID).Scan(&sum, &started)
	if err != nil {
		return fmt.Errorf("store: start execution: %w", err)
	}
	if sum != e.CodeSHA256 || started != ms(e.StartedAt) {
		tx.s.log.Error("a cell's start clashes with another cell of the same id in the record, and is left out",
			"session", e.SessionID, "execution", e.CellID, "started_at_ms", ms(e.StartedAt))
	}
	return nil
}

// insertAnsweredWhole is insertAnswered under a savepoint: it records the whole batch or,
// failing, nothing.
func (tx *Tx) insertAnsweredWhole(batch []queued) error {
	if _, err := tx.exec(`SAVEPOINT fold`); err != nil {
		return err
	}
	entries := len(tx.entries)
	if err := tx.insertAnswered(batch); err != nil {
		tx.entries = tx.entries[:entries]
		if _, rerr := tx.exec(`ROLLBACK TO fold`); rerr != nil {
			return errors.Join(err, rerr)
		}
		tx.exec(`RELEASE fold`)
		return err
	}
	_, err := tx.exec(`RELEASE fold`)
	return err
}

// refused reports whether err is the database refusing a row: a constraint it breaks.
func refused(err error) bool {
	var e *sqlite.Error
	return errors.As(err, &e) && e.Code()&0xff == sqlite3.SQLITE_CONSTRAINT
}

// foldShapes are the numbers of rows one insert of many takes: a batch is cut greedily
// into them, so that a few prepared statements serve every batch.
var foldShapes = [...]int{64, 16, 4, 1}

// foldShape is the rows of the next insert of a batch of n > 0 rows.
func foldShape(n int) int {
	for _, shape := range foldShapes {
		if shape <= n {
			return shape
		}
	}
	return 1
}

// insertRows is an INSERT of rows rows of columns (a list of width names) into table,
// with a placeholder for each value.
func insertRows(table, columns string, width, rows int) string {
	var b strings.Builder
	b.WriteString("INSERT INTO " + table + " (" + columns + ") VALUES ")
	for r := range rows {
		if r > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('(')
		for c := range width {
			if c > 0 {
				b.WriteString(", ")
			}
			b.WriteString("$" + strconv.Itoa(r*width+c+1))
		}
		b.WriteByte(')')
	}
	return b.String()
}

// insertAnswered records answered requests and their replies, in order, several rows
// per statement: a row's own statement would cost several times its insertion. The
// requests' ids follow the largest recorded, which the transaction holds still.
func (tx *Tx) insertAnswered(batch []queued) error {
	var last int64
	if err := tx.queryRow(`SELECT coalesce(max(id), 0) FROM host_requests`).Scan(&last); err != nil {
		return fmt.Errorf("store: record requests: %w", err)
	}
	for len(batch) > 0 {
		// A long fold lets other goroutines run between its statements: with a thread or
		// two for Go code, as a host of workers runs, a worker's reader would otherwise
		// wait for the whole of it.
		runtime.Gosched()
		size := foldShape(len(batch))
		chunk := batch[:size]
		batch = batch[size:]
		requests := make([]any, 0, 8*size)
		replies := make([]any, 0, 6*size)
		for _, a := range chunk {
			last++
			q, r := a.req, a.reply
			requests = append(requests, last, q.SessionID, q.Generation, q.ExecutionID, q.RequestID, q.Method,
				string(q.Body), ms(q.ReceivedAt))
			value, code, message := replyColumns(r)
			replies = append(replies, last, r.Kind, value, code, message, ms(r.RepliedAt))
			tx.entries = append(tx.entries, journalEntry{q.SessionID, KindRequest, last}, journalEntry{q.SessionID, KindReply, last})
			tx.touch(q.SessionID)
		}
		for _, insert := range []struct {
			table, columns string
			row            int // placeholders per row
			args           []any
		}{
			{"host_requests", "id, session_id, generation, execution_id, request_id, method, request, received_at_ms", 8, requests},
			{"host_replies", "request_id, kind, value, code, message, replied_at_ms", 6, replies},
		} {
			query := insertRows(insert.table, insert.columns, insert.row, len(insert.args)/insert.row)
			if _, err := tx.exec(query, insert.args...); err != nil {
				return fmt.Errorf("store: record answered requests: %s: %w", insert.table, err)
			}
		}
	}
	return nil
}

// noteFolded records that file is folded up to offset.
func (tx *Tx) noteFolded(file string, offset int64) error {
	_, err := tx.exec(`INSERT INTO backlog_folded (file, "offset") VALUES ($1, $2)
		ON CONFLICT (file) DO UPDATE SET "offset" = excluded."offset"`, file, offset)
	if err != nil {
		return fmt.Errorf("store: backlog %s: %w", file, err)
	}
	return nil
}

// recoverBacklogs folds the backlog files that no living Store holds, left by hosts that
// died, removes files left half made, and forgets the folded offsets of files that are
// gone.
func (s *Store) recoverBacklogs(ctx context.Context) error {
	entries, err := os.ReadDir(s.backlog.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("store: backlog directory: %w", err)
	}
	for _, e := range entries {
		switch filepath.Ext(e.Name()) {
		case backlogExt:
			if err := s.recoverBacklog(ctx, e.Name()); err != nil {
				return err
			}
		case backlogNewExt:
			// A living Store's may be between its making and its locking: only an old one
			// is surely half made.
			info, err := e.Info()
			if err != nil || time.Since(info.ModTime()) < halfMadeAge {
				continue
			}
			if f, ok := lockOrphan(filepath.Join(s.backlog.dir, e.Name())); ok {
				os.Remove(f.Name())
				f.Close()
			}
		}
	}
	return s.forgetGoneBacklogs(ctx)
}

// forgetGoneBacklogs forgets the folded offsets of backlog files that are gone. A row is
// forgotten only if its file is gone while the transaction holds the write lock, so a
// living Store's file, however new, keeps its row. Only when a read finds one gone is
// that transaction begun.
func (s *Store) forgetGoneBacklogs(ctx context.Context) error {
	rows, err := s.readRows(ctx, `SELECT file FROM backlog_folded`)
	if gone, err := s.goneBacklogs(rows, err); err != nil || len(gone) == 0 {
		return err
	}
	return s.Update(ctx, func(tx *Tx) error {
		gone, err := s.goneBacklogs(tx.query(`SELECT file FROM backlog_folded`))
		if err != nil {
			return err
		}
		for _, name := range gone {
			if _, err := tx.exec(`DELETE FROM backlog_folded WHERE file = $1`, name); err != nil {
				return err
			}
		}
		return nil
	})
}

// goneBacklogs are the files of rows, names of backlog files, that are not in the
// backlog directory; it closes rows.
func (s *Store) goneBacklogs(rows *sql.Rows, err error) ([]string, error) {
	names, err := scanStrings(rows, err)
	if err != nil {
		return nil, err
	}
	var gone []string
	for _, name := range names {
		if _, err := os.Stat(filepath.Join(s.backlog.dir, name)); errors.Is(err, os.ErrNotExist) {
			gone = append(gone, name)
		}
	}
	return gone, nil
}

// lockOrphan opens and locks the file at path if no living Store holds it and it is still
// the file of that name; ok is false otherwise.
func lockOrphan(path string) (f *os.File, ok bool) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false
	}
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		f.Close()
		return nil, false
	}
	// Locked: is it still the file of that name, and not one another Store recovered and
	// removed while this one opened it?
	held, err := f.Stat()
	named, nerr := os.Stat(path)
	if err != nil || nerr != nil || !os.SameFile(held, named) {
		f.Close()
		return nil, false
	}
	return f, true
}

// recoverBacklog folds one backlog file if its Store is gone, and removes it. A file
// holding what its writer cannot have written has what precedes that folded and is kept,
// renamed to end in .bad; the Store opens all the same. A file the database could not
// take (it is busy, the disk is full) stays as it is, and the error is returned.
func (s *Store) recoverBacklog(ctx context.Context, name string) error {
	path := filepath.Join(s.backlog.dir, name)
	var f *os.File
	var readErr error
	err := s.Update(ctx, func(tx *Tx) error {
		// Locked within the write transaction: another Store opening now waits for this
		// fold before it numbers its cells or closes abandoned ones, and finds the file
		// gone, or locked by this one until it is removed.
		var ok bool
		if f, ok = lockOrphan(path); !ok {
			return nil
		}
		var offset int64
		switch err := tx.queryRow(`SELECT "offset" FROM backlog_folded WHERE file = $1`, name).Scan(&offset); {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return err
		}
		records, end, err := readBacklog(f, offset)
		if err != nil && !errors.Is(err, errBacklogCorrupt) {
			return err
		}
		readErr = err
		batch := make([]queued, len(records))
		for i, r := range records {
			batch[i] = r.queued()
		}
		if err := tx.foldQueued(batch); err != nil {
			return err
		}
		if end > offset {
			return tx.noteFolded(name, end)
		}
		return nil
	})
	if f != nil {
		defer f.Close()
	}
	switch {
	case err != nil: // the file stays as it is, for the next Store to fold
		return fmt.Errorf("store: folding backlog %s: %w", name, err)
	case f == nil: // its Store lives, or another recovered it
		return nil
	case readErr != nil:
		bad := strings.TrimSuffix(path, backlogExt) + backlogBadExt
		s.log.Error("a backlog file holds what its writer cannot have written; what precedes it is folded, and the file kept",
			"file", bad, "err", readErr)
		if err := os.Rename(path, bad); err != nil {
			return fmt.Errorf("store: backlog %s: %w; and keeping it aside: %v", name, readErr, err)
		}
		return nil
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("store: backlog %s: %w", name, err)
	}
	return nil
}

// readBacklog reads the whole records of a backlog file from offset, as parseBacklog
// does.
func readBacklog(f *os.File, offset int64) ([]backlogRecord, int64, error) {
	data, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<62))
	if err != nil {
		return nil, offset, err
	}
	return parseBacklog(data, offset)
}

// parseBacklog reads the whole records in file, a backlog file's bytes, from offset, and
// returns them with the offset past the last; a zero header ends the records. What its
// writer cannot have written (no backlogMagic, a bad length or checksum, a record
// running past the end of the file, or a payload that is not a record) is
// errBacklogCorrupt, returned with the records before it.
func parseBacklog(file []byte, offset int64) ([]backlogRecord, int64, error) {
	if !bytes.HasPrefix(file, []byte(backlogMagic)) {
		return nil, offset, fmt.Errorf("%w: it does not begin with %s", errBacklogCorrupt, backlogMagic)
	}
	offset = max(offset, int64(len(backlogMagic)))
	if offset > int64(len(file)) {
		return nil, offset, fmt.Errorf("%w: folded to %d of %d bytes", errBacklogCorrupt, offset, len(file))
	}
	data := file[offset:]
	var records []backlogRecord
	for len(data) >= backlogHeaderSize {
		size := binary.BigEndian.Uint32(data)
		sum := binary.BigEndian.Uint32(data[4:])
		switch {
		case size == 0 && sum == 0:
			return records, offset, nil // the end of the records
		case size == 0 || size > maxBacklogRecord:
			return records, offset, fmt.Errorf("%w: a record of %d bytes at offset %d", errBacklogCorrupt, size, offset)
		case len(data)-backlogHeaderSize < int(size): // its writer made room for it before writing its header
			return records, offset, fmt.Errorf("%w: a record of %d bytes at offset %d runs past the end",
				errBacklogCorrupt, size, offset)
		}
		payload := data[backlogHeaderSize : backlogHeaderSize+int(size)]
		var r backlogRecord
		if crc32.Checksum(payload, castagnoli()) != sum {
			return records, offset, fmt.Errorf("%w: a bad checksum at offset %d", errBacklogCorrupt, offset)
		}
		if err := json.Unmarshal(bytes.Clone(payload), &r); err != nil {
			return records, offset, fmt.Errorf("%w: at offset %d: %v", errBacklogCorrupt, offset, err)
		}
		records = append(records, r)
		step := min(align8(backlogHeaderSize+int(size)), len(data))
		data = data[step:]
		offset += int64(step)
	}
	return records, offset, nil
}
