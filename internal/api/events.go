package api

import (
	"strings"

	"github.com/kilnrt/kiln/internal/serve"
	"github.com/kilnrt/kiln/internal/store"
)

// PublicEntry is e as clients are shown it: a record that names a cell names it by its
// execution id, <session>:c-N, which every surface takes back, and by the cell's own id
// as cell. A program's calls keep their run's id, p-N.
func PublicEntry(e store.Entry) store.Entry {
	switch r := e.Record.(type) {
	case store.Execution:
		e.Record = publicExecution{r, serve.ExecutionID(e.Session, r.CellID), r.CellID}
	case store.OutputChunk:
		e.Record = publicOutput{r, serve.ExecutionID(e.Session, r.CellID), r.CellID}
	case store.RequestRecord:
		if strings.HasPrefix(r.ExecutionID, "c-") {
			e.Record = publicRequest{r, serve.ExecutionID(e.Session, r.ExecutionID), r.ExecutionID}
		}
	case store.Wait:
		e.Record = publicWait{r, serve.ExecutionID(e.Session, r.ExecutionID), r.ExecutionID}
	}
	return e
}

// The records that name a cell, as PublicEntry shows them: the outer fields take the
// place of the record's own execution_id.
type (
	publicExecution struct {
		store.Execution
		ExecutionID string `json:"execution_id"`
		Cell        string `json:"cell"`
	}
	publicOutput struct {
		store.OutputChunk
		ExecutionID string `json:"execution_id"`
		Cell        string `json:"cell"`
	}
	publicRequest struct {
		store.RequestRecord
		ExecutionID string `json:"execution_id"`
		Cell        string `json:"cell"`
	}
	publicWait struct {
		store.Wait
		ExecutionID string `json:"execution_id"`
		Cell        string `json:"cell"`
	}
)
