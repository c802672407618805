package store

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kilnrt/kiln/internal/procfs"
)

// ErrLeaseHeld is a lease another living process holds; the error carrying it is a
// *LeaseHeldError, which names the holder.
var ErrLeaseHeld = errors.New("store: lease held")

// Holder is the process that holds a lease. Start identifies the process beyond its
// pid: the boot and the start time of the process, so that a pid reused by another
// process, or after a reboot, is not taken for the holder.
type Holder struct {
	Pid        int
	Start      string // "<boot id>/<start time in clock ticks>"; "" where /proc does not say
	Hostname   string
	AcquiredAt time.Time
}

// String names the holder for a person.
func (h Holder) String() string {
	return fmt.Sprintf("pid %d on %s, since %s", h.Pid, h.Hostname, h.AcquiredAt.UTC().Format(time.RFC3339))
}

// LeaseHeldError is the refusal of a lease a living process holds.
type LeaseHeldError struct {
	Key    string
	Holder Holder
}

func (e *LeaseHeldError) Error() string {
	return fmt.Sprintf("store: lease %s is held by %s", e.Key, e.Holder)
}

// Is makes errors.Is(err, ErrLeaseHeld) hold.
func (e *LeaseHeldError) Is(target error) bool { return target == ErrLeaseHeld }

// Lease is a named lease this process holds in the store until it releases it. Only
// one process holds a key at a time; a holder that died, however it died, is noticed
// by the next process asking, which takes the lease over.
type Lease struct {
	s     *Store
	key   string
	token string
	// TookOver is the dead holder this lease was taken from, if it was.
	TookOver *Holder
}

// SessionLeaseKey is the key of the lease a session's one host holds.
func SessionLeaseKey(session string) string { return "session:" + session }

// Key is the lease's name.
func (l *Lease) Key() string { return l.key }

// AcquireLease takes the lease named key for this process. A lease held by a living
// process (this one included, through another Lease) is refused at once with a
// *LeaseHeldError naming its holder (errors.Is ErrLeaseHeld); a lease whose holder is
// dead is taken over, and the Lease says from whom.
func (s *Store) AcquireLease(ctx context.Context, key string) (*Lease, error) {
	me, err := self()
	if err != nil {
		return nil, fmt.Errorf("store: lease %s: %w", key, err)
	}
	var random [16]byte
	rand.Read(random[:])
	l := &Lease{s: s, key: key, token: hex.EncodeToString(random[:])}
	err = s.Update(ctx, func(tx *Tx) error {
		var h Holder
		var at int64
		err := tx.queryRow(`SELECT pid, start, hostname, acquired_at_ms FROM leases WHERE key = ?`, key).
			Scan(&h.Pid, &h.Start, &h.Hostname, &at)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return err
		default:
			h.AcquiredAt = time.UnixMilli(at)
			if alive(h, me) {
				return &LeaseHeldError{Key: key, Holder: h}
			}
			l.TookOver = &h
		}
		me.AcquiredAt = time.UnixMilli(ms(tx.now))
		_, err = tx.exec(`INSERT INTO leases (key, token, pid, start, hostname, acquired_at_ms) VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (key) DO UPDATE SET token = excluded.token, pid = excluded.pid, start = excluded.start,
			hostname = excluded.hostname, acquired_at_ms = excluded.acquired_at_ms`,
			key, l.token, me.Pid, me.Start, me.Hostname, ms(tx.now))
		return err
	})
	var held *LeaseHeldError
	switch {
	case errors.As(err, &held):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("store: lease %s: %w", key, err)
	}
	return l, nil
}

// Release gives the lease up; releasing it again, or a lease since taken over, does
// nothing.
func (l *Lease) Release(ctx context.Context) error {
	err := l.s.Update(ctx, func(tx *Tx) error {
		_, err := tx.exec(`DELETE FROM leases WHERE key = ? AND token = ?`, l.key, l.token)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: releasing lease %s: %w", l.key, err)
	}
	return nil
}

// LeaseHolder returns the holder of the lease named key, and whether it is held by a
// living process; ErrNotFound if no process holds it.
func (s *Store) LeaseHolder(ctx context.Context, key string) (Holder, bool, error) {
	me, err := self()
	if err != nil {
		return Holder{}, false, fmt.Errorf("store: lease %s: %w", key, err)
	}
	var h Holder
	var at int64
	err = s.readRow(ctx, `SELECT pid, start, hostname, acquired_at_ms FROM leases WHERE key = ?`, key).
		Scan(&h.Pid, &h.Start, &h.Hostname, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return Holder{}, false, fmt.Errorf("%w: lease %s", ErrNotFound, key)
	}
	if err != nil {
		return Holder{}, false, fmt.Errorf("store: lease %s: %w", key, err)
	}
	h.AcquiredAt = time.UnixMilli(at)
	return h, alive(h, me), nil
}

// HeldLease is a lease as the record holds it, and whether its holder lives.
type HeldLease struct {
	Key    string
	Holder Holder
	Live   bool
}

// Leases are the leases the record holds, by key.
func (s *Store) Leases(ctx context.Context) ([]HeldLease, error) {
	me, err := self()
	if err != nil {
		return nil, fmt.Errorf("store: leases: %w", err)
	}
	rows, err := s.readRows(ctx, `SELECT key, pid, start, hostname, acquired_at_ms FROM leases ORDER BY key`)
	if err != nil {
		return nil, fmt.Errorf("store: leases: %w", err)
	}
	defer rows.Close()
	var leases []HeldLease
	for rows.Next() {
		var l HeldLease
		var at int64
		if err := rows.Scan(&l.Key, &l.Holder.Pid, &l.Holder.Start, &l.Holder.Hostname, &at); err != nil {
			return nil, fmt.Errorf("store: leases: %w", err)
		}
		l.Holder.AcquiredAt = time.UnixMilli(at)
		l.Live = alive(l.Holder, me)
		leases = append(leases, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: leases: %w", err)
	}
	return leases, nil
}

// self is this process as a lease holder.
func self() (Holder, error) {
	host, err := os.Hostname()
	if err != nil {
		return Holder{}, err
	}
	pid := procfs.Self() // as /proc names it, for every process that judges the lease
	return Holder{Pid: pid, Start: startIdentity(pid), Hostname: host}, nil
}

// alive reports whether holder h is a living process, as seen by me. A holder on
// another machine cannot be checked from here, and is taken to be alive; one on this
// machine in an earlier boot is dead.
func alive(h, me Holder) bool {
	if h.Hostname != me.Hostname {
		return true
	}
	if h.Start != "" && me.Start != "" {
		return procfs.Alive(h.Pid) && startIdentity(h.Pid) == h.Start // a zombie holds nothing
	}
	// Without /proc, the pid alone: a reused pid is taken for the holder.
	return syscall.Kill(h.Pid, 0) != syscall.ESRCH
}

// startIdentity is "<boot id>/<start time>" of process pid from /proc, or "" if /proc
// does not tell it (the process does not exist, or there is no /proc).
func startIdentity(pid int) string {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	start, ok := startTime(stat)
	if !ok {
		return ""
	}
	return strings.TrimSpace(string(boot)) + "/" + start
}

// startTime is the start time field (the 22nd) of a /proc/<pid>/stat line. The second
// field, the command's name in parentheses, may hold spaces and parentheses itself, so
// the fields are counted from the last ')'.
func startTime(stat []byte) (string, bool) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return "", false
	}
	fields := strings.Fields(string(stat[i+1:])) // from the 3rd field on
	if len(fields) < 20 {
		return "", false
	}
	return fields[19], true
}
