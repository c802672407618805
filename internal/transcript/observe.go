package transcript

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/kilnrt/kiln/internal/host"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/wire"
)

// ObserverConfig says where an Observer reads the instruction text and records it.
type ObserverConfig struct {
	Store   *store.Store
	Session int64                    // the session whose header is kept
	Read    func() ([]Source, error) // the instruction sources as they are now
	// Paths are the files the file-backed sources are read from, by source name: a
	// revision names the one file whose change it records.
	Paths map[string]string
	// Explain, when set, says what is known of a source's current text that no file
	// holds (an adopted orientation), or "": a revision that changes that source adds it
	// to its actor's reason.
	Explain func(ctx context.Context, source string) string
	Logger  *slog.Logger // nil discards
}

// Observer keeps a session's header: it notices when the instruction text has changed
// and records each change once, as Observe's rules say. It attributes a change to an
// execution only when that execution's own recorded effect made it (see Around);
// anything else it reports as the host's, with what is known and no invented actor.
// After a header link that does not reconstruct, its next record carries the whole
// text (Restart), so that the chain is whole again from there.
type Observer struct {
	cfg ObserverConfig

	turn chan struct{} // held by the observation under way; it owns the fields below

	head    *Head    // the newest text the chain reconstructs
	whole   bool     // every link since the chain last started reconstructs
	stopSeq int64    // the link the chain stops at, when not whole
	problem string   // why it stops there
	seen    []Source // the sources as last read; nil before the first read
}

// NewObserver follows the header session's records already hold.
func NewObserver(ctx context.Context, cfg ObserverConfig) (*Observer, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	t, err := Load(ctx, cfg.Store, cfg.Session)
	if err != nil {
		return nil, err
	}
	res := Resolve(t.Links())
	return &Observer{cfg: cfg, turn: make(chan struct{}, 1), head: res.Head, whole: res.Complete,
		stopSeq: res.StopSeq, problem: res.Problem}, nil
}

// Observe reads the instruction text and records what changed since the newest text
// the transcript reconstructs, by actor: nothing when nothing changed, the first pin
// when nothing is pinned, otherwise one revision. The path of the one changed file is
// added to actor when it is known.
func (o *Observer) Observe(ctx context.Context, actor Actor) error {
	select {
	case o.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-o.turn }()
	now, err := o.cfg.Read()
	if err != nil {
		return fmt.Errorf("transcript: reading the instructions: %w", err)
	}
	if o.whole && o.head != nil && sameSources(o.seen, now) {
		// The last observation left the chain at the text of these very sources:
		// nothing changed, and the text need not be joined and hashed again.
		return nil
	}
	at := time.Now()
	var rec any
	if o.head != nil && !o.whole {
		actor.Reason += fmt.Sprintf("; the header chain stopped at record %d (%s): the whole text makes it whole again",
			o.stopSeq, o.problem)
		restart := Restart(now, actor, at)
		rec = &restart
	} else {
		rec = Observe(o.head, now, actor, at)
	}
	switch r := rec.(type) {
	case Pin:
		if _, err := o.cfg.Store.AppendPromptRecord(ctx, o.cfg.Session, r.Type, r.Digest, r); err != nil {
			return err
		}
		h := HeadOf(r)
		o.head, o.whole = &h, true
	case *Revision:
		changed := o.changed(now)
		if r.Actor.Path == "" && len(changed) == 1 {
			r.Actor.Path = o.cfg.Paths[changed[0]]
		}
		for _, name := range changed {
			if o.cfg.Explain == nil {
				break
			}
			if known := o.cfg.Explain(ctx, name); known != "" {
				r.Actor.Reason += "; " + known
			}
		}
		if _, err := o.cfg.Store.AppendPromptRecord(ctx, o.cfg.Session, r.Type, r.Digest, r); err != nil {
			return err
		}
		o.head, o.whole = &Head{Text: Joined(now), Digest: r.Digest, Sources: now}, true
	}
	o.seen = now
	return nil
}

// changed are the names of the sources that differ between the sources last known and
// now, nil when those are not known.
func (o *Observer) changed(now []Source) []string {
	before := o.seen
	if before == nil && o.head != nil {
		before = o.head.Sources
	}
	if before == nil {
		return nil
	}
	digests := map[string]string{}
	for _, s := range before {
		digests[s.Name] = s.Digest
	}
	var changed []string
	for _, s := range now {
		if d, ok := digests[s.Name]; !ok || d != s.Digest {
			changed = append(changed, s.Name)
		}
		delete(digests, s.Name)
	}
	for _, s := range before {
		if _, gone := digests[s.Name]; gone {
			changed = append(changed, s.Name)
		}
	}
	return changed
}

// Around is svc with the instruction text observed on both sides of each request: a
// change found before it is the host's, one found once its reply is recorded is the
// requesting execution's, made by that request. It is for the services whose effects
// can rewrite instruction sources, such as workspace.run.
func (o *Observer) Around(svc host.Service) host.Service {
	return host.ServiceFunc(func(ctx context.Context, req *host.Request) host.Outcome {
		o.observe(ctx, Actor{Origin: OriginHost,
			Reason: "noticed before " + req.Method + " request " + req.RequestID + " of execution " + req.ExecutionID})
		out := svc.Serve(ctx, req)
		committed := out.Committed
		out.Committed = func(reply wire.Reply) {
			if committed != nil {
				committed(reply)
			}
			o.observe(context.WithoutCancel(ctx), Actor{Origin: OriginSession, ExecutionID: req.ExecutionID,
				Reason: "made by " + req.Method + " request " + req.RequestID + " of execution " + req.ExecutionID})
		}
		return out
	})
}

// observe is Observe for a caller that carries on whatever happens: a failure is logged.
func (o *Observer) observe(ctx context.Context, actor Actor) {
	if err := o.Observe(ctx, actor); err != nil {
		o.cfg.Logger.Warn("observing the instruction text", "actor", actor.Reason, "err", err)
	}
}

// sameSources reports whether a and b are the same sources, by name and digest, in the
// same order.
func sameSources(a, b []Source) bool {
	return a != nil && slices.EqualFunc(a, b, func(x, y Source) bool {
		return x.Name == y.Name && x.Digest != "" && x.Digest == y.Digest
	})
}
