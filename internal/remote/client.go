package remote

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/wire"
)

// Bounds on what a remote daemon may cost the host.
const (
	// MaxResponseBytes bounds one answer of a remote daemon: what is left of a reply
	// frame. A longer answer is refused after that many bytes, unread past them.
	MaxResponseBytes = wire.MaxFrameSize
	// MaxDetailBytes bounds the remote's own words quoted in an error.
	MaxDetailBytes = 4 << 10
	// DialTimeout bounds reaching a target: a connection, a TLS handshake, a command's
	// start.
	DialTimeout = 10 * time.Second
	// Slack is how long past the wait it asked for a request may take before the remote
	// counts as stalled.
	Slack = 30 * time.Second
	// IdleTimeout closes a connection (and ends its command) idle this long.
	IdleTimeout = 30 * time.Second
)

// Target kinds.
const (
	KindKiln = "kiln" // a kiln daemon's HTTP API, over https:// or unix://
	KindExec = "exec" // a command whose standard input and output carry the API
)

// Target is a remote daemon the host reaches, as kiln.toml names it.
type Target struct {
	Name string
	Kind string // KindKiln or KindExec
	// URL is https://host:port or unix:///path/kiln.sock (KindKiln).
	URL string
	// TokenEnv names the environment variable that holds the bearer token.
	TokenEnv string
	// CAFile is a PEM file of the certificates that may sign the target's (a private
	// CA, or a daemon's self-signed certificate); empty trusts the system's roots.
	CAFile string
	// Command is the argv of a KindExec target, e.g. ssh host kiln serve --stdio.
	Command []string
}

// client speaks a target's HTTP API, every answer read through MaxResponseBytes.
type client struct {
	target Target
	slack  time.Duration // Slack, or a test's
	http   *http.Client
	base   string
	token  func() (string, error)
}

// newClient is a client of t, or why t cannot be reached as configured; slack 0 is
// Slack.
func newClient(t Target, getenv func(string) string, slack time.Duration) (*client, error) {
	tr := &http.Transport{TLSHandshakeTimeout: DialTimeout, IdleConnTimeout: IdleTimeout, MaxIdleConnsPerHost: 4,
		DisableCompression: true, Proxy: nil}
	if slack <= 0 {
		slack = Slack
	}
	c := &client{target: t, slack: slack, http: &http.Client{Transport: tr, CheckRedirect: noRedirects}}
	c.token = func() (string, error) {
		if t.TokenEnv == "" {
			return "", nil
		}
		tok := strings.TrimSpace(getenv(t.TokenEnv))
		if tok == "" {
			return "", &Error{Code: CodeUnauthorized, Message: fmt.Sprintf("target %s: the environment variable %s, which holds its token, is empty", t.Name, t.TokenEnv)}
		}
		return tok, nil
	}
	switch t.Kind {
	case KindExec:
		if len(t.Command) == 0 {
			return nil, fmt.Errorf("remote: target %s: an exec target names its command", t.Name)
		}
		c.base = "http://kiln"
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) { return dialCommand(ctx, t.Command) }
		return c, nil
	case KindKiln:
	default:
		return nil, fmt.Errorf("remote: target %s: kind %q is not kiln or exec", t.Name, t.Kind)
	}
	u, err := url.Parse(t.URL)
	if err != nil {
		return nil, fmt.Errorf("remote: target %s: url: %w", t.Name, err)
	}
	switch u.Scheme {
	case "unix":
		if u.Path == "" {
			return nil, fmt.Errorf("remote: target %s: a unix url names the socket's path, unix:///path/kiln.sock", t.Name)
		}
		sock := u.Path
		c.base = "http://kiln"
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{Timeout: DialTimeout}).DialContext(ctx, "unix", sock)
		}
	case "https":
		if u.Host == "" {
			return nil, fmt.Errorf("remote: target %s: an https url names its host, https://host:port", t.Name)
		}
		conf := &tls.Config{MinVersion: tls.VersionTLS12}
		if t.CAFile != "" {
			pem, err := os.ReadFile(t.CAFile)
			if err != nil {
				return nil, fmt.Errorf("remote: target %s: ca_file: %w", t.Name, err)
			}
			conf.RootCAs = x509.NewCertPool()
			if !conf.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("remote: target %s: ca_file %s holds no PEM certificate", t.Name, t.CAFile)
			}
		}
		tr.TLSClientConfig = conf
		tr.DialContext = (&net.Dialer{Timeout: DialTimeout}).DialContext
		c.base = "https://" + u.Host
	default:
		return nil, fmt.Errorf("remote: target %s: url %q is not https://host:port or unix:///path (a token never crosses a network in clear text)", t.Name, t.URL)
	}
	return c, nil
}

func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// close ends the client's idle connections, and with them their commands.
func (c *client) close() { c.http.CloseIdleConnections() }

// Problem is a remote daemon's refusal: its HTTP status, stable code and detail.
type Problem struct {
	Status int    `json:"status"`
	Code   string `json:"code"`
	Detail string `json:"detail"`
}

func (p *Problem) Error() string {
	return fmt.Sprintf("remote: the remote refused: %s (%d %s)", p.Detail, p.Status, p.Code)
}

// do sends method path with body (JSON unless nil), waiting at most wait and Slack
// beyond it, and decodes a 2xx answer into out; a refusal is a *Problem, every other
// failure an *Error.
func (c *client) do(ctx context.Context, method, path string, body any, wait time.Duration, out any) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, wait+c.slack)
	defer cancel()
	var r io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return 0, fmt.Errorf("remote: %w", err)
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, r)
	if err != nil {
		return 0, fmt.Errorf("remote: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	tok, err := c.token()
	if err != nil {
		return 0, err
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, c.failure(ctx, err, wait)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
	if err != nil {
		return resp.StatusCode, c.failure(ctx, err, wait)
	}
	return resp.StatusCode, c.decode(method+" "+path, resp.StatusCode, data, out)
}

// decode reads data, the answer of status to what (method and path), into out: a
// refusal is a *Problem, an answer over MaxResponseBytes or not the API's JSON an
// *Error.
func (c *client) decode(what string, status int, data []byte, out any) error {
	name := c.target.Name
	switch {
	case len(data) > MaxResponseBytes:
		return &Error{Code: CodeRemoteError, Message: fmt.Sprintf("target %s answered %s with over %d bytes; the rest was not read",
			name, what, MaxResponseBytes)}
	case status == http.StatusUnauthorized:
		return &Error{Code: CodeUnauthorized, Message: fmt.Sprintf("target %s refused the token of %s: %s", name, c.tokenSource(), detail(data))}
	case status >= 400:
		p := &Problem{Status: status}
		if json.Unmarshal(data, p, json.RejectUnknownMembers(false)) != nil || p.Code == "" {
			return &Error{Code: CodeRemoteError, Message: fmt.Sprintf("target %s answered %s with status %d and no problem: %s",
				name, what, status, detail(data))}
		}
		p.Detail = clip(p.Detail)
		return p
	case status/100 != 2:
		return &Error{Code: CodeRemoteError, Message: fmt.Sprintf("target %s answered %s with status %d", name, what, status)}
	case out != nil:
		if err := json.Unmarshal(data, out, json.RejectUnknownMembers(false)); err != nil {
			return &Error{Code: CodeRemoteError, Message: fmt.Sprintf("target %s answered %s with what is not the API's JSON: %v",
				name, what, err)}
		}
	}
	return nil
}

// tokenSource says where the token came from, for an error.
func (c *client) tokenSource() string {
	if c.target.TokenEnv == "" {
		return "no token_env (none sent)"
	}
	return "$" + c.target.TokenEnv
}

// failure classifies an error of reaching the target or reading its answer.
func (c *client) failure(ctx context.Context, err error, wait time.Duration) error {
	name := c.target.Name
	var certErr *tls.CertificateVerificationError
	var unknownCA x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invalid x509.CertificateInvalidError
	var recordErr tls.RecordHeaderError
	var alert tls.AlertError
	var cmdErr *commandError
	switch {
	case errors.As(err, &certErr), errors.As(err, &unknownCA), errors.As(err, &hostErr), errors.As(err, &invalid):
		return &Error{Code: CodeTLSFailed, Message: fmt.Sprintf("target %s: its certificate is not one to trust: %v", name, err)}
	case errors.As(err, &recordErr), errors.As(err, &alert), strings.Contains(err.Error(), "HTTP response to HTTPS client"):
		return &Error{Code: CodeTLSFailed, Message: fmt.Sprintf("target %s: no TLS session: %v", name, err)}
	case errors.As(err, &cmdErr):
		return &Error{Code: CodeTargetUnreachable, Message: fmt.Sprintf("target %s: %v", name, err)}
	case isDial(err):
		return &Error{Code: CodeTargetUnreachable, Message: fmt.Sprintf("target %s cannot be reached: %v", name, err)}
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return &Error{Code: CodeRemoteError, Message: fmt.Sprintf(
			"target %s did not answer within %s (the wait asked, and %s more): it is stalled or too slow", name, wait+c.slack, c.slack)}
	case ctx.Err() != nil:
		return &Error{Code: CodeRemoteError, Message: fmt.Sprintf("target %s: the request ended with the cell: %v", name, ctx.Err())}
	}
	return &Error{Code: CodeTargetUnreachable, Message: fmt.Sprintf("target %s: the connection failed: %v", name, err)}
}

// isDial says err is a failure to connect, before any request was sent.
func isDial(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns)
}

// detail is a remote's body quoted in an error: clipped, valid UTF-8.
func detail(data []byte) string { return clip(strings.ToValidUTF8(string(data), "\uFFFD")) }

// clip bounds s to MaxDetailBytes, at a rune's start.
func clip(s string) string {
	if len(s) <= MaxDetailBytes {
		return s
	}
	n := MaxDetailBytes
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}

// record is an execution as a remote daemon answers it.
type record struct {
	ID             string         `json:"id"`
	Cell           string         `json:"cell"`
	Generation     string         `json:"generation"`
	Status         string         `json:"status"`
	Output         jsontext.Value `json:"output,omitzero"`
	TruncatedBytes int64          `json:"truncated_bytes"`
	Error          *string        `json:"error"`
	Exception      jsontext.Value `json:"exception,omitzero"`
	NamespaceLost  bool           `json:"namespace_lost"`
	Limit          string         `json:"limit,omitempty"`
	StartedAt      *time.Time     `json:"started_at"`
	EndedAt        *time.Time     `json:"ended_at"`
}

// running says the remote has not recorded the execution's end.
func (r record) running() bool { return r.Status == "running" }

// session is a remote session as a remote daemon answers it.
type session struct {
	ID         string `json:"id"`
	State      string `json:"state"`
	Generation string `json:"generation"`
	Running    string `json:"running"`
}
