package api

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strings"
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
		mt, params, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			return problem(http.StatusUnsupportedMediaType, CodeMediaType,
				fmt.Sprintf("the body must be application/json, not %q", ct))
		}
		if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
			return problem(http.StatusUnsupportedMediaType, CodeMediaType,
				fmt.Sprintf("the body must be JSON in UTF-8, not charset %q", cs))
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
		return problem(http.StatusBadRequest, CodeInvalid, "the body must be a JSON object")
	case errors.As(err, &sem):
		return problem(http.StatusBadRequest, CodeInvalid, semanticDetail(sem))
	}
	return problem(http.StatusBadRequest, CodeInvalid, err.Error())
}

// semanticDetail says what was wrong with a member in JSON's terms: never Go's, whose
// types a client does not know.
func semanticDetail(sem *json.SemanticError) string {
	where := "the body"
	if sem.JSONPointer != "" {
		where = fmt.Sprintf("member %q", sem.JSONPointer)
	}
	want := "another value"
	if sem.GoType != nil {
		want = jsonKind(sem.GoType)
	}
	if sem.JSONKind == 0 {
		return fmt.Sprintf("%s: %s is wanted", where, want)
	}
	return fmt.Sprintf("%s: %s is wanted, not %s", where, want, sem.JSONKind)
}

// jsonKind names the JSON value a Go type decodes.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "another value"
}
