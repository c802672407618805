package store

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"
)

// backlogChildEnv, when set to "DIR COUNT FOLDAFTER", makes TestBacklogChild a host that
// records COUNT answered requests in the record in DIR, folding after the first
// FOLDAFTER, says "recorded N" after each, and waits to be killed.
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
		}
		fmt.Printf("recorded %d\n", i)
	}
	time.Sleep(time.Hour)
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
	rows, err := st.reads.Query(`SELECT q.request_id, r.value FROM journal j JOIN host_requests q ON q.id = j.ref_id
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
	entries, err := st.Log(ctx, LogFilter{Session: sess.ID})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range entries {
		kinds = append(kinds, e.Kind)
	}
	if got := strings.Join(kinds, " "); got != "session request reply request reply request reply event" {
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
	deadline := time.Now().Add(10 * time.Second)
	for len(answeredIn(t, st)) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
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
	// A record cut short by the kill ends the file.
	f, err := os.OpenFile(files[0], os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte{0, 0, 1, 0, 1, 2, 3, 4, '{', '"'})
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
}

func TestALivingStoresBacklogIsLeftAlone(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	first, err := OpenDir(ctx, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	sess, _, _ := first.EnsureSession(ctx, "s")
	if err := first.RecordAnswered(ctx, answeredRequest(sess.ID, 1), okReply(1)); err != nil {
		t.Fatal(err)
	}
	second, err := OpenDir(ctx, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if got := answeredIn(t, second); len(got) != 0 {
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
	st, err := Open(ctx, "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sess, _, _ := st.EnsureSession(ctx, "s")
	if err := st.RecordAnswered(ctx, answeredRequest(sess.ID, 1), okReply(1)); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(answeredIn(t, st), " "); got != wantAnswered(1) {
		t.Errorf("recorded %q; want %q", got, wantAnswered(1))
	}
}

func TestReadBacklogStopsAtTheFirstBadRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b.log")
	b := &backlog{dir: filepath.Dir(path)}
	b.mu.Lock()
	if err := b.create(); err != nil {
		t.Fatal(err)
	}
	b.mu.Unlock()
	for i := 1; i <= 3; i++ {
		if _, err := b.append(answeredRequest(1, i), okReply(i)); err != nil {
			t.Fatal(err)
		}
	}
	b.close()
	data, _ := os.ReadFile(b.file.Name())
	second := int(b.queue[0].end)
	data[second+backlogHeaderSize+3] ^= 1 // the second record's payload: its checksum fails
	os.WriteFile(path, data, 0o600)
	f, _ := os.Open(path)
	defer f.Close()
	records, end, err := readBacklog(f, 0)
	if err != nil || len(records) != 1 || end != int64(second) {
		t.Errorf("read %d records to %d (%v); want 1 to %d", len(records), end, err, second)
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
