package api

import (
	"fmt"
	"net/http"

	"github.com/kilnrt/kiln/internal/store"
)

// workItems is the body of GET /v1/maintenance.
type workItems struct {
	Items []store.WorkItem `json:"items"`
}

// listWorkItems answers GET /v1/maintenance[?state=open|closed].
func (a *api) listWorkItems(w http.ResponseWriter, r *http.Request) {
	state := r.URL.Query().Get("state")
	if state != "" && state != store.ItemOpen && state != store.ItemClosed {
		writeProblem(w, problem(http.StatusBadRequest, CodeInvalid, fmt.Sprintf("state %q is not open or closed", state)))
		return
	}
	items, err := a.d.Store().WorkItems(r.Context(), state)
	if err != nil {
		a.fail(w, err)
		return
	}
	if items == nil {
		items = []store.WorkItem{}
	}
	writeJSON(w, http.StatusOK, workItems{Items: items})
}

// orientations is the body of GET /v1/orientation.
type orientations struct {
	Current []store.Adoption `json:"current"` // the newest adoption of each scope and target
	History []store.Adoption `json:"history"` // every adoption, oldest first
}

// orientation answers GET /v1/orientation.
func (a *api) orientation(w http.ResponseWriter, r *http.Request) {
	all, err := a.d.Store().Adoptions(r.Context())
	if err != nil {
		a.fail(w, err)
		return
	}
	body := orientations{Current: []store.Adoption{}, History: all}
	if body.History == nil {
		body.History = []store.Adoption{}
	}
	newest := map[[2]any]int{}
	for i, ad := range all {
		newest[[2]any{ad.Scope.SessionID, ad.Target}] = i
	}
	for i, ad := range all {
		if newest[[2]any{ad.Scope.SessionID, ad.Target}] == i {
			body.Current = append(body.Current, ad)
		}
	}
	writeJSON(w, http.StatusOK, body)
}
