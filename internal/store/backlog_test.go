package store

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/poll"
)

// backlogChildEnv, when set to "DIR COUNT FOLDAFTER", makes TestBacklogChild a host that
// records COUNT answered requests in the record in DIR, folding after the first
// FOLDAFTER and then running cell c-1 and starting c-2, says "recorded N" after each,
// and waits to be killed.
const backlogChildEnv = "KILN_BACKLOG_CHILD"

func TestBacklogChild(t *testing.T) {
	spec := os.Getenv(backlogChildEnv)
	if spec == "" {
		t.Skip("run by the backlog tests")
	}
	var dir string
	var count, foldAfter int
	if _, err := fmt.Sscan(spec, &dir, &count, &foldAfter); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, err := OpenDir(ctx, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	sess, _, err := st.EnsureSession(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= count; i++ {
		if err := st.RecordAnswered(ctx, answeredRequest(sess.ID, i), okReply(i)); err != nil {
			t.Fatal(err)
		}
		if i == foldAfter {
			if err := st.settle(ctx); err != nil {
				t.Fatal(err)
			}
			runOneStartAnother(t, st, sess.ID, false)
		}
		fmt.Printf("recorded %d\n", i)
	}
	time.Sleep(time.Hour)
}

// runOneStartAnother runs the session's cell c-1 of g-1, code "1", its start a
// transaction and its end ok, and starts c-2, code "2", through the backlog; it returns
// c-2. With hold, st's writer lock is held from c-1's start on, for the caller to let
// go: no fold takes what the backlog has queued meanwhile.
func runOneStartAnother(t *testing.T, st *Store, session int64, hold bool) Execution {
	t.Helper()
	ctx := context.Background()
	first, err := st.StartExecution(ctx, session, "g-1", "1")
	if err != nil {
		t.Fatal(err)
	}
	if hold {
		st.writeMu.lock(context.Background())
	}
	if err := st.EndExecution(ctx, first, ExecutionEnd{Status: "ok"}); err != nil {
		t.Fatal(err)
	}
	second, err := st.StartNextExecution(ctx, first, "g-1", "2")
	if err != nil {
		t.Fatal(err)
	}
	return second
}

func answeredRequest(session int64, i int) Request {
	return Request{SessionID: session, Generation: "g-1", ExecutionID: "c-1", RequestID: "r-" + strconv.Itoa(i),
		Method: "runtime.inspect", Body: jsontext.Value(`{"method":"runtime.inspect"}`)}
}

func okReply(i int) Reply { return Reply{Kind: "ok", Value: jsontext.Value(strconv.Itoa(i))} }

// killedChild runs TestBacklogChild on dir until it has recorded count requests, and
// SIGKILLs it.
func killedChild(t *testing.T, dir string, count, foldAfter int) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^TestBacklogChild$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %d", backlogChildEnv, dir, count, foldAfter))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(out)
	for lines.Scan() && lines.Text() != fmt.Sprintf("recorded %d", count) {
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
}

// answeredIn returns the request ids of the session "s" recorded in dir, with their
// replies' values, in journal order, reading the database alone.
func answeredIn(t *testing.T, st *Store) []string {
	t.Helper()
	rows, err := sqliteOf(st).reads.Query(`SELECT q.request_id, r.value FROM journal j JOIN host_requests q ON q.id = j.ref_id
		JOIN host_replies r ON r.request_id = q.id WHERE j.kind = 'request' ORDER BY j.seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id, value string
		if err := rows.Scan(&id, &value); err != nil {
			t.Fatal(err)
		}
		out = append(out, id+"="+value)
	}
	return out
}

func wantAnswered(n int) string {
	var ids []string
	for i := 1; i <= n; i++ {
		ids = append(ids, fmt.Sprintf("r-%d=%d", i, i))
	}
	return strings.Join(ids, " ")
}

func backlogFiles(t *testing.T, dir string) []string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, backlogDirName, "*"+backlogExt))
	return files
}

// openSession opens the record in dir, closed when the test ends, with session "s".
func openSession(t *testing.T, dir string) (*Store, Session) {
	t.Helper()
	st, err := OpenDir(context.Background(), dir, Options{})
	return withSession(t, st, err)
}

// openEphemeral is openSession for a Store without files.
func openEphemeral(t *testing.T) (*Store, Session) {
	t.Helper()
	st, err := Open(context.Background(), "", Options{})
	return withSession(t, st, err)
}

// withSession makes session "s" in st, just opened, and closes st when t ends.
func withSession(t *testing.T, st *Store, err error) (*Store, Session) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	sess, _, err := st.EnsureSession(context.Background(), "s")
	if err != nil {
		t.Fatal(err)
	}
	return st, sess
}

func TestAnsweredRequestsFoldBeforeTheNextWrite(t *testing.T) {
	ctx := context.Background()
	st, sess := openSession(t, t.TempDir())
	for i := 1; i <= 3; i++ {
		if err := st.RecordAnswered(ctx, answeredRequest(sess.ID, i), okReply(i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.AppendEvent(ctx, sess.ID, SourceOperator, map[string]any{"text": "after"}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(answeredIn(t, st), " "); got != wantAnswered(3) {
		t.Errorf("recorded %q; want %q", got, wantAnswered(3))
	}
	if got := journalKinds(t, st, sess.ID); got != "session request reply request reply request reply event" {
		t.Errorf("the journal orders them %s", got)
	}
}

func TestAnsweredRequestsFoldOnTheirOwn(t *testing.T) {
	ctx := context.Background()
	st, sess := openSession(t, t.TempDir())
	if err := st.RecordAnswered(ctx, answeredRequest(sess.ID, 1), okReply(1)); err != nil {
		t.Fatal(err)
	}
	// No write follows: the fold comes after FoldDelay. The bound is generous; the point
	// is that it comes at all.
	poll.Wait(10*time.Second, func() bool { return len(answeredIn(t, st)) > 0 })
	if got := strings.Join(answeredIn(t, st), " "); got != wantAnswered(1) {
		t.Errorf("recorded %q; want %q", got, wantAnswered(1))
	}
}

func TestTheBacklogOfAKilledHostIsFoldedOnce(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	// The first five are folded by the child; the next four only reach its backlog.
	killedChild(t, dir, 9, 5)
	files := backlogFiles(t, dir)
	if len(files) != 1 {
		t.Fatalf("backlog files %v; want the child's one", files)
	}
	// A record whose writer was killed before its header: the payload is there, the
	// header zero. It ends the records.
	data, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	records, end, err := parseBacklog(data, 0)
	if err != nil || end == int64(len(data)) {
		t.Fatalf("the child's file: %v, records up to %d of %d bytes", err, end, len(data))
	}
	if !slices.ContainsFunc(records, func(r backlogRecord) bool { return r.Start != nil && r.ExecutionID == "c-2" }) {
		t.Errorf("the child's file holds no start of c-2: %+v", records)
	}
	f, err := os.OpenFile(files[0], os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte(`{"session_id":1,"generation":"g-1"`), end+backlogHeaderSize)
	f.Close()

	st, err := OpenDir(ctx, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if got := strings.Join(answeredIn(t, st), " "); got != wantAnswered(9) {
		t.Errorf("after recovery: %q; want %q", got, wantAnswered(9))
	}
	if files := backlogFiles(t, dir); len(files) != 0 {
		t.Errorf("backlog files left: %v", files)
	}
	if err := st.Check(ctx); err != nil {
		t.Error(err)
	}
	// The cell the child left running is there, once, and numbered: the next is c-3.
	sess, err := st.SessionByName(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if e, err := st.ExecutionByCell(ctx, sess.ID, "c-2"); err != nil || e.Status != StatusRunning || e.Code != "2" {
		t.Errorf("the child's running cell: %+v %v; want c-2 running", e, err)
	}
	if e, err := st.StartExecution(ctx, sess.ID, "g-2", "3"); err != nil || e.CellID != "c-3" {
		t.Errorf("the next cell: %+v %v; want c-3", e, err)
	}
}

func TestALivingStoresBacklogIsLeftAlone(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	first, err := OpenDir(ctx, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	sess, _, _ := first.EnsureSession(ctx, "s")
	// The first Store's own fold, due FoldDelay after the record, waits on its writer
	// lock while the second opens: what the second sees is then its own doing alone.
	first.writeMu.lock(context.Background())
	if err := first.RecordAnswered(ctx, answeredRequest(sess.ID, 1), okReply(1)); err != nil {
		first.writeMu.unlock()
		t.Fatal(err)
	}
	second, err := OpenDir(ctx, dir, Options{})
	if err != nil {
		first.writeMu.unlock()
		t.Fatal(err)
	}
	defer second.Close()
	got := answeredIn(t, second)
	first.writeMu.unlock()
	if len(got) != 0 {
		t.Errorf("another Store folded a living one's backlog: %v", got)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(answeredIn(t, second), " "); got != wantAnswered(1) {
		t.Errorf("after the first Store closed: %q; want %q", got, wantAnswered(1))
	}
	if files := backlogFiles(t, dir); len(files) != 0 {
		t.Errorf("backlog files left: %v", files)
	}
}

func TestAnEphemeralStoreRecordsAnsweredRequestsAtOnce(t *testing.T) {
	ctx := context.Background()
	st, sess := openEphemeral(t)
	if err := st.RecordAnswered(ctx, answeredRequest(sess.ID, 1), okReply(1)); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(answeredIn(t, st), " "); got != wantAnswered(1) {
		t.Errorf("recorded %q; want %q", got, wantAnswered(1))
	}
}

// abandon lets st go as a SIGKILL would: its backlog files stay, unfolded, their locks
// released. A fold under way (a FoldDelay timer's) ends first, as one would or would
// not have committed.
func abandon(st *Store) {
	st.writeMu.lock(context.Background())
	defer st.writeMu.unlock()
	abandonHeld(st)
}

// abandonHeld is abandon for a caller that holds st's writer lock.
func abandonHeld(st *Store) {
	b := st.backlog
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, file := range append(b.older, b.current) {
		if file != nil {
			file.release()
		}
	}
	b.closed, b.queue, b.current, b.older = true, nil, nil, nil
}

func TestACorruptBacklogIsKeptAsideWithWhatCouldBeFolded(t *testing.T) {
	for _, damage := range []struct {
		name string
		do   func(data []byte, second int64)
	}{
		{"a bad checksum", func(data []byte, second int64) { data[second+backlogHeaderSize+3] ^= 1 }},
		{"a length past the end", func(data []byte, second int64) {
			binary.BigEndian.PutUint32(data[second:], uint32(len(data)))
		}},
	} {
		t.Run(damage.name, func(t *testing.T) {
			dir := t.TempDir()
			st, sess := openSession(t, dir)
			for i := 1; i <= 3; i++ {
				if err := st.RecordAnswered(context.Background(), answeredRequest(sess.ID, i), okReply(i)); err != nil {
					t.Fatal(err)
				}
			}
			second := st.backlog.queue[0].end
			path := st.backlog.current.path
			abandon(st)
			data, _ := os.ReadFile(path)
			damage.do(data, second) // in the second record
			os.WriteFile(path, data, 0o600)

			again, _ := openSession(t, dir)
			if got := strings.Join(answeredIn(t, again), " "); got != wantAnswered(1) {
				t.Errorf("folded %q; want %q", got, wantAnswered(1))
			}
			if bad, _ := filepath.Glob(filepath.Join(dir, backlogDirName, "*"+backlogBadExt)); len(bad) != 1 || len(backlogFiles(t, dir)) != 0 {
				t.Errorf("kept aside %v, left %v; want the file kept aside", bad, backlogFiles(t, dir))
			}
		})
	}
}

func TestRecoveredRepliesKeepTheirValues(t *testing.T) {
	dir := t.TempDir()
	st, sess := openSession(t, dir)
	values := []string{`{}`, `[]`, `""`, `null`, `0`, `{"a":[1,"é"]}`}
	for i, v := range values {
		if err := st.RecordAnswered(context.Background(), answeredRequest(sess.ID, i+1),
			Reply{Kind: "ok", Value: jsontext.Value(v)}); err != nil {
			t.Fatal(err)
		}
	}
	refusal := Reply{Kind: "error", Code: "unknown_method", Message: "the host has no method \"x\""}
	if err := st.RecordAnswered(context.Background(), answeredRequest(sess.ID, 7), refusal); err != nil {
		t.Fatal(err)
	}
	abandon(st)
	again, _ := openSession(t, dir)
	for i, v := range values {
		_, reply, err := again.RequestByID(context.Background(), sess.ID, int64(i+1))
		if err != nil || reply == nil || string(reply.Value) != v {
			t.Errorf("request %d: recovered %+v (%v); replied %s", i+1, reply, err, v)
		}
	}
	_, reply, err := again.RequestByID(context.Background(), sess.ID, 7)
	if err != nil || reply == nil || reply.Kind != "error" || reply.Code != refusal.Code || reply.Message != refusal.Message {
		t.Errorf("the refusal recovered as %+v (%v)", reply, err)
	}
}

func TestAFileIsLockedBeforeItIsNamedAndAHalfMadeOneIsRemoved(t *testing.T) {
	dir := t.TempDir()
	b := &backlog{dir: filepath.Join(dir, backlogDirName)}
	b.mu.Lock()
	file, err := b.create(backlogFileSize)
	b.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	defer file.release()
	if _, ok := lockOrphan(filepath.Join(b.dir, file.name)); ok {
		t.Error("another Store could lock a living Store's file")
	}
	if made, _ := filepath.Glob(filepath.Join(b.dir, "*"+backlogNewExt)); len(made) != 0 {
		t.Errorf("left half made: %v", made)
	}
	// One whose maker died before naming it is removed by the next Store.
	halfMade := filepath.Join(b.dir, "1-1-0"+backlogNewExt)
	os.WriteFile(halfMade, nil, 0o600)
	young := filepath.Join(b.dir, "2-2-0"+backlogNewExt) // perhaps a living Store's, about to be locked
	os.WriteFile(young, nil, 0o600)
	old := time.Now().Add(-2 * halfMadeAge)
	os.Chtimes(halfMade, old, old)
	openSession(t, dir)
	if _, err := os.Stat(halfMade); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a half-made file stays: %v", err)
	}
	if _, err := os.Stat(young); err != nil {
		t.Errorf("a file just made is removed: %v", err)
	}
}

func TestForgettingKeepsTheRowsOfFilesThatExist(t *testing.T) {
	dir := t.TempDir()
	other, _ := openSession(t, dir)
	living, sess := openSession(t, dir)
	if err := living.RecordAnswered(context.Background(), answeredRequest(sess.ID, 1), okReply(1)); err != nil {
		t.Fatal(err)
	}
	if err := living.settle(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Another Store, opened before that file was made, forgets what is gone: the living
	// file keeps its row, so that were its host to die now, it is not folded again from
	// its start.
	if err := other.forgetGoneBacklogs(context.Background()); err != nil {
		t.Fatal(err)
	}
	abandon(living)
	third, _ := openSession(t, dir)
	if n := len(answeredIn(t, third)); n != 1 {
		t.Errorf("%d requests recorded; 1 answered", n)
	}
}

func TestNothingIsFoldedAfterClose(t *testing.T) {
	dir := t.TempDir()
	st, sess := openSession(t, dir)
	if err := st.RecordAnswered(context.Background(), answeredRequest(sess.ID, 1), okReply(1)); err != nil {
		t.Fatal(err)
	}
	st.backlog.close() // as Close does, with a record it could not fold
	other, _ := openSession(t, dir)
	// A write of the first Store still under way must not fold the record again.
	if err := st.Update(context.Background(), func(*Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if n := len(answeredIn(t, other)); n != 1 {
		t.Errorf("%d requests recorded; 1 answered", n)
	}
}

func TestABacklogFileIsReplacedOnceLarge(t *testing.T) {
	dir := t.TempDir()
	st, sess := openSession(t, dir)
	big := Request{SessionID: sess.ID, Generation: "g-1", ExecutionID: "c-1", Method: "x",
		Body: jsontext.Value(`{"method":"x","pad":"` + strings.Repeat("x", 1<<20) + `"}`)}
	var first string
	for i := 1; i <= 6; i++ { // more than a file holds: a second file
		big.RequestID = "r-" + strconv.Itoa(i)
		if err := st.RecordAnswered(context.Background(), big, okReply(i)); err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			first = st.backlog.current.name
		}
	}
	if err := st.settle(context.Background()); err != nil {
		t.Fatal(err)
	}
	files := backlogFiles(t, dir)
	if current := st.backlog.current.name; current == first || len(files) != 1 || filepath.Base(files[0]) != current {
		t.Errorf("files %v once folded, appending to %s, first %s; want only the one appended to, a new one", files, current, first)
	}
	if n := len(answeredIn(t, st)); n != 6 {
		t.Errorf("%d requests recorded; 6 answered", n)
	}
}

func TestAReplyOfNoKindIsRefusedBeforeTheBacklog(t *testing.T) {
	st, sess := openSession(t, t.TempDir())
	err := st.RecordAnswered(context.Background(), answeredRequest(sess.ID, 1), Reply{Kind: "maybe"})
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("got %v; want ErrInvalid", err)
	}
	if _, err := st.AppendEvent(context.Background(), sess.ID, SourceOperator, "after"); err != nil {
		t.Errorf("a write after it: %v", err)
	}
}

// An ephemeral store's reads and writes share one connection: a read preparing its
// statement while a write holds the connection waits for it, and nothing more.
func TestAnEphemeralStoreReadsWhileItWrites(t *testing.T) {
	ctx := context.Background()
	st, _ := openEphemeral(t)
	inTx, reading := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- st.Update(ctx, func(tx *Tx) error {
			waits := sqliteOf(st).reads.Stats().WaitCount
			close(inTx)
			<-reading
			// Until the read waits for the connection; past the bound, the test goes on.
			poll.Wait(10*time.Second, func() bool { return sqliteOf(st).reads.Stats().WaitCount != waits })
			_, err := tx.exec(`INSERT INTO sessions (name, created_at_ms) VALUES ('x', 0)`)
			return err
		})
	}()
	<-inTx
	read := make(chan error, 1)
	go func() {
		close(reading)
		_, err := st.Sessions(ctx)
		read <- err
	}()
	for _, ch := range []chan error{done, read} {
		select {
		case err := <-ch:
			if err != nil {
				t.Error(err)
			}
		case <-time.After(10 * time.Second): // a deadlock; the bound is not a timing claim
			t.Fatal("the read and the write wait for each other")
		}
	}
}

func TestConcurrentWritesFoldEachRecordOnce(t *testing.T) {
	ctx := context.Background()
	st, sess := openSession(t, t.TempDir())
	const writers, each = 8, 200
	done := make(chan struct{}, writers*each+writers)
	for w := range writers {
		go func() {
			for i := range each {
				n := w*each + i + 1
				if err := st.RecordAnswered(ctx, answeredRequest(sess.ID, n), okReply(n)); err != nil {
					t.Error(err)
				}
				done <- struct{}{}
			}
		}()
		go func() {
			for range each {
				if _, err := st.AppendEvent(ctx, sess.ID, SourceOperator, map[string]any{"text": "x"}); err != nil {
					t.Error(err)
				}
			}
			done <- struct{}{}
		}()
	}
	for range writers*each + writers {
		<-done
	}
	if err := st.settle(ctx); err != nil {
		t.Fatal(err)
	}
	got := answeredIn(t, st)
	seen := map[string]bool{}
	for _, id := range got {
		if seen[id] {
			t.Errorf("%s recorded twice", id)
		}
		seen[id] = true
	}
	if len(seen) != writers*each {
		t.Errorf("%d answered requests recorded; want %d", len(seen), writers*each)
	}
}

// BenchmarkRecordAndFold is one answered request recorded through the backlog and folded
// into the database, a hundred at a time as a cell of a hundred requests would.
func BenchmarkRecordAndFold(b *testing.B) {
	ctx := context.Background()
	st, err := OpenDir(ctx, b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	sess, _, _ := st.EnsureSession(ctx, "s")
	i := 0
	for b.Loop() {
		i++
		if err := st.RecordAnswered(ctx, answeredRequest(sess.ID, i), okReply(i)); err != nil {
			b.Fatal(err)
		}
		if i%100 == 0 {
			if err := st.settle(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// FuzzParseBacklog feeds arbitrary files to the backlog reader: it never panics, reads no
// further than the file, and a file it reads without error ends at a zero header.
func FuzzParseBacklog(f *testing.F) {
	b := &backlog{dir: f.TempDir()}
	for i := 1; i <= 2; i++ {
		if _, err := b.append(queued{req: answeredRequest(1, i), reply: okReply(i)}); err != nil {
			f.Fatal(err)
		}
	}
	used := b.current.size
	whole, err := os.ReadFile(b.current.path)
	if err != nil {
		f.Fatal(err)
	}
	b.close()
	whole = whole[:used+16] // the records, and zeros after them
	f.Add(whole)
	f.Add(whole[:len(whole)-20])
	f.Add(whole[:13])
	f.Add(whole[len(backlogMagic):used]) // records without the magic
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		records, end, err := parseBacklog(data, 0)
		if end < 0 || end > int64(len(data)) {
			t.Fatalf("read to %d of %d bytes", end, len(data))
		}
		if err != nil {
			if !errors.Is(err, errBacklogCorrupt) {
				t.Fatalf("error %v", err)
			}
			return
		}
		rest := data[end:]
		if len(rest) < backlogHeaderSize {
			return
		}
		// Only a zero header ends them.
		if binary.BigEndian.Uint64(rest) != 0 {
			t.Fatalf("stopped at %d, at no zero header (%d records read)", end, len(records))
		}
	})
}

func TestARecordOverTheLimitIsRefusedAndNothingAppended(t *testing.T) {
	st, sess := openSession(t, t.TempDir())
	// The record's other members take about 200 bytes: with them, the first value is just
	// within the limit, the second just past it.
	atLimit := jsontext.Value(`"` + strings.Repeat("x", maxBacklogRecord-300) + `"`)
	if err := st.RecordAnswered(context.Background(), answeredRequest(sess.ID, 1), Reply{Kind: "ok", Value: atLimit}); err != nil {
		t.Fatalf("a record within the limit: %v", err)
	}
	over := jsontext.Value(`"` + strings.Repeat("x", maxBacklogRecord) + `"`)
	if err := st.RecordAnswered(context.Background(), answeredRequest(sess.ID, 2), Reply{Kind: "ok", Value: over}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a record over the limit: %v; want ErrInvalid", err)
	}
	if err := st.settle(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(answeredIn(t, st)); n != 1 {
		t.Errorf("%d requests recorded; want the one within the limit", n)
	}
}

func TestPendingInputsOfThisStoreShowAtOnceAndOthersWithinTheStaleness(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, sess := openSession(t, dir)
	other, _ := openSession(t, dir)
	count := func() int {
		events, _, err := st.PendingEventsAsOf(ctx, sess.ID, 64)
		if err != nil {
			t.Fatal(err)
		}
		return len(events)
	}
	if n := count(); n != 0 {
		t.Fatalf("%d pending at first", n)
	}
	if _, err := st.AppendEvent(ctx, sess.ID, SourceOperator, "own"); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 1 {
		t.Errorf("%d pending after this Store's input; want 1 at once", n)
	}
	if _, err := other.AppendEvent(ctx, sess.ID, SourceOperator, "another's"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(PendingStaleness) // the staleness under test: a lower bound only
	if n := count(); n != 2 {
		t.Errorf("%d pending once the staleness has passed after another Store's input; want 2", n)
	}
}

func TestARequestTheDatabaseRefusesIsLeftOutAndHoldsUpNothing(t *testing.T) {
	dir := t.TempDir()
	st, sess := openSession(t, dir)
	ctx := context.Background()
	for i, session := range []int64{sess.ID, 9999, sess.ID} { // 9999: no such session
		if err := st.RecordAnswered(ctx, answeredRequest(session, i+1), okReply(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.AppendEvent(ctx, sess.ID, SourceOperator, "after"); err != nil {
		t.Fatalf("a write after the refused request: %v", err)
	}
	if got := strings.Join(answeredIn(t, st), " "); got != "r-1=1 r-3=3" {
		t.Errorf("recorded %q; want the two the database takes", got)
	}
	// The same, from a dead host's backlog.
	if err := st.RecordAnswered(ctx, answeredRequest(9999, 4), okReply(4)); err != nil {
		t.Fatal(err)
	}
	if err := st.RecordAnswered(ctx, answeredRequest(sess.ID, 5), okReply(5)); err != nil {
		t.Fatal(err)
	}
	abandon(st)
	again, _ := openSession(t, dir)
	if got := strings.Join(answeredIn(t, again), " "); got != "r-1=1 r-3=3 r-5=5" {
		t.Errorf("recovered %q", got)
	}
}

func TestABacklogTheDatabaseCannotTakeNowStaysForTheNextStore(t *testing.T) {
	dir := t.TempDir()
	st, sess := openSession(t, dir)
	for i := 1; i <= 3; i++ {
		if err := st.RecordAnswered(context.Background(), answeredRequest(sess.ID, i), okReply(i)); err != nil {
			t.Fatal(err)
		}
	}
	abandon(st)
	// An Open whose context ends as it folds: it fails, and the file stays as it was.
	ctx, cancel := context.WithCancel(context.Background())
	var once sync.Once
	if failed, err := OpenDir(ctx, dir, Options{Now: func() time.Time { once.Do(cancel); return time.Now() }}); err == nil {
		failed.Close()
	}
	if bad, _ := filepath.Glob(filepath.Join(dir, backlogDirName, "*"+backlogBadExt)); len(bad) != 0 {
		t.Errorf("a sound file was set aside: %v", bad)
	}
	again, _ := openSession(t, dir)
	if n := len(answeredIn(t, again)); n != 3 {
		t.Errorf("%d requests recorded; 3 answered", n)
	}
}

func TestAnEmptyValueIsNull(t *testing.T) {
	dir := t.TempDir()
	st, sess := openSession(t, dir)
	if err := st.RecordAnswered(context.Background(), answeredRequest(sess.ID, 1), Reply{Kind: "ok", Value: jsontext.Value{}}); err != nil {
		t.Fatal(err)
	}
	abandon(st)
	again, _ := openSession(t, dir)
	if _, reply, err := again.RequestByID(context.Background(), sess.ID, 1); err != nil || reply == nil || string(reply.Value) != "null" {
		t.Errorf("recovered %+v (%v); want null", reply, err)
	}
}

// FuzzBacklogRecordJSON checks the hand-made encoding of a backlog record against
// json.Marshal: the same text, or an error from both.
func FuzzBacklogRecordJSON(f *testing.F) {
	f.Add(int64(1), "g-1", "c-1", "r-1", "runtime.inspect", `{"method":"runtime.inspect"}`, "ok", `{"a":[1,2]}`, "", "")
	f.Add(int64(-7), "g\"1", "c\u00e9", "r<&>", "m\x00", "{ \"x\" : 1 }", "error", "", "request_limit", "at most \xff 128")
	f.Add(int64(1<<62), "", "", "", "", "", "", "nul", "", "\u2028")
	f.Fuzz(func(t *testing.T, session int64, gen, exec, reqID, method, request, kind, value, code, message string) {
		r := backlogRecord{SessionID: session, Generation: gen, ExecutionID: exec, RequestID: reqID, Method: method,
			Request: jsontext.Value(request), ReceivedAtMS: session / 3, Kind: kind, Value: jsontext.Value(value),
			Code: code, Message: message, RepliedAtMS: -session}
		if value == "" {
			r.Value = nil // as RecordAnswered makes it
		}
		want, wantErr := json.Marshal(r)
		got, err := r.appendJSON(nil)
		if (err != nil) != (wantErr != nil) || err == nil && string(got) != string(want) {
			t.Fatalf("appendJSON: %s, %v\njson.Marshal: %s, %v", got, err, want, wantErr)
		}
		// A cell's start: its names and its start member alone.
		start := backlogRecord{SessionID: session, Generation: gen, ExecutionID: exec,
			Start: &backlogStart{Code: request, StartedAtMS: -session}}
		want, wantErr = json.Marshal(struct {
			SessionID   int64         `json:"session_id"`
			Generation  string        `json:"generation"`
			ExecutionID string        `json:"execution_id"`
			Start       *backlogStart `json:"start"`
		}{start.SessionID, start.Generation, start.ExecutionID, start.Start})
		got, err = start.appendJSON(nil)
		if (err != nil) != (wantErr != nil) || err == nil && string(got) != string(want) {
			t.Fatalf("appendJSON of a start: %s, %v\njson.Marshal: %s, %v", got, err, want, wantErr)
		}
		// A cell's end reads back as it was written.
		end := backlogRecord{SessionID: session, Generation: gen, ExecutionID: exec, End: &backlogEnd{
			Status: kind, ReportedStatus: code, EndedAtMS: -session, Output: jsontext.Value(value),
			TruncatedBytes: session / 5, Error: &message, Exception: jsontext.Value(request), Limit: method,
			NamespaceLost: session%2 == 0, NotRun: session%3 == 0}}
		if value == "" {
			end.End.Output = nil
		}
		got, err = end.appendJSON(nil)
		if err != nil {
			return // text that is not JSON, or not UTF-8
		}
		var back backlogRecord
		if err := json.Unmarshal(got, &back); err != nil || back.End == nil {
			t.Fatalf("an end's record %s reads back as %+v, %v", got, back, err)
		}
		again, err := newBacklogRecord(back.queued()).appendJSON(nil)
		if err != nil || string(again) != string(got) {
			t.Fatalf("an end's record %s, read back and written again: %s, %v", got, again, err)
		}
	})
}

// A backlog file without the magic, records one after another, is none that a Store
// writes: nothing of it is folded, and it is kept aside.
func TestABacklogFileWithoutTheMagicIsKeptAside(t *testing.T) {
	dir := t.TempDir()
	st, sess := openSession(t, dir)
	st.Close()
	var file []byte
	for i := 1; i <= 3; i++ {
		payload, err := newBacklogRecord(queued{req: answeredRequest(sess.ID, i), reply: okReply(i)}).appendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		file = binary.BigEndian.AppendUint32(file, uint32(len(payload)))
		file = binary.BigEndian.AppendUint32(file, crc32.Checksum(payload, castagnoli()))
		file = append(file, payload...)
	}
	os.MkdirAll(filepath.Join(dir, backlogDirName), 0o700)
	if err := os.WriteFile(filepath.Join(dir, backlogDirName, "1-1-0"+backlogExt), file, 0o600); err != nil {
		t.Fatal(err)
	}
	again, _ := openSession(t, dir)
	if got := answeredIn(t, again); len(got) != 0 {
		t.Errorf("folded %q; want nothing", got)
	}
	if files := backlogFiles(t, dir); len(files) != 0 {
		t.Errorf("backlog files left: %v", files)
	}
	if _, err := os.Stat(filepath.Join(dir, backlogDirName, "1-1-0"+backlogBadExt)); err != nil {
		t.Errorf("the file is not kept aside: %v", err)
	}
}

// A record that just fills what is left of a file goes in it; one a byte larger goes to
// a new file.
func TestARecordThatJustFitsStaysInItsFile(t *testing.T) {
	for _, extra := range []int{0, 1} {
		b := &backlog{dir: t.TempDir()}
		if _, err := b.append(queued{req: answeredRequest(1, 1), reply: okReply(1)}); err != nil {
			t.Fatal(err)
		}
		first := b.current
		// A payload of exactly the room left in the file, plus extra bytes.
		q := answeredRequest(1, 2)
		room := len(first.mem) - int(first.size) - backlogHeaderSize
		bare, _ := newBacklogRecord(queued{req: q, reply: okReply(2)}).appendJSON(nil)
		pad := room - len(bare) - len(`,"pad":""`) + extra
		q.Body = jsontext.Value(`{"method":"runtime.inspect","pad":"` + strings.Repeat("x", pad) + `"}`)
		if _, err := b.append(queued{req: q, reply: okReply(2)}); err != nil {
			t.Fatal(err)
		}
		fits := b.current == first && first.size == int64(len(first.mem))
		if fits != (extra == 0) {
			t.Errorf("a record of the room left plus %d bytes: in the first file %v (%d of %d bytes used)",
				extra, b.current == first, first.size, len(first.mem))
		}
		if records, end, err := parseBacklog(first.mem, 0); fits && (err != nil || len(records) != 2 || end != first.size) {
			t.Errorf("the full file reads back as %d records to %d, %v; want 2 to %d", len(records), end, err, first.size)
		}
		b.close()
	}
}

// A fold of cells' starts alone notes no offset: a Store recovering the file folds them
// again, which changes nothing.
func TestAStartFoldedAgainIsRecordedOnce(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, sess := openSession(t, dir)
	runOneStartAnother(t, st, sess.ID, false)
	if err := st.settle(ctx); err != nil {
		t.Fatal(err)
	}
	abandon(st)
	var logged strings.Builder
	again, err := OpenDir(ctx, dir, Options{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if logged.Len() != 0 {
		t.Errorf("recovery logged %q; want nothing", logged.String())
	}
	if e, err := again.ExecutionByCell(ctx, sess.ID, "c-2"); err != nil || e.Status != StatusRunning {
		t.Errorf("c-2: %+v %v; want running", e, err)
	}
	entries, err := again.Log(ctx, LogFilter{Session: sess.ID})
	if err != nil {
		t.Fatal(err)
	}
	starts := 0
	for _, e := range entries {
		if e.Kind == KindExecution {
			starts++
		}
	}
	if starts != 2 || len(backlogFiles(t, dir)) != 0 {
		t.Errorf("%d starts journaled, files %v; want 2, none", starts, backlogFiles(t, dir))
	}
}

// A cell's end in the backlog of a host that died before its fold reaches the database
// with the next Store: the start and the end queued with it as one row, ended as the end
// says, each journaled once.
func TestACellsEndLeftInTheBacklogIsFolded(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, sess := openSession(t, dir)
	second := runOneStartAnother(t, st, sess.ID, true) // the host dies before any fold
	msg := "boom"
	end := ExecutionEnd{Status: "error", ReportedStatus: "ok", Output: jsontext.Value(`[{"stream":"stdout","text":"2"}]`),
		TruncatedBytes: 3, Error: &msg, Exception: jsontext.Value(`{"type":"ValueError"}`),
		Raw: jsontext.Value(`{"stdout":{"text":"x"}}`), NamespaceLost: true, Limit: "timeout",
		EndedAt: second.StartedAt.Add(time.Second)}
	if err := st.EndExecution(ctx, second, end); err != nil {
		st.writeMu.unlock()
		t.Fatal(err)
	}
	st.backlog.mu.Lock()
	queued := len(st.backlog.queue)
	st.backlog.mu.Unlock()
	abandonHeld(st)
	st.writeMu.unlock()
	if queued != 3 {
		t.Fatalf("%d records queued; want c-1's end, c-2's start and end", queued)
	}

	again, _ := openSession(t, dir)
	if files := backlogFiles(t, dir); len(files) != 0 {
		t.Errorf("backlog files left: %v", files)
	}
	if e, err := again.ExecutionByCell(ctx, sess.ID, "c-1"); err != nil || e.Status != "ok" || e.EndedAt == nil {
		t.Errorf("c-1: %+v %v; want ok", e, err)
	}
	got, err := again.ExecutionByCell(ctx, sess.ID, "c-2")
	if err != nil || got.Status != "error" || got.ReportedStatus == nil || *got.ReportedStatus != "ok" ||
		string(got.Output) != string(end.Output) || got.TruncatedBytes != 3 || got.Error == nil || *got.Error != msg ||
		string(got.Exception) != string(end.Exception) || string(got.Raw) != string(end.Raw) || !got.NamespaceLost ||
		got.NotRun || got.Limit != "timeout" || got.EndedAt == nil || !got.EndedAt.Equal(end.EndedAt) ||
		!got.StartedAt.Equal(second.StartedAt) || got.CodeSHA256 != second.CodeSHA256 {
		t.Errorf("c-2: %+v %v; want it as it ended", got, err)
	}
	if got, want := journalKinds(t, again, sess.ID), "session execution execution.end execution execution.end"; got != want {
		t.Errorf("the journal: %s; want %s", got, want)
	}
	if err := again.Check(ctx); err != nil {
		t.Error(err)
	}
}

// An end whose record just fits the bound goes to the backlog; one a byte larger takes a
// transaction. Either is recorded whole.
func TestAnEndOverTheRecordBoundTakesATransaction(t *testing.T) {
	ctx := context.Background()
	for _, extra := range []int{0, 1} {
		st, sess := openSession(t, t.TempDir())
		e, err := st.StartExecution(ctx, sess.ID, "g-1", "1")
		if err != nil {
			t.Fatal(err)
		}
		x := &ending{cell: e, end: ExecutionEnd{Status: "ok", EndedAt: e.StartedAt, Output: jsontext.Value(`[""]`)}}
		bare, err := newBacklogRecord(queued{finish: x}).appendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		x.end.Output = jsontext.Value(`["` + strings.Repeat("x", maxBacklogRecord-len(bare)+extra) + `"]`)
		if err := st.EndExecution(ctx, e, x.end); err != nil {
			t.Fatal(err)
		}
		st.backlog.mu.Lock()
		var inBacklog bool
		if st.backlog.current != nil {
			records, _, _ := parseBacklog(st.backlog.current.mem, 0)
			inBacklog = slices.ContainsFunc(records, func(r backlogRecord) bool { return r.End != nil })
		}
		st.backlog.mu.Unlock()
		if inBacklog != (extra == 0) {
			t.Errorf("an end's record of the bound plus %d bytes: in the backlog %v", extra, inBacklog)
		}
		got, err := st.ExecutionByCell(ctx, sess.ID, "c-1")
		if err != nil || got.Status != "ok" || string(got.Output) != string(x.end.Output) {
			t.Errorf("plus %d bytes: c-1 %s with %d bytes of output, %v; want ok with %d", extra, got.Status,
				len(got.Output), err, len(x.end.Output))
		}
	}
}

// An end the backlog cannot take, an error text that is not UTF-8, takes a transaction,
// and is recorded as the worker gave it.
func TestAnEndTheBacklogCannotTakeTakesATransaction(t *testing.T) {
	ctx := context.Background()
	st, sess := openSession(t, t.TempDir())
	second := runOneStartAnother(t, st, sess.ID, false)
	msg := "worker died: bad \xff byte"
	if err := st.EndExecution(ctx, second, ExecutionEnd{Status: StatusFailed, Error: &msg}); err != nil {
		t.Fatalf("an end whose error is not UTF-8: %v", err)
	}
	got, err := st.ExecutionByCell(ctx, sess.ID, "c-2")
	if err != nil || got.Status != StatusFailed || got.Error == nil || *got.Error != msg {
		t.Errorf("c-2: %+v %v; want failed with %q", got, err, msg)
	}
	if got, want := journalKinds(t, st, sess.ID), "session execution execution.end execution execution.end"; got != want {
		t.Errorf("the journal: %s; want %s", got, want)
	}
}

// A host that takes a session over from one that died, on a Store opened while the
// other lived (a daemon's), folds the dead host's backlog before it closes abandoned
// cells: a cell whose end the dead host recorded keeps that end, and the next cell is
// numbered after it.
func TestATakeoverFoldsTheDeadHostsBacklogFirst(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	dead, sess := openSession(t, dir)
	// The dead host's folds wait on its writer lock until it has died: its cells' ends
	// and c-2's start are in its backlog alone.
	second := runOneStartAnother(t, dead, sess.ID, true)
	if err := dead.EndExecution(ctx, second, ExecutionEnd{Status: "error"}); err != nil {
		dead.writeMu.unlock()
		t.Fatal(err)
	}
	taker, err := OpenDir(ctx, dir, Options{})
	if err != nil {
		dead.writeMu.unlock()
		t.Fatal(err)
	}
	defer taker.Close()
	abandonHeld(dead)
	dead.writeMu.unlock()

	cells, err := taker.EndAbandoned(ctx, sess.ID)
	if err != nil || len(cells) != 0 {
		t.Errorf("abandoned %q, %v; want none", cells, err)
	}
	for cell, status := range map[string]string{"c-1": "ok", "c-2": "error"} {
		if e, err := taker.ExecutionByCell(ctx, sess.ID, cell); err != nil || e.Status != status {
			t.Errorf("%s: %+v %v; want %s", cell, e, err, status)
		}
	}
	if next, err := taker.StartExecution(ctx, sess.ID, "g-2", "3"); err != nil || next.CellID != "c-3" {
		t.Errorf("the next cell: %+v %v; want c-3", next, err)
	}
}

// An end applies to its own generation's cell alone: not to a cell of the same id
// that another generation (a host that took the session over) started.
func TestAnEndAppliesToItsOwnGenerationsCell(t *testing.T) {
	ctx := context.Background()
	for _, backlog := range []bool{true, false} {
		st, sess := openSession(t, t.TempDir())
		if !backlog {
			st, sess = openEphemeral(t)
		}
		e, err := st.StartExecution(ctx, sess.ID, "g-2", "1")
		if err != nil {
			t.Fatal(err)
		}
		other := e
		other.Generation = "g-1"
		err = st.EndExecution(ctx, other, ExecutionEnd{Status: "error"})
		if backlog && err != nil || !backlog && !errors.Is(err, ErrNotFound) {
			t.Errorf("backlog %v: ending another generation's c-1: %v; want nil from the backlog, ErrNotFound from a transaction", backlog, err)
		}
		if got, err := st.ExecutionByCell(ctx, sess.ID, "c-1"); err != nil || got.Status != StatusRunning {
			t.Errorf("backlog %v: c-1 %+v %v; want running", backlog, got, err)
		}
		if got, want := journalKinds(t, st, sess.ID), "session execution"; got != want {
			t.Errorf("backlog %v: the journal: %s; want %s", backlog, got, want)
		}
	}
}

// What EndExecution was given is recorded as it was given, whatever its caller does
// with it after: the backlog's end is folded from memory, later.
func TestAnEndIsRecordedAsItWasGiven(t *testing.T) {
	ctx := context.Background()
	st, sess := openSession(t, t.TempDir())
	e, err := st.StartExecution(ctx, sess.ID, "g-1", "1")
	if err != nil {
		t.Fatal(err)
	}
	msg := "boom"
	output := []byte(`[{"stream":"stdout","text":"a"}]`)
	st.writeMu.lock(context.Background()) // no fold until the caller has changed what it gave
	if err := st.EndExecution(ctx, e, ExecutionEnd{Status: "error", Error: &msg, Output: output}); err != nil {
		st.writeMu.unlock()
		t.Fatal(err)
	}
	msg = "changed"
	copy(output[len(output)-4:], "b")
	st.writeMu.unlock()
	got, err := st.ExecutionByCell(ctx, sess.ID, "c-1")
	if err != nil || got.Error == nil || *got.Error != "boom" || string(got.Output) != `[{"stream":"stdout","text":"a"}]` {
		t.Errorf("c-1: %+v %v; want the end as given", got, err)
	}
}

// A Store's backlog files are named in the order it made them, even when the clock went
// back in between: recovery folds a dead host's files in the order of their names.
func TestBacklogFilesAreNamedInTheOrderMade(t *testing.T) {
	clock := time.Now().Add(time.Hour)
	b := &backlog{dir: t.TempDir(), now: func() time.Time { return clock }}
	defer b.close()
	first, err := b.create(backlogFileSize)
	if err != nil {
		t.Fatal(err)
	}
	b.older = append(b.older, first)
	clock = clock.Add(-time.Hour) // the clock goes back an hour
	second, err := b.create(backlogFileSize)
	if err != nil {
		t.Fatal(err)
	}
	b.current = second
	if names := []string{first.name, second.name}; !slices.IsSorted(names) {
		t.Errorf("files named %q in the order made; want them sorted", names)
	}
}
