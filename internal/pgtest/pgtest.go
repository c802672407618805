// Package pgtest starts a PostgreSQL server for tests: a cluster of the machine's own
// PostgreSQL (Debian's postgresql package: initdb and pg_ctl) in a temporary directory,
// listening on a Unix socket only, and removed with its files when the test ends. A
// machine with no PostgreSQL installed skips the test with a message; one whose
// PostgreSQL is installed but does not start fails it.
//
// PostgreSQL refuses to run as root: a root test runs the cluster as the user named
// "postgres", which the package creates, and skips where there is none.
package pgtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// StartTimeout bounds the cluster's start, on a loaded machine.
const StartTimeout = 120 * time.Second

// Superuser is the cluster's superuser, whom the tests connect as.
const Superuser = "postgres"

// Server is a running PostgreSQL cluster of a test.
type Server struct {
	dir    string // the cluster's directory, its socket's too
	bin    string // the directory of initdb and pg_ctl
	cred   *syscall.Credential
	logger string // the server's log file
}

// Start starts a cluster for t, stopped and removed when t ends. settings, each
// "name=value", are the server's beyond the tests' own (fsync=on, say, for a benchmark
// of durable commits).
func Start(t testing.TB, settings ...string) *Server {
	t.Helper()
	bin, err := binDir()
	if err != nil {
		t.Skipf("pgtest: no PostgreSQL to start: %v", err)
	}
	s := &Server{bin: bin}
	if os.Geteuid() == 0 {
		u, err := user.Lookup(Superuser)
		if err != nil {
			t.Skipf("pgtest: running as root with no user %q to run PostgreSQL as: %v", Superuser, err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	// A directory of its own under /tmp when the server runs as another user: the
	// tests' TMPDIR may be one that user cannot enter. Its name is short, for the socket.
	base := ""
	if s.cred != nil {
		base = "/tmp"
	}
	if s.dir, err = os.MkdirTemp(base, "kiln-pg"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(s.dir) })
	if s.cred != nil {
		if err := os.Chown(s.dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	s.logger = filepath.Join(s.dir, "log")
	data := filepath.Join(s.dir, "data")
	if out, err := s.run("initdb", "-D", data, "-U", Superuser, "-A", "trust", "-E", "UTF8",
		"--locale=C", "--no-sync"); err != nil {
		t.Fatalf("pgtest: initdb: %v\n%s", err, out)
	}
	// Unix socket only; no fsync: a test's cluster outlives no power loss, and kiln's
	// own crash tests kill kiln, not the server.
	opts := "-k " + s.dir + " -c listen_addresses='' -c fsync=off -c full_page_writes=off" +
		" -c max_connections=200 -c shared_buffers=32MB"
	for _, set := range settings {
		opts += " -c " + set
	}
	out, err := s.run("pg_ctl", "-D", data, "-l", s.logger, "-w", "-t", strconv.Itoa(int(StartTimeout.Seconds())),
		"-o", opts, "start")
	if err != nil {
		log, _ := os.ReadFile(s.logger)
		t.Fatalf("pgtest: pg_ctl start: %v\n%s\n%s", err, out, log)
	}
	t.Cleanup(func() {
		if out, err := s.run("pg_ctl", "-D", data, "-m", "immediate", "-w", "stop"); err != nil {
			t.Errorf("pgtest: pg_ctl stop: %v\n%s", err, out)
		}
	})
	return s
}

// binDir is the directory of initdb and pg_ctl: on the PATH, else Debian's newest.
func binDir() (string, error) {
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if _, err := exec.LookPath("initdb"); err == nil {
			return filepath.Dir(p), nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return version(b) - version(a) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("neither pg_ctl and initdb on the PATH nor /usr/lib/postgresql/*/bin (apt-get install postgresql)")
}

// version is the major version of a /usr/lib/postgresql/<version>/bin directory.
func version(dir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return v
}

// run runs one of the server's programs as the server's user.
func (s *Server) run(name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C", "TZ=UTC")
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	return cmd.CombinedOutput()
}

// URL is the URL of database db on the server.
func (s *Server) URL(db string) string {
	q := url.Values{"host": {s.dir}}
	return (&url.URL{Scheme: "postgres", User: url.User(Superuser), Path: "/" + db, RawQuery: q.Encode()}).String()
}

// Database creates the database for key, unless it exists, and returns its URL: the
// same key is the same database, so a test may reopen the record it wrote.
func (s *Server) Database(t testing.TB, key string) string {
	t.Helper()
	sum := sha256.Sum256([]byte(key))
	name := "kiln_" + hex.EncodeToString(sum[:8])
	cfg, err := pgx.ParseConfig(s.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	var exists bool
	if err := db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if !exists {
		if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
			t.Fatalf("pgtest: create database: %v", err)
		}
	}
	return s.URL(name)
}

// Backends are the pids of the server's processes serving the database at url, for a
// benchmark that counts their CPU.
func Backends(t testing.TB, url string) []int {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	rows, err := db.Query(`SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var pids []int
	for rows.Next() {
		var pid int
		if err := rows.Scan(&pid); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	return pids
}
