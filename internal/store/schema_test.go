package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/internal/wire"
)

// openAt makes a database at schema version, as an older kiln left it, and returns it
// open for that kiln's statements.
func openAt(t *testing.T, path string, version int) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	stmts := append([]string{`CREATE TABLE schema_version (version INTEGER NOT NULL);
		INSERT INTO schema_version (version) VALUES (0)`}, migrations(&sqliteDialect)[:version]...)
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(`UPDATE schema_version SET version = ?`, version); err != nil {
		t.Fatal(err)
	}
	return db
}

// TestEpochZeroNamesTheInitialRelease: a new record's epoch 0 names kiln's initial release
// by its identity, and a record an older kiln left with epoch 0's release null is
// migrated to the same identity; an activated epoch keeps its release.
func TestEpochZeroNamesTheInitialRelease(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	if b, err := s.Behavior(ctx); err != nil || b.Epoch != 0 || b.ReleaseID != InitialReleaseID || !b.ActivatedAt.IsZero() {
		t.Errorf("a new record's behavior: %+v, %v; want epoch 0, release %s", b, err, InitialReleaseID)
	}

	for _, c := range []struct {
		name    string
		prepare string
		epoch   int64
		release string
	}{
		{"never activated", ``, 0, InitialReleaseID},
		{"activated", `UPDATE behavior SET epoch = 3, release_id = 'abc', activated_at_ms = 7`, 3, "abc"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), FileName)
			old := openAt(t, path, 7)
			var release sql.NullString
			if err := old.QueryRow(`SELECT release_id FROM behavior`).Scan(&release); err != nil || release.Valid {
				t.Fatalf("version 7 wrote epoch 0's release as %v, %v; want null", release, err)
			}
			if c.prepare != "" {
				if _, err := old.Exec(c.prepare); err != nil {
					t.Fatal(err)
				}
			}
			old.Close()
			s, err := Open(ctx, path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if b, err := s.Behavior(ctx); err != nil || b.Epoch != c.epoch || b.ReleaseID != c.release {
				t.Errorf("migrated behavior: %+v, %v; want epoch %d, release %s", b, err, c.epoch, c.release)
			}
			if _, err := sqliteOf(s).db.Exec(`UPDATE behavior SET release_id = NULL`); err == nil {
				t.Error("the migrated table takes a null release")
			}
			if _, err := s.ActivateBehavior(ctx, c.epoch, "def"); err != nil {
				t.Errorf("activating after the migration: %v", err)
			}
			if _, err := s.ActivateBehavior(ctx, c.epoch, "def"); !errors.Is(err, ErrStaleEpoch) {
				t.Errorf("a stale activation after the migration: %v; want ErrStaleEpoch", err)
			}
		})
	}
}

// TestCellsAnOlderKilnRefusedAreMarkedNotRun: migrating a record from before not_run marks
// the cells refused before they ran, by their size or the refusal's words, and no other;
// each, kept whole then, reads its whole source's size.
func TestCellsAnOlderKilnRefusedAreMarkedNotRun(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), FileName)
	old := openAt(t, path, 8)
	if _, err := old.Exec(`INSERT INTO sessions (id, name, created_at_ms) VALUES (1, 's', 0)`); err != nil {
		t.Fatal(err)
	}
	cells := []struct {
		code, error string
		notRun      bool
	}{
		{strings.Repeat("#", 262145), "cell source is 262145 bytes, over the limit of 262144", true},
		{"x = '\xff'", "cell source is not valid UTF-8: the byte at offset 5 (0xff) begins no character; it was not run", true},
		{strings.Repeat("#", 262144), "", false},
		{"raise ValueError('it was not run')", "ValueError: it was not run!", false},
	}
	for i, c := range cells {
		var errText any
		if c.error != "" {
			errText = c.error
		}
		if _, err := old.Exec(`INSERT INTO executions (session_id, generation, cell_id, code_sha256, code, status,
			started_at_ms, ended_at_ms, error) VALUES (1, 'g-1', ?, '', ?, 'error', 0, 1, ?)`, fmt.Sprintf("c-%d", i+1), c.code, errText); err != nil {
			t.Fatal(err)
		}
	}
	old.Close()
	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i, c := range cells {
		x, err := s.ExecutionByCell(ctx, 1, fmt.Sprintf("c-%d", i+1))
		if err != nil || x.NotRun != c.notRun || x.CodeBytes != int64(len(c.code)) {
			t.Errorf("cell %d after the migration: not run %v, %d bytes, %v; want %v, %d bytes",
				i+1, x.NotRun, x.CodeBytes, err, c.notRun, len(c.code))
		}
	}
}

// TestASourceThatIsNotUTF8ReadsAsText: a cell's source is kept as it came, hashed as it
// came, and read as text that every JSON encoder takes.
func TestASourceThatIsNotUTF8ReadsAsText(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	sess, err := s.CreateSession(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	code := "x = '\xff\xfe'"
	x, err := s.StartExecution(ctx, sess.ID, "g-1", code)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.ExecutionByCell(ctx, sess.ID, x.CellID)
	if err != nil || got.Code != "x = '\uFFFD'" || got.CodeSHA256 != x.CodeSHA256 {
		t.Fatalf("read %q (sha %s), %v; want the source with U+FFFD, hashed as it came (%s)", got.Code, got.CodeSHA256, err, x.CodeSHA256)
	}
	var kept []byte
	if err := sqliteOf(s).db.QueryRow(`SELECT CAST(code AS BLOB) FROM executions WHERE id = ?`, x.ID).Scan(&kept); err != nil || string(kept) != code {
		t.Errorf("kept %q, %v; want %q", kept, err, code)
	}
	if _, err := json.Marshal(got); err != nil {
		t.Errorf("encoding the record: %v", err)
	}
}

// TestARecordKeepsNoMoreOfASourceThanALimit: a cell's record keeps its source whole up to
// the protocol's bound, and of a longer one (which no worker is sent) its first bytes up
// to the bound, cut on a character's start where it has one, with the whole's digest and
// size; by a transaction or through the backlog alike.
func TestARecordKeepsNoMoreOfASourceThanALimit(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	sess, err := s.CreateSession(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	filled := func(head string, size int) string { return head + strings.Repeat("#", size-len(head)) }
	for _, c := range []struct {
		name, code string
		kept       int
	}{
		{"at the bound", filled("x = 1\n", wire.MaxCodeBytes), wire.MaxCodeBytes},
		{"one past it", filled("x = 1\n", wire.MaxCodeBytes+1), wire.MaxCodeBytes},
		{"megabytes past it", filled("x = 1\n", 5<<20), wire.MaxCodeBytes},
		{"a character across it", filled("x = 1\n", wire.MaxCodeBytes-1) + "€", wire.MaxCodeBytes - 1},
		{"not UTF-8", filled("x = '\xff'\n", wire.MaxCodeBytes+9), wire.MaxCodeBytes},
		{"no character at all", strings.Repeat("\x80", wire.MaxCodeBytes+9), wire.MaxCodeBytes},
	} {
		t.Run(c.name, func(t *testing.T) {
			prev, err := s.StartExecution(ctx, sess.ID, "g-1", "1")
			if err != nil {
				t.Fatal(err)
			}
			if err := s.EndExecution(ctx, prev, ExecutionEnd{Status: "ok"}); err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256([]byte(c.code))
			for _, how := range []string{"by a transaction", "as the next cell"} {
				var x Execution
				if how == "as the next cell" {
					x, err = s.StartNextExecution(ctx, prev, "g-1", c.code)
				} else {
					x, err = s.StartExecution(ctx, sess.ID, "g-1", c.code)
				}
				if err != nil {
					t.Fatal(err)
				}
				if err := s.EndExecution(ctx, x, ExecutionEnd{Status: "error", NotRun: len(c.code) > wire.MaxCodeBytes}); err != nil {
					t.Fatal(err)
				}
				prev = x
				got, err := s.ExecutionByCell(ctx, sess.ID, x.CellID) // folds the backlog first
				if err != nil {
					t.Fatal(err)
				}
				var kept []byte
				if err := sqliteOf(s).db.QueryRow(`SELECT CAST(code AS BLOB) FROM executions WHERE session_id = ? AND cell_id = ?`,
					sess.ID, x.CellID).Scan(&kept); err != nil {
					t.Fatal(err)
				}
				if string(kept) != c.code[:c.kept] {
					t.Errorf("%s: kept %d bytes; want the first %d of %d", how, len(kept), c.kept, len(c.code))
				}
				if got.CodeSHA256 != hex.EncodeToString(sum[:]) || got.CodeBytes != int64(len(c.code)) ||
					x.CodeSHA256 != got.CodeSHA256 || x.CodeBytes != got.CodeBytes {
					t.Errorf("%s: read %s, %d bytes; want the whole source's digest and size, %d bytes",
						how, got.CodeSHA256, got.CodeBytes, len(c.code))
				}
				if !utf8.ValidString(got.Code) || got.Code != strings.ToValidUTF8(c.code[:c.kept], "\uFFFD") {
					t.Errorf("%s: read %d bytes of code; want the kept bytes as text", how, len(got.Code))
				}
				if _, err := json.Marshal(got); err != nil {
					t.Errorf("%s: encoding the record: %v", how, err)
				}
			}
		})
	}
}
