package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/internal/admission"
	"github.com/kilnrt/kiln/internal/serve"
)

// ProblemType is the prefix of a problem's type; the code follows it.
const ProblemType = "urn:kiln:problem:"

// Problem codes: each names one kind of failure, stable across versions.
const (
	CodeMalformedJSON  = "malformed_json"    // 400: the body is not JSON
	CodeUnknownField   = "unknown_field"     // 400: the body has a member the request does not define
	CodeInvalid        = "invalid_request"   // 400: a member is missing, of the wrong type, or out of range
	CodeUnauthorized   = "unauthorized"      // 401: no bearer token, or the wrong one
	CodeHost           = "misdirected"       // 421: a Host that is not the daemon's
	CodeNotFound       = "not_found"         // 404: no such route
	CodeNoSession      = "session_not_found" // 404
	CodeNoExecution    = "execution_not_found"
	CodeNoDisplay      = "display_not_found"  // 404: the execution has no display item of that index
	CodeMethod         = "method_not_allowed" // 405
	CodeBusy           = "busy"               // 409: a cell is running in the session
	CodeExists         = "session_exists"     // 409: the session is open
	CodeSettingsDiffer = "settings_differ"    // 409: the session is open with other settings, named in differences
	CodeNotRunning     = "not_running"        // 409: the execution has ended
	CodeNoAgent        = "no_agent"           // a turn cancelled on a session that runs no agent
	CodeNotHeld        = "not_held"           // 409: a decision for a cell not held for one
	CodeNotResumable   = "not_resumable"      // 409: the last turn did not end host_died or overflow
	CodeNothingToFold  = "nothing_to_fold"    // 409: the agent's conversation since the last fold is empty
	CodeFoldFailed     = "fold_failed"        // 502: the fold's model call failed or its summary did not hold
	CodeKeyReused      = "idempotency_key_reused"
	CodeStopped        = "session_stopped"  // 410
	CodeTooLarge       = "body_too_large"   // 413
	CodeMediaType      = "unsupported_type" // 415: the body is not application/json
	CodeUnavailable    = "unavailable"      // 503: the daemon is stopping
	CodeInternal       = "internal"         // 500
	CodeFileNotFound   = "file_not_found"   // 404
	CodeFileRefused    = "file_refused"     // 403: a path out of the session's directory, or not a regular file
	CodeProgramInvalid = "program_invalid"  // 400: a program the runner refuses
	CodeTooMany        = "too_many"         // 429: the daemon holds its most open sessions, streams or programs
	CodeCannotApply    = "cannot_apply"     // 422: a sandbox profile or limit the host cannot give
	// CodeHeldElsewhere (409) is a write to a session another daemon on the shared
	// record holds; the problem's holder is that daemon's URL.
	CodeHeldElsewhere = "held_elsewhere"
)

// Problem is an RFC 9457 problem detail, with kiln's stable code.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	Code   string `json:"code"`
	// Holder is, for CodeHeldElsewhere, the URL of the daemon that holds the session.
	Holder string `json:"holder,omitempty"`
	// Differences are, for CodeSettingsDiffer, the settings asked otherwise than held.
	Differences []serve.Difference `json:"differences,omitempty"`
}

// Error makes a Problem an error, for a client that received one.
func (p *Problem) Error() string {
	if p.Detail == "" {
		return fmt.Sprintf("%s (%d %s)", p.Title, p.Status, p.Code)
	}
	return fmt.Sprintf("%s: %s (%d %s)", p.Title, p.Detail, p.Status, p.Code)
}

// problem builds the problem of code and status.
func problem(status int, code, detail string) *Problem {
	return &Problem{Type: ProblemType + code, Title: http.StatusText(status), Status: status, Detail: detail, Code: code}
}

// writeProblem writes p as the response.
func writeProblem(w http.ResponseWriter, p *Problem) {
	data, _ := json.Marshal(p, json.Deterministic(true))
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	w.Write(append(data, '\n'))
}

// problemOf maps an error of the daemon to its problem.
func problemOf(err error) *Problem {
	var p *Problem
	var held *serve.HeldElsewhereError
	var differ *serve.SettingsError
	switch {
	case errors.As(err, &p):
		return p
	case errors.Is(err, serve.ErrNoSession):
		return problem(http.StatusNotFound, CodeNoSession, err.Error())
	case errors.Is(err, serve.ErrNoCell):
		return problem(http.StatusNotFound, CodeNoExecution, err.Error())
	case errors.Is(err, serve.ErrNoDisplay):
		return problem(http.StatusNotFound, CodeNoDisplay, err.Error())
	case errors.Is(err, serve.ErrBusy):
		return problem(http.StatusConflict, CodeBusy, err.Error())
	case errors.As(err, &held):
		p := problem(http.StatusConflict, CodeHeldElsewhere, err.Error())
		p.Holder = held.Holder.URL
		return p
	case errors.As(err, &differ):
		p := problem(http.StatusConflict, CodeSettingsDiffer, differ.Detail())
		p.Differences = differ.Differences
		return p
	case errors.Is(err, serve.ErrExists):
		return problem(http.StatusConflict, CodeExists, err.Error())
	case errors.Is(err, serve.ErrNotResumable):
		return problem(http.StatusConflict, CodeNotResumable, err.Error())
	case errors.Is(err, serve.ErrNothingToFold):
		return problem(http.StatusConflict, CodeNothingToFold, err.Error())
	case errors.Is(err, serve.ErrFoldFailed):
		return problem(http.StatusBadGateway, CodeFoldFailed, err.Error())
	case errors.Is(err, serve.ErrNotHeld):
		return problem(http.StatusConflict, CodeNotHeld, err.Error())
	case errors.Is(err, serve.ErrNoAgent):
		return problem(http.StatusConflict, CodeNoAgent, err.Error())
	case errors.Is(err, serve.ErrNotRunning):
		return problem(http.StatusConflict, CodeNotRunning, err.Error())
	case errors.Is(err, serve.ErrKeyReused):
		return problem(http.StatusConflict, CodeKeyReused, err.Error())
	case errors.Is(err, serve.ErrStopped):
		return problem(http.StatusGone, CodeStopped, err.Error())
	case errors.Is(err, serve.ErrNoFile):
		return problem(http.StatusNotFound, CodeFileNotFound, err.Error())
	case errors.Is(err, serve.ErrFileTooBig):
		return problem(http.StatusRequestEntityTooLarge, CodeTooLarge, err.Error())
	case errors.Is(err, serve.ErrFileRefused):
		return problem(http.StatusForbidden, CodeFileRefused, err.Error())
	case errors.Is(err, serve.ErrCannotApply):
		return problem(http.StatusUnprocessableEntity, CodeCannotApply, err.Error())
	case errors.Is(err, serve.ErrInvalid):
		return problem(http.StatusBadRequest, CodeInvalid, err.Error())
	case errors.Is(err, serve.ErrTooMany), errors.Is(err, admission.ErrNoMemory), errors.Is(err, ErrTooManyPrograms):
		return problem(http.StatusTooManyRequests, CodeTooMany, err.Error())
	case errors.Is(err, serve.ErrClosed):
		return problem(http.StatusServiceUnavailable, CodeUnavailable, err.Error())
	case errors.Is(err, context.Canceled):
		return problem(http.StatusServiceUnavailable, CodeUnavailable, err.Error())
	}
	return problem(http.StatusInternalServerError, CodeInternal, err.Error())
}
