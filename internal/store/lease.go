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
	"slices"
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
	Start      string // "<boot id>/<start time in clock ticks>/<PID namespace>"; "" where /proc does not say
	Hostname   string
	AcquiredAt time.Time
	// ExpiresAt is when the lease ends unless its holder renews it; zero for a lease
	// held while its process lives (see LeaseTerms).
	ExpiresAt time.Time
	// URL is where the holder answers, as it advertised it; "" for none.
	URL string
}

// String names the holder for a person.
func (h Holder) String() string {
	s := fmt.Sprintf("pid %d on %s, since %s", h.Pid, h.Hostname, h.AcquiredAt.UTC().Format(time.RFC3339))
	if h.URL != "" {
		s += ", at " + h.URL
	}
	if !h.ExpiresAt.IsZero() {
		s += ", until " + h.ExpiresAt.UTC().Format(time.RFC3339)
	}
	return s
}

// LeaseTerms are the terms of the leases a Store takes.
type LeaseTerms struct {
	// TTL, when positive, makes each lease end TTL after it was last renewed, and the
	// Store renews those it holds every TTL/RenewalsPerTTL: for a record several hosts
	// share, where a holder on another host cannot be seen to die. 0 holds a lease
	// while its process lives, as a record of one host is held.
	TTL time.Duration
	// URL is where the holder answers, advertised in its leases; AdvertiseURL sets it
	// once it is known.
	URL string
	// Lost, when set, is told the key of each lease of the Store that another holder
	// took over, the Store's renewal having come too late.
	Lost func(key string)
}

// RenewalsPerTTL are the renewals a Store makes of its leases within their TTL: two may
// fail before a lease ends.
const RenewalsPerTTL = 3

// checkClock refuses a Store whose leases have a term, on a database server whose clock
// is apart from this host's by more than half a renewal interval
// (TTL/(2*RenewalsPerTTL)). Each holder writes its term's end by its own clock and every
// other judges it by theirs: two hosts within that bound of the server differ by at
// most a renewal interval, which leaves a holder one renewal interval of slack before
// another host sees its term end. A Store without a term, or whose database has no server
// (Dialect.Clock ""), has no other host's clock to agree with.
func (s *Store) checkClock(ctx context.Context) error {
	query := s.eng.Dialect().Clock
	if s.lease.TTL <= 0 || query == "" {
		return nil
	}
	before := s.now()
	var serverMS int64
	if err := s.eng.WriterRow(ctx, query).Scan(&serverMS); err != nil {
		return fmt.Errorf("store: reading the database server's clock: %w", err)
	}
	after := s.now()
	here := before.Add(after.Sub(before) / 2)
	skew := here.Sub(time.UnixMilli(serverMS))
	bound := s.lease.TTL / (2 * RenewalsPerTTL)
	if skew.Abs() > bound+after.Sub(before) {
		way := "ahead of"
		if skew < 0 {
			way = "behind"
		}
		return fmt.Errorf("store: this host's clock is %s %s the database server's; leases of %s need the two within %s: synchronize this host's clock (NTP) or give the leases a longer term",
			skew.Abs().Round(time.Millisecond), way, s.lease.TTL, bound)
	}
	return nil
}

// ErrLeaseLost is a lease of the Store another holder has taken over.
var ErrLeaseLost = errors.New("store: lease lost")

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
// dead, or whose term ended unrenewed, is taken over, and the Lease says from whom.
// Under the Store's LeaseTerms with a TTL, the lease has a term the Store renews for as
// long as it holds it.
func (s *Store) AcquireLease(ctx context.Context, key string) (*Lease, error) {
	l, me, err := s.newLease(key)
	if err != nil {
		return nil, err
	}
	if err := s.updateScoped(ctx, WriteLeases, nil, func(tx *Tx) error { return tx.takeLease(l, me) }); err != nil {
		return nil, leaseError("lease "+key, err)
	}
	s.holding(l)
	return l, nil
}

// newLease is a lease of key for this process, me, not yet taken.
func (s *Store) newLease(key string) (*Lease, Holder, error) {
	me, err := self()
	if err != nil {
		return nil, Holder{}, fmt.Errorf("store: lease %s: %w", key, err)
	}
	return &Lease{s: s, key: key, token: newToken()}, me, nil
}

// takeLease takes l for me within tx, unless a living holder has it: a
// *LeaseHeldError. It takes the lease only from the holder it read, in the term it
// read: one that took or renewed it meanwhile, in a transaction of another process,
// keeps it.
func (tx *Tx) takeLease(l *Lease, me Holder) error {
	var was string       // the holder's token; "" for none
	var wasExpires int64 // the end of its term, as read
	h, err := scanHolder(tx.queryRow(`SELECT token, expires_at_ms, `+holderColumns+` FROM leases WHERE key = $1`, l.key), &was, &wasExpires)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return err
	default:
		if leaseLive(h, me, tx.now) {
			return &LeaseHeldError{Key: l.key, Holder: h}
		}
		l.TookOver = &h
	}
	res, err := tx.exec(`INSERT INTO leases (key, token, pid, start, hostname, acquired_at_ms, expires_at_ms, url, owner)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
		ON CONFLICT (key) DO UPDATE SET token = excluded.token, pid = excluded.pid, start = excluded.start,
		hostname = excluded.hostname, acquired_at_ms = excluded.acquired_at_ms, expires_at_ms = excluded.expires_at_ms,
		url = excluded.url, owner = excluded.owner WHERE leases.token = $10 AND leases.expires_at_ms = $11`,
		l.key, l.token, me.Pid, me.Start, me.Hostname, ms(tx.now), tx.s.expiry(tx.now), tx.s.leaseURL(), tx.s.owner, was, wasExpires)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 1 {
		return err
	}
	if h, err = scanHolder(tx.queryRow(`SELECT `+holderColumns+` FROM leases WHERE key = $1`, l.key)); err != nil {
		return err
	}
	return &LeaseHeldError{Key: l.key, Holder: h}
}

// expiry is when a lease taken or renewed at now ends unrenewed: 0, never, without a TTL.
func (s *Store) expiry(now time.Time) int64 {
	if s.lease.TTL <= 0 {
		return 0
	}
	return ms(now.Add(s.lease.TTL))
}

// ClaimEnded takes the leases of keys beginning with prefix (which holds no % or _)
// whose holder's term ended unrenewed, or who died on this host, and returns them, each
// saying whom it was taken from. Another Store's leases only: a Store's own are its to
// renew. A lease another process is taking at the same time is skipped, not waited for
// (Dialect.ClaimLease): processes that look for ended leases at once take each lease
// once, and none waits for another.
func (s *Store) ClaimEnded(ctx context.Context, prefix string) ([]*Lease, error) {
	me, err := self()
	if err != nil {
		return nil, fmt.Errorf("store: claiming ended leases: %w", err)
	}
	rows, err := s.readRows(ctx, `SELECT key, token, expires_at_ms, `+holderColumns+` FROM leases
		WHERE key LIKE $1 AND owner <> $2 ORDER BY key`, prefix+"%", s.owner)
	if err != nil {
		return nil, fmt.Errorf("store: claiming ended leases: %w", err)
	}
	type ended struct {
		key, token string
		expires    int64 // as read: a claim requires the term it read ended, not one renewed since
		holder     Holder
	}
	var found []ended
	now := s.now()
	for rows.Next() {
		var e ended
		if e.holder, err = scanHolder(rows, &e.key, &e.token, &e.expires); err != nil {
			rows.Close()
			return nil, fmt.Errorf("store: claiming ended leases: %w", err)
		}
		if !leaseLive(e.holder, me, now) {
			found = append(found, e)
		}
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil || len(found) == 0 {
		return nil, err
	}
	var claimed []*Lease
	err = s.updateScoped(ctx, WriteLeases, nil, func(tx *Tx) error {
		claimed = claimed[:0]
		for _, e := range found {
			l := &Lease{s: s, key: e.key, token: newToken(), TookOver: &e.holder}
			res, err := tx.exec(s.eng.Dialect().ClaimLease, l.token, me.Pid, me.Start, me.Hostname, ms(tx.now),
				s.expiry(tx.now), s.leaseURL(), s.owner, e.key, e.token, e.expires)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n == 1 {
				claimed = append(claimed, l)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: claiming ended leases: %w", err)
	}
	for _, l := range claimed {
		s.holding(l)
	}
	return claimed, nil
}

// newToken is a new lease's own token.
func newToken() string {
	var random [16]byte
	rand.Read(random[:])
	return hex.EncodeToString(random[:])
}

// leaseError is err of a transaction that took a lease, doing what: a *LeaseHeldError
// as it is, any other saying what.
func leaseError(what string, err error) error {
	var held *LeaseHeldError
	if err == nil || errors.As(err, &held) {
		return err
	}
	return fmt.Errorf("store: %s: %w", what, err)
}

// holding notes l, taken, among the leases the Store renews, when they have a term.
func (s *Store) holding(l *Lease) {
	if s.lease.TTL > 0 {
		s.mu.Lock()
		s.held[l.key] = l.token
		s.mu.Unlock()
	}
}

// holderColumns are the columns scanHolder reads, in its order.
const holderColumns = `pid, start, hostname, acquired_at_ms, expires_at_ms, url`

// scanHolder reads a lease's holder from row, of holderColumns after the columns of
// before, which it scans into.
func scanHolder(row interface{ Scan(...any) error }, before ...any) (Holder, error) {
	var h Holder
	var at, expires int64
	if err := row.Scan(append(before, &h.Pid, &h.Start, &h.Hostname, &at, &expires, &h.URL)...); err != nil {
		return Holder{}, err
	}
	h.AcquiredAt = time.UnixMilli(at)
	if expires != 0 {
		h.ExpiresAt = time.UnixMilli(expires)
	}
	return h, nil
}

// leaseLive reports whether holder h still holds its lease at now, as seen by me: its
// term, if it has one, has not ended, and it is alive as far as this host can tell.
// Within its term, a holder me cannot see in its /proc (one of another host, boot or PID
// namespace, which may share this host's name) holds the lease: its pid says nothing
// here.
func leaseLive(h, me Holder, now time.Time) bool {
	if h.ExpiresAt.IsZero() {
		return alive(h, me)
	}
	if !now.Before(h.ExpiresAt) {
		return false
	}
	return !sameProc(h, me) || alive(h, me)
}

// sameProc reports whether h and me see one /proc: the same host, boot and PID
// namespace, as their Start says.
func sameProc(h, me Holder) bool {
	if h.Hostname != me.Hostname {
		return false
	}
	hs, mine := strings.Split(h.Start, "/"), strings.Split(me.Start, "/")
	return len(hs) == 3 && len(mine) == 3 && hs[0] == mine[0] && hs[2] == mine[2]
}

// leaseURL is the URL the Store's leases advertise.
func (s *Store) leaseURL() string {
	if u := s.advertised.Load(); u != nil {
		return *u
	}
	return s.lease.URL
}

// AdvertiseURL makes url where the Store's leases say their holder answers, in those it
// holds now and those it takes from now on.
func (s *Store) AdvertiseURL(ctx context.Context, url string) error {
	s.advertised.Store(&url)
	err := s.updateScoped(ctx, WriteLeases, nil, func(tx *Tx) error {
		_, err := tx.exec(`UPDATE leases SET url = $1 WHERE owner = $2`, url, s.owner)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: advertising %s in the leases: %w", url, err)
	}
	return nil
}

// RenewLeases renews every lease the Store holds under a TTL to the end of a new term,
// in one transaction, and returns the keys of those another holder has taken over
// since, which the Store no longer holds (each told to LeaseTerms.Lost too).
func (s *Store) RenewLeases(ctx context.Context) ([]string, error) {
	s.mu.Lock()
	n := len(s.held)
	s.mu.Unlock()
	if s.lease.TTL <= 0 || n == 0 {
		return nil, nil
	}
	var lost []string
	err := s.updateScoped(ctx, WriteLeases, nil, func(tx *Tx) error {
		lost = nil
		if _, err := tx.exec(`UPDATE leases SET expires_at_ms = $1 WHERE owner = $2`, ms(tx.now.Add(s.lease.TTL)), s.owner); err != nil {
			return err
		}
		rows, err := tx.query(`SELECT key, token FROM leases WHERE owner = $1`, s.owner)
		if err != nil {
			return err
		}
		defer rows.Close()
		mine := map[string]string{}
		for rows.Next() {
			var key, token string
			if err := rows.Scan(&key, &token); err != nil {
				return err
			}
			mine[key] = token
		}
		if err := rows.Err(); err != nil {
			return err
		}
		s.mu.Lock()
		for key, token := range s.held {
			if mine[key] != token {
				lost = append(lost, key)
				delete(s.held, key)
			}
		}
		s.mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: renewing the leases: %w", err)
	}
	slices.Sort(lost)
	if s.lease.Lost != nil {
		for _, key := range lost {
			s.lease.Lost(key)
		}
	}
	return lost, nil
}

// renew renews the Store's leases every TTL/RenewalsPerTTL until stop is closed.
func (s *Store) renew(stop <-chan struct{}) {
	tick := time.NewTicker(s.lease.TTL / RenewalsPerTTL)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.lease.TTL/RenewalsPerTTL)
		if _, err := s.RenewLeases(ctx); err != nil {
			s.log.Warn("renewing the leases", "err", err)
		}
		cancel()
	}
}

// Release gives the lease up; releasing it again, or a lease since taken over, does
// nothing.
func (l *Lease) Release(ctx context.Context) error {
	l.s.mu.Lock()
	if l.s.held[l.key] == l.token {
		delete(l.s.held, l.key)
	}
	l.s.mu.Unlock()
	err := l.s.updateScoped(ctx, WriteLeases, nil, func(tx *Tx) error {
		_, err := tx.exec(`DELETE FROM leases WHERE key = $1 AND token = $2`, l.key, l.token)
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
	h, err := scanHolder(s.readRow(ctx, `SELECT `+holderColumns+` FROM leases WHERE key = $1`, key))
	if errors.Is(err, sql.ErrNoRows) {
		return Holder{}, false, fmt.Errorf("%w: lease %s", ErrNotFound, key)
	}
	if err != nil {
		return Holder{}, false, fmt.Errorf("store: lease %s: %w", key, err)
	}
	return h, leaseLive(h, me, s.now()), nil
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
	rows, err := s.readRows(ctx, `SELECT key, `+holderColumns+` FROM leases ORDER BY key`)
	if err != nil {
		return nil, fmt.Errorf("store: leases: %w", err)
	}
	defer rows.Close()
	now := s.now()
	var leases []HeldLease
	for rows.Next() {
		var l HeldLease
		var err error
		if l.Holder, err = scanHolder(rows, &l.Key); err != nil {
			return nil, fmt.Errorf("store: leases: %w", err)
		}
		l.Live = leaseLive(l.Holder, me, now)
		leases = append(leases, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: leases: %w", err)
	}
	return leases, nil
}

// self is this process as a lease holder. Its Start is its start identity, then its
// PID namespace: "<boot id>/<start time>/pid:[<inode>]".
func self() (Holder, error) {
	host, err := os.Hostname()
	if err != nil {
		return Holder{}, err
	}
	pid := procfs.Self() // as /proc names it, for every process that judges the lease
	start := startIdentity(pid)
	if ns, err := os.Readlink("/proc/self/ns/pid"); err == nil && start != "" && !strings.Contains(ns, "/") {
		start += "/" + ns
	}
	return Holder{Pid: pid, Start: start, Hostname: host}, nil
}

// alive reports whether holder h is a living process, as seen by me. A holder on
// another machine cannot be checked from here, and is taken to be alive; one on this
// machine in an earlier boot is dead.
func alive(h, me Holder) bool {
	if h.Hostname != me.Hostname {
		return true
	}
	if h.Start != "" && me.Start != "" {
		return procfs.Alive(h.Pid) && startIdentity(h.Pid) == identity(h.Start) // a zombie holds nothing
	}
	// Without /proc, the pid alone: a reused pid is taken for the holder.
	return syscall.Kill(h.Pid, 0) != syscall.ESRCH
}

// identity is start, a holder's Start, without its PID namespace: its start identity.
func identity(start string) string {
	boot, rest, _ := strings.Cut(start, "/")
	ticks, _, _ := strings.Cut(rest, "/")
	return boot + "/" + ticks
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
