package api

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// MaxBodyBytes bounds a request's JSON body: room for a cell of the protocol's largest
// source (262144 bytes) however its text is escaped.
const MaxBodyBytes = 2 << 20

// BodyReadTimeout bounds reading a request's body: a client that sends it slower is cut
// off, and its goroutine ends.
const BodyReadTimeout = time.Minute

// decode reads r's JSON body into v strictly: unknown members, duplicate names and
// invalid UTF-8 are refused, and so is a body over limit. An empty body leaves v as it
// is when empty is allowed.
func decode(w http.ResponseWriter, r *http.Request, v any, limit int64, empty bool) *Problem {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			return problem(http.StatusUnsupportedMediaType, CodeMediaType,
				fmt.Sprintf("the body must be application/json, not %q", ct))
		}
	}
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(BodyReadTimeout))
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	rc.SetReadDeadline(time.Time{})
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return problem(http.StatusRequestEntityTooLarge, CodeTooLarge,
			fmt.Sprintf("the body is over the limit of %d bytes", tooLarge.Limit))
	case err != nil:
		return problem(http.StatusBadRequest, CodeMalformedJSON, "reading the body: "+err.Error())
	case len(data) == 0 && empty:
		return nil
	case len(data) == 0:
		return problem(http.StatusBadRequest, CodeMalformedJSON, "the body is empty: a JSON object is required")
	}
	return decodeJSON(data, v)
}

// decodeJSON is decode's judgement of data.
func decodeJSON(data []byte, v any) *Problem {
	err := json.Unmarshal(data, v, json.RejectUnknownMembers(true))
	if err == nil {
		return nil
	}
	var syn *jsontext.SyntacticError
	var sem *json.SemanticError
	switch {
	case errors.As(err, &syn):
		return problem(http.StatusBadRequest, CodeMalformedJSON, err.Error())
	case errors.As(err, &sem) && errors.Is(sem.Err, json.ErrUnknownName):
		return problem(http.StatusBadRequest, CodeUnknownField,
			fmt.Sprintf("unknown member %q", sem.JSONPointer))
	case errors.As(err, &sem) && sem.ByteOffset == 0 && sem.JSONKind != '{' && sem.JSONKind != 0:
		return problem(http.StatusBadRequest, CodeInvalid, "the body must be a JSON object: "+err.Error())
	}
	return problem(http.StatusBadRequest, CodeInvalid, err.Error())
}
