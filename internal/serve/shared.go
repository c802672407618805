package serve

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/go-json-experiment/json"

	"github.com/kilnrt/kiln/internal/config"
	"github.com/kilnrt/kiln/internal/store"
)

// A record several daemons share (Options.Store, a PostgreSQL database) holds the
// sessions of all of them. Each session is held by one daemon at a time, by its lease
// (store.SessionLeaseKey), which has a term its holder renews (Options.LeaseTTL):
//
//   - the daemon that opens a session's runtime takes its lease and holds it until the
//     runtime closes; the others answer reads of the session from the record, and
//     refuse its writes with a *HeldElsewhereError naming the holder's URL;
//   - a session whose lease is free, or whose holder's term ended unrenewed (the holder
//     died, or lost the database), is taken by the next daemon that writes to it, or
//     that finds it so as it looks for work (takeOver): the cells the dead holder left
//     running are recorded failed, and the next cell starts a new generation, its
//     namespace lost, as after a restart;
//   - each daemon keeps the sessions' states (how each was opened, whether it is open)
//     in the record (store.SaveDaemonSession) rather than in files of its own.

// Bounds of a lease's term on a shared record.
const (
	DefaultLeaseTTL = 15 * time.Second
	MinLeaseTTL     = config.MinLeaseTTL // 1 s: three renewals a second at most
	MaxLeaseTTL     = config.MaxLeaseTTL // 10 min: a dead daemon's sessions wait no longer
)

// ErrHeldElsewhere is a write to a session another daemon holds; the error carrying it
// is a *HeldElsewhereError, which names the holder.
var ErrHeldElsewhere = errors.New("serve: the session is held by another daemon")

// HeldElsewhereError is a write refused because another daemon holds the session.
type HeldElsewhereError struct {
	Session string
	Holder  store.Holder
}

func (e *HeldElsewhereError) Error() string {
	where := e.Holder.URL
	if where == "" {
		where = "no URL: it listens on its socket only"
	}
	return fmt.Sprintf("serve: session %s is held by another daemon (%s; %s): send its writes there", e.Session, where, e.Holder)
}

// Is makes errors.Is(err, ErrHeldElsewhere) hold.
func (e *HeldElsewhereError) Is(target error) bool { return target == ErrHeldElsewhere }

// CheckLeaseTTL refuses a lease term out of MinLeaseTTL..MaxLeaseTTL, or one given for a
// record no other daemon shares (shared false), where a lease lasts while its process
// does; 0 is the default.
func CheckLeaseTTL(ttl time.Duration, shared bool) error {
	switch {
	case ttl == 0:
		return nil
	case !shared:
		return fmt.Errorf("%w: a lease term applies to a record daemons share (a postgres:// store); the SQLite record's leases last while their daemon lives", ErrInvalid)
	case ttl < MinLeaseTTL || ttl > MaxLeaseTTL:
		return fmt.Errorf("%w: a lease term must be %s..%s, got %s", ErrInvalid, MinLeaseTTL, MaxLeaseTTL, ttl)
	}
	return nil
}

// heldElsewhere turns a refusal of the session's lease into the error a client is
// answered, and forgets the session, which another daemon holds.
func (d *Daemon) heldElsewhere(s *Session, err error) error {
	var held *store.LeaseHeldError
	if !d.shared() || !errors.As(err, &held) {
		return err
	}
	d.unlist(s)
	return &HeldElsewhereError{Session: s.id, Holder: held.Holder}
}

// shared says whether other daemons share the record.
func (d *Daemon) shared() bool { return d.opts.Store != "" }

// unlist forgets s, if the daemon lists it.
func (d *Daemon) unlist(s *Session) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.sessions[s.id] == s {
		delete(d.sessions, s.id)
	}
}

// recordReadTimeout bounds a read of the shared record made for a lookup.
const recordReadTimeout = 10 * time.Second

// holds says whether the daemon holds the session's lease, or is taking or giving it
// up: its runtime is live, opening or stopping, or a cell runs.
func (s *Session) holds() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rt != nil || s.opening != nil || s.stopping != nil || s.running != nil
}

// recorded is session id as the shared record has it, for a daemon that does not hold
// it (local is its own listing of that id, if any, which holds nothing): another
// daemon's session (elsewhere set), one stopped, or one whose lease is free, which the
// daemon lists as its own to take at its next write.
func (d *Daemon) recorded(id string, local *Session) (*Session, error) {
	ctx, cancel := context.WithTimeout(context.Background(), recordReadTimeout)
	defer cancel()
	data, err := d.store.DaemonSessionState(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound) && local != nil:
		return local, nil
	case errors.Is(err, store.ErrNotFound):
		return nil, fmt.Errorf("%w: %q", ErrNoSession, id)
	case err != nil:
		return nil, err
	}
	var st state
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("serve: session %s in the record: %w", id, err)
	}
	if local != nil && local.stopped() && st.State == StateStopped {
		return local, nil
	}
	sess, err := d.store.SessionByName(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("serve: session %s: %w", id, err)
	}
	s := d.newSession(st, sess.ID)
	if st.State == StateStopped {
		if local != nil {
			d.unlist(local) // stopped by another daemon
		}
		return s, nil
	}
	h, live, err := d.store.LeaseHolder(ctx, store.SessionLeaseKey(id))
	switch {
	case err == nil && live:
		if local != nil {
			d.unlist(local)
		}
		s.elsewhere = &h
		return s, nil
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if cur := d.sessions[id]; cur != nil && (cur == local && !cur.stopped() || cur != local) {
		return cur, nil // listed already, or meanwhile
	}
	if d.closed {
		return nil, ErrClosed
	}
	d.sessions[id] = s
	s.touch() // s.mu under d.mu, as reserve takes them
	return s, nil
}

// sharedSessions describes every session of the shared record: those the daemon holds
// as it sees them, the others as the record has them.
func (d *Daemon) sharedSessions(local map[string]Info) ([]Info, error) {
	ctx, cancel := context.WithTimeout(context.Background(), recordReadTimeout)
	defer cancel()
	all, err := d.store.DaemonSessions(ctx)
	if err != nil {
		return nil, err
	}
	leases, err := d.store.Leases(ctx)
	if err != nil {
		return nil, err
	}
	holders := map[string]store.Holder{}
	for _, l := range leases {
		if l.Live {
			holders[l.Key] = l.Holder
		}
	}
	out := make([]Info, 0, len(all))
	for _, r := range all {
		if in, ok := local[r.Name]; ok && in.State == StateOpen {
			out = append(out, in)
			delete(local, r.Name)
			continue
		}
		var st state
		if err := json.Unmarshal(r.State, &st); err != nil {
			d.log.Warn("skipping a session the record holds", "session", r.Name, "err", err)
			continue
		}
		in := Info{ID: r.Name, State: st.State, CreatedAt: st.CreatedAt, StoppedAt: st.StoppedAt,
			StopReason: st.StopReason, Config: st.Config.withoutSecrets()}
		if h, ok := holders[store.SessionLeaseKey(r.Name)]; ok && st.State == StateOpen {
			in.HeldBy = heldBy(h)
		}
		delete(local, r.Name)
		out = append(out, in)
	}
	for _, in := range local { // listed here, and not yet saved in the record
		out = append(out, in)
	}
	return out, nil
}

// heldBy names a holder for Info.HeldBy: its URL, else its process.
func heldBy(h store.Holder) string {
	if h.URL != "" {
		return h.URL
	}
	return h.String()
}

// takeOver takes the sessions whose holder's lease ended unrenewed, or whose holder
// died on this host: it claims their leases, skipping any another daemon is claiming at
// the same moment (store.Store.ClaimEnded), so that daemons looking at once neither
// wait for one another nor take a session twice. For each, it records the cells the
// holder left running as failed and, where the daemon runs an agent, opens the session
// so that its agent takes the inputs and timers waiting for it, as it opens every open
// session no daemon holds.
func (d *Daemon) takeOver(ctx context.Context) {
	leases, err := d.store.ClaimEnded(ctx, store.SessionLeaseKey(""))
	if err != nil {
		d.log.Warn("looking for sessions to take over", "err", err)
		return
	}
	for _, l := range leases {
		name := strings.TrimPrefix(l.Key(), store.SessionLeaseKey(""))
		d.log.Info("taking over a session whose holder's lease ended", "session", name, "holder", l.TookOver.String())
		if err := d.takeOverSession(ctx, name, l); err != nil && !errors.Is(err, ErrHeldElsewhere) {
			d.log.Warn("taking over a session", "session", name, "err", err)
		}
	}
	// An open session no daemon holds — its daemon stopped, or lost the record for a
	// while — has an agent whose inputs and timers wait for whoever opens it.
	d.WakeAgents(ctx)
}

// takeOverSession closes, under lease, the cells session name's last holder left
// running, gives the lease up, and opens the session where the daemon runs an agent.
func (d *Daemon) takeOverSession(ctx context.Context, name string, lease *store.Lease) error {
	sess, err := d.store.SessionByName(ctx, name)
	if err != nil {
		return errors.Join(err, lease.Release(ctx))
	}
	if err := d.endAbandoned(ctx, name, sess.ID, lease); err != nil || !d.opts.Agent.HasAgent() {
		return err
	}
	s, err := d.Session(name)
	if err != nil || s.elsewhere != nil || s.stopped() {
		return err // stopped, or another daemon took it since
	}
	return s.Open(ctx)
}

// watchLeases renews nothing itself (the store does) but takes over the sessions of
// daemons whose leases end, every half term, until the daemon stops.
func (d *Daemon) watchLeases() {
	defer close(d.watched)
	tick := time.NewTicker(d.opts.LeaseTTL / 2)
	defer tick.Stop()
	for {
		select {
		case <-d.runCtx.Done():
			return
		case <-tick.C:
		}
		d.takeOver(d.runCtx)
	}
}

// leaseLost is told of a lease the daemon held that another took over, its renewals
// having come too late: a session's runtime is closed, and the session left to the
// daemon that holds it now.
func (d *Daemon) leaseLost(key string) {
	name, ok := strings.CutPrefix(key, "session:")
	if !ok {
		d.log.Error("the daemon's lease was taken over by another daemon", "lease", key)
		return
	}
	d.mu.Lock()
	s := d.sessions[name]
	d.mu.Unlock()
	d.log.Error("a session's lease was taken over by another daemon: closing its runtime here", "session", name)
	if s == nil {
		return
	}
	d.unlist(s)
	go func() {
		if err := s.shutdown(); err != nil {
			d.log.Warn("closing the runtime of a session another daemon took", "session", name, "err", err)
		}
	}()
}

// daemonLeaseKey is the key of the daemon's own lease: on a record of one data
// directory, DaemonLeaseKey; on a shared record, one per host and data directory.
func (d *Daemon) daemonLeaseKey() string {
	if !d.shared() {
		return DaemonLeaseKey
	}
	host, _ := os.Hostname()
	return DaemonLeaseKey + ":" + host + ":" + d.opts.Dir
}

// Advertise makes url where the daemon's leases say it answers: the URL a client of
// another daemon is sent to for a session this one holds.
func (d *Daemon) Advertise(ctx context.Context, url string) error {
	if !d.shared() {
		return nil
	}
	return d.store.AdvertiseURL(ctx, url)
}
