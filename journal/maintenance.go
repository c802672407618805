package journal

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/kilnrt/kiln/internal/store"
)

// WorkItem is a durable work item an agent opened about itself (maintenance.originate):
// its purpose, reason, evidence refs and origin, and once assessed (maintenance.assess),
// the outcome and what the assessing session changed in between.
type WorkItem = store.WorkItem

// Adoption is an orientation text made current for a scope (orientation.adopt).
type Adoption = store.Adoption

// Candidate is an orientation text staged for adoption (orientation.stage).
type Candidate = store.Candidate

// ErrNoWorkItem is a work item the record does not have.
var ErrNoWorkItem = errors.New("kiln: no such work item")

// WorkItems are the data directory's work items, oldest first; only the open ones when
// open.
func (j *Journal) WorkItems(ctx context.Context, open bool) ([]WorkItem, error) {
	state := ""
	if open {
		state = store.ItemOpen
	}
	return j.st.WorkItems(ctx, state)
}

// WorkItem is work item id (w-<n>), or ErrNoWorkItem.
func (j *Journal) WorkItem(ctx context.Context, id string) (WorkItem, error) {
	num, ok := strings.CutPrefix(id, "w-")
	n, err := strconv.ParseInt(num, 10, 64)
	if !ok || err != nil || store.WorkItemID(n) != id {
		return WorkItem{}, fmt.Errorf("%w: %q is not a work item id, such as w-1", ErrNoWorkItem, id)
	}
	it, err := j.st.WorkItemByID(ctx, n)
	if errors.Is(err, store.ErrNotFound) {
		return WorkItem{}, fmt.Errorf("%w: %s in %s", ErrNoWorkItem, id, j.st.Path())
	}
	return it, err
}

// Adoptions are every orientation adoption of the data directory, oldest first: the
// newest of a scope is its current one.
func (j *Journal) Adoptions(ctx context.Context) ([]Adoption, error) { return j.st.Adoptions(ctx) }

// Candidates are every orientation candidate staged in the data directory, oldest first.
func (j *Journal) Candidates(ctx context.Context) ([]Candidate, error) { return j.st.Candidates(ctx) }

// FrontierSelection is a session's request for a new frontier (frontier.select): a fold
// at the end of its turn, pending until a fold installs it.
type FrontierSelection = store.FrontierSelection

// Scope is where an orientation text applies: every session (kind global), or one.
type Scope = store.Scope
