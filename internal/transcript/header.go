// Package transcript keeps what a model reads of a session: the instruction header it
// pinned, the revisions of that header observed since, and the framing of inputs, cells
// and tool results. Records are durable and replayed; rendering derives every frame from
// them on each assembly, so no frame is ever stored.
//
// The header follows three rules, in order: with no pin yet, the current instruction text
// is pinned (session_start); a changed text leaves the pinned bytes alone and is observed
// as a header_revision at the point it was noticed, attributed to the execution that made
// it or else to the host; a fold moves the pin (fold, or fold_covered_revision when the
// fold covers the observations the head relied on). A revision carries verified line
// patches against the newest text the transcript can reconstruct, or the whole text when
// the patches do not reproduce it exactly.
package transcript

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kilnrt/kiln/internal/linediff"
)

// Record types, pin reasons, change forms and actor origins, as the records spell them.
const (
	TypePin      = "header_pin"
	TypeRevision = "header_revision"

	ReasonSessionStart        = "session_start"
	ReasonFold                = "fold"
	ReasonFoldCoveredRevision = "fold_covered_revision"

	FormDiff = "diff"
	FormFull = "full"

	OriginSession = "session"
	OriginHost    = "host"

	// JoinedSource names the joined text when a revision's patches cannot go source by
	// source: the two source sets do not line up by name, or the base's parts are unknown.
	JoinedSource = "instructions"
)

// Source is one named part of the instruction text.
type Source struct {
	Name   string `json:"name"`
	Digest string `json:"digest"`
	Text   string `json:"text"`
}

// NewSource is the source name holding text.
func NewSource(name, text string) Source {
	return Source{Name: name, Digest: Digest(text), Text: text}
}

// Digest is the hex SHA-256 of text.
func Digest(text string) string {
	sum := sha256.Sum256([]byte(text))
	return hex.EncodeToString(sum[:])
}

// Joined is the instruction text of sources: their texts in order, joined by newlines.
func Joined(sources []Source) string {
	texts := make([]string, len(sources))
	for i, s := range sources {
		texts[i] = s.Text
	}
	return strings.Join(texts, "\n")
}

// Pin is a header_pin record: the text a transcript runs under from here on.
//
// FrontierSeq, kiln's addition, is where a fold's pin takes over: the records before it
// are covered by the fold and no longer rendered, those from it on still are, even the
// ones recorded before the pin itself. A session_start pin has none (zero): it takes
// over where it is recorded.
type Pin struct {
	Type        string `json:"type"`
	Digest      string `json:"digest"`
	Text        string `json:"text"`
	Reason      string `json:"reason"`
	PinnedAtMs  int64  `json:"pinned_at_ms"`
	FrontierSeq int64  `json:"frontier_seq,omitzero"`
}

// Change is how a revision reaches its text: verified patches from the base, or the
// whole text.
type Change struct {
	Form       string           `json:"form"`
	BaseDigest string           `json:"base_digest,omitempty"`
	Patches    []linediff.Patch `json:"patches,omitempty"`
	Text       *string          `json:"text,omitempty"`
}

// Actor is what is known of who changed the text: the session's execution, or the host
// when nothing in the transcript accounts for the change. No field is invented.
type Actor struct {
	Origin      string `json:"origin"`
	ExecutionID string `json:"execution_id,omitzero"`
	Step        int    `json:"step,omitzero"` // the agent loop's step, when one is known
	Path        string `json:"path,omitzero"`
	Reason      string `json:"reason,omitzero"`
}

// Revision is a header_revision record: an observation that the instruction text is now
// Digest's, reached by Change.
type Revision struct {
	Type         string   `json:"type"`
	Digest       string   `json:"digest"`
	Change       Change   `json:"change"`
	Sources      []Source `json:"sources"`
	Actor        Actor    `json:"actor"`
	ObservedAtMs int64    `json:"observed_at_ms"`
}

// Head is the newest instruction text a transcript reconstructs, with its sources when
// they are known (nil after a pin, which records only the joined text).
type Head struct {
	Text    string
	Digest  string
	Sources []Source
}

// NewPin pins the text of sources for reason.
func NewPin(sources []Source, reason string, at time.Time) Pin {
	text := Joined(sources)
	return Pin{Type: TypePin, Digest: Digest(text), Text: text, Reason: reason, PinnedAtMs: at.UnixMilli()}
}

// Observe applies the first two rules: with no head (nothing pinned) it returns the
// session_start pin of now; with a head whose text differs from now's, or whose known
// sources are named otherwise (a rename), it returns the revision that reaches now, by
// actor; otherwise nil.
func Observe(head *Head, now []Source, actor Actor, at time.Time) any {
	if head == nil {
		return NewPin(now, ReasonSessionStart, at)
	}
	if Digest(Joined(now)) == head.Digest && (head.Sources == nil || lineUp(head.Sources, now)) {
		return nil
	}
	rev := NewRevision(*head, now, actor, at)
	return &rev
}

// Restart is the revision that makes a chain whole again after a link that does not
// reconstruct: the whole text of now, which needs no base.
func Restart(now []Source, actor Actor, at time.Time) Revision {
	text := Joined(now)
	return Revision{Type: TypeRevision, Digest: Digest(text), Change: Change{Form: FormFull, Text: &text},
		Sources: slices.Clone(now), Actor: actor, ObservedAtMs: at.UnixMilli()}
}

// NewRevision is the observation that takes head to the text of sources: patches per
// source when both source sets line up by name, otherwise over the joined texts; and the
// whole text when the patches do not reproduce it.
func NewRevision(head Head, sources []Source, actor Actor, at time.Time) Revision {
	text := Joined(sources)
	rev := Revision{Type: TypeRevision, Digest: Digest(text), Sources: slices.Clone(sources),
		Actor: actor, ObservedAtMs: at.UnixMilli()}
	var patches []linediff.Patch
	if lineUp(head.Sources, sources) {
		for i, s := range sources {
			patches = append(patches, linediff.Diff(s.Name, head.Sources[i].Text, s.Text)...)
		}
	} else {
		patches = linediff.Diff(JoinedSource, head.Text, text)
	}
	rev.Change = Change{Form: FormDiff, BaseDigest: head.Digest, Patches: patches}
	return verified(head, rev, text)
}

// verified is rev if its change reconstructs text from head exactly, else rev carrying
// text whole: a reader never reconstructs a text nobody wrote.
func verified(head Head, rev Revision, text string) Revision {
	if next, err := advance(head, rev); err != nil || next.Text != text {
		rev.Change = Change{Form: FormFull, Text: &text}
	}
	return rev
}

// lineUp reports whether two source sets have the same names in the same order.
func lineUp(base, next []Source) bool {
	if base == nil || len(base) != len(next) {
		return false
	}
	for i := range base {
		if base[i].Name != next[i].Name {
			return false
		}
	}
	return true
}

// HeadOf is the head a pin sets.
func HeadOf(p Pin) Head { return Head{Text: p.Text, Digest: Digest(p.Text)} }

// advance applies rev to head and returns the text it reconstructs, checked against the
// revision's digest, with the sources the revision records once they join to that text.
func advance(head Head, rev Revision) (Head, error) {
	var text string
	switch rev.Change.Form {
	case FormFull:
		if rev.Change.Text == nil {
			return Head{}, fmt.Errorf("a full change without its text")
		}
		text = *rev.Change.Text
	case FormDiff:
		if rev.Change.BaseDigest != head.Digest {
			return Head{}, fmt.Errorf("its base %s is not the text reached so far, %s", short(rev.Change.BaseDigest), short(head.Digest))
		}
		var err error
		if text, err = applyPatches(head, rev); err != nil {
			return Head{}, err
		}
	default:
		return Head{}, fmt.Errorf("unknown change form %q", rev.Change.Form)
	}
	if d := Digest(text); d != rev.Digest {
		return Head{}, fmt.Errorf("it reconstructs a text of digest %s, not its own %s", short(d), short(rev.Digest))
	}
	next := Head{Text: text, Digest: rev.Digest}
	if Joined(rev.Sources) == text {
		next.Sources = rev.Sources
	}
	return next, nil
}

// applyPatches applies a diff change: over the joined text, or source by source.
func applyPatches(head Head, rev Revision) (string, error) {
	if len(rev.Change.Patches) == 0 {
		return head.Text, nil // the sources were renamed, the text kept
	}
	bySource := map[string][]linediff.Patch{}
	for _, p := range rev.Change.Patches {
		bySource[p.Source] = append(bySource[p.Source], p)
	}
	if _, joined := bySource[JoinedSource]; joined || head.Sources == nil {
		if len(bySource) > 1 || (len(bySource) == 1 && !joined) {
			return "", fmt.Errorf("patches name sources the base does not have")
		}
		return linediff.Apply(head.Text, bySource[JoinedSource])
	}
	if !lineUp(head.Sources, rev.Sources) {
		return "", fmt.Errorf("per-source patches whose sources do not line up with the base's")
	}
	sources := slices.Clone(head.Sources)
	for i, s := range sources {
		text, err := linediff.Apply(s.Text, bySource[s.Name])
		if err != nil {
			return "", fmt.Errorf("source %s: %w", s.Name, err)
		}
		sources[i] = NewSource(s.Name, text)
		delete(bySource, s.Name)
	}
	if len(bySource) > 0 {
		return "", fmt.Errorf("patches name sources the base does not have")
	}
	return Joined(sources), nil
}

func short(digest string) string {
	if len(digest) > 12 {
		return digest[:12]
	}
	return digest
}

// Link is one header record of a transcript, in sequence: a pin or a revision.
type Link struct {
	Seq      int64
	Pin      *Pin
	Revision *Revision
}

// Resolution is the text a chain of links reconstructs.
type Resolution struct {
	Head     *Head  // nil when nothing is pinned, or the pin does not check
	Complete bool   // the chain is whole: every link since it last started reconstructs
	StopSeq  int64  // the link it stops at, when not Complete
	Problem  string // why that link does not reconstruct
	// Broken are all the links that do not reconstruct, by sequence, and why: a
	// renderer shows them as such, never as what they claim.
	Broken map[int64]string
}

// Resolve replays links, in order, to the current text. A pin starts the chain afresh;
// a link that does not reconstruct its text stops the chain at the last text that did.
// A stopped chain starts again at a later pin, or at a revision carrying the whole text
// (see Restart); the links in between are broken too, as they follow a broken one.
func Resolve(links []Link) Resolution {
	res := Resolution{Complete: true}
	broken := map[int64]string{}
	for _, l := range links {
		switch {
		case l.Pin != nil:
			if Digest(l.Pin.Text) != l.Pin.Digest {
				res = stop(Resolution{}, l.Seq, "the pin's text does not have its digest")
				broken[l.Seq] = res.Problem
				continue
			}
			h := HeadOf(*l.Pin)
			res = Resolution{Head: &h, Complete: true}
		case l.Revision != nil && !res.Complete:
			if l.Revision.Change.Form == FormFull {
				if next, err := advance(Head{}, *l.Revision); err == nil {
					res = Resolution{Head: &next, Complete: true}
					continue
				}
			}
			broken[l.Seq] = fmt.Sprintf("it follows record %d, which does not reconstruct", res.StopSeq)
		case l.Revision != nil:
			if res.Head == nil {
				res = stop(res, l.Seq, "a revision before any pin")
				broken[l.Seq] = res.Problem
				continue
			}
			next, err := advance(*res.Head, *l.Revision)
			if err != nil {
				res = stop(res, l.Seq, err.Error())
				broken[l.Seq] = res.Problem
				continue
			}
			res.Head = &next
		}
	}
	if len(broken) > 0 {
		res.Broken = broken
	}
	return res
}

func stop(res Resolution, seq int64, problem string) Resolution {
	res.Complete, res.StopSeq, res.Problem = false, seq, problem
	return res
}

// FoldReason is the reason of the pin a fold makes when it covers every link before
// frontier: fold_covered_revision when the head's text rests on a revision the fold
// covers, which could no longer be rendered; else fold.
func FoldReason(links []Link, frontier int64) string {
	if n := len(links); n > 0 && links[n-1].Revision != nil && links[n-1].Seq < frontier {
		return ReasonFoldCoveredRevision
	}
	return ReasonFold
}

// Fold is the pin a fold makes when it covers every record before frontier (a sequence
// number of the session's log): the current text of sources, pinned for FoldReason's
// reason, with FrontierSeq set to frontier. Appended anywhere after frontier, it hides
// from Render only what the fold covers: the records before frontier.
func Fold(links []Link, frontier int64, sources []Source, at time.Time) Pin {
	p := NewPin(sources, FoldReason(links, frontier), at)
	p.FrontierSeq = frontier
	return p
}
