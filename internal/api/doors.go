package api

import (
	"crypto/subtle"
	"net"
	"net/http"
	"strings"
)

// bearer lets through only requests that carry token, the scheme's name matched
// without regard to case (RFC 9110, section 11.1); an empty token lets none through.
func bearer(token string, next http.Handler) http.Handler {
	want := []byte(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		header := r.Header.Get("Authorization")
		scheme, got, _ := strings.Cut(header, " ")
		if len(want) == 0 || !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare([]byte(strings.TrimLeft(got, " ")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="kiln"`)
			detail := "a bearer token is required (kiln serve --print-token)"
			if header != "" {
				detail = "the bearer token is wrong"
			}
			writeProblem(w, problem(http.StatusUnauthorized, CodeUnauthorized, detail))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// hostCheck lets through only requests whose Host is a loopback name or address, or
// one of allow (matched without regard to case): a page that rebinds its own name to
// 127.0.0.1 in a browser reaches the listener under that name, and is refused.
func hostCheck(allow []string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hostAllowed(r.Host, allow) {
			writeProblem(w, problem(http.StatusMisdirectedRequest, CodeHost,
				"the Host "+quoteHost(r.Host)+" is not this daemon's: use a loopback address, or start kiln serve with --allow-host"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// hostAllowed reports whether host (with or without a port) is a loopback name or
// address, or one of allow.
func hostAllowed(host string, allow []string) bool {
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	}
	name = strings.TrimSuffix(strings.TrimPrefix(name, "["), "]")
	if strings.EqualFold(name, "localhost") {
		return true
	}
	if ip := net.ParseIP(name); ip != nil && ip.IsLoopback() {
		return true
	}
	for _, a := range allow {
		if strings.EqualFold(name, a) {
			return true
		}
	}
	return false
}

// quoteHost quotes host for a message, cut to a sane length.
func quoteHost(host string) string {
	const most = 100
	if len(host) > most {
		host = host[:most] + "…"
	}
	return `"` + strings.ToValidUTF8(host, "\uFFFD") + `"`
}
