// Package daemon runs kiln's daemon (kiln serve): it holds a data directory, serves
// its sessions over HTTP on a Unix socket (and TCP with a bearer token), and over MCP,
// and runs their agents. Clients reach it with client.DialDaemon or kiln.ConnectDaemon.
package daemon

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln"
	"github.com/kilnrt/kiln/client"
	"github.com/kilnrt/kiln/internal/agentrun"
	"github.com/kilnrt/kiln/internal/api"
	"github.com/kilnrt/kiln/internal/certs"
	"github.com/kilnrt/kiln/internal/config"
	"github.com/kilnrt/kiln/internal/limits"
	"github.com/kilnrt/kiln/internal/mcpserver"
	"github.com/kilnrt/kiln/internal/peer"
	"github.com/kilnrt/kiln/internal/serve"
	"github.com/kilnrt/kiln/internal/session"
	"github.com/kilnrt/kiln/internal/store"
)

// Files of a daemon in its data directory.
const (
	SocketFile = client.SocketFile // the daemon's Unix socket, 0600
	TokenFile  = "serve.token"     // the bearer token TCP clients present, 0600
	// ConfigFile is the configuration of the sessions' agent: the model routes and the
	// agent's caps.
	ConfigFile = config.FileName
)

// maxSocketPath is the longest path a Unix socket may have on Linux (sun_path less its NUL).
const maxSocketPath = 107

// ShutdownGrace is how long a stopping daemon lets its HTTP answers drain: a client
// still being answered past it, one that reads nothing or sends a body it never
// finishes, is cut off. The cells do not wait for it: they are interrupted at once.
const ShutdownGrace = 2 * time.Second

// ErrRunning is a second daemon on a data directory one already holds.
var ErrRunning = serve.ErrLeased

// Options configure a daemon. The zero value serves the default data directory on
// its Unix socket.
type Options struct {
	DataDir     string        // the data directory; default as kiln's commands find it
	Listen      string        // a TCP address to serve as well, e.g. 127.0.0.1:8765; requires the token
	Workspace   string        // the daemon's workspace: its programs' directory; its skills/ are the sessions'; default the current directory
	Python      string        // the sessions' default interpreter; default "python3"
	IdleTimeout time.Duration // stop a session idle this long; 0 is an hour, negative never
	Heartbeat   time.Duration // between heartbeats of an idle event stream; default 15s
	Logger      *slog.Logger  // nil discards
	// Ready is told the daemon's addresses once it accepts connections.
	Ready func(Info)
	// Config is the configuration file of the sessions' agent; default <data>/kiln.toml,
	// which may be absent (no agent). A bad file fails Serve, naming file, line and key.
	Config string
	// Sandbox and Network confine every session's workers, commands and programs, as
	// WorkbenchOptions' do; the data directory, its socket and record are hidden.
	Sandbox, Network string
	// AllowHosts are the names, beside loopback ones, that a request to the TCP
	// listener may give as its Host.
	AllowHosts []string
	// TLSCert and TLSKey are the PEM files of the TCP listener's TLS; TLSSelfSigned
	// serves a pair generated into the data directory instead. A Listen address that is
	// not loopback is refused without TLS, unless Insecure.
	TLSCert, TLSKey string
	TLSSelfSigned   bool
	Insecure        bool
	// Store is the record, a postgres:// URL whose password PGPASSWORD gives; default
	// kiln.toml's store, else the data directory's SQLite file. A URL carrying a
	// password is refused.
	Store string
	// LeaseTTL is the term of the daemon's leases on a Store other daemons share (see
	// docs/postgres.md); default kiln.toml's lease_ttl, else serve.DefaultLeaseTTL. A
	// term is refused for the data directory's SQLite record.
	LeaseTTL time.Duration
	// WorkspaceRoot, when set, lets a client name a session's cwd inside it. Without
	// it each session runs in a directory of its own, <data>/sessions/<id>/work, and a
	// client's cwd is refused.
	WorkspaceRoot string
}

// Info is where a daemon listens.
type Info struct {
	Socket string // the Unix socket's path
	Listen string // the TCP address, "" when none
	// TLSCert is the TCP listener's certificate file, "" without TLS, and
	// TLSFingerprint its SHA-256.
	TLSCert, TLSFingerprint string
}

// ErrNoToken is a daemon token file that is empty or cannot be read: a TCP listener
// would otherwise serve everyone.
var ErrNoToken = errors.New("kiln: no bearer token")

// Token returns the bearer token of dataDir's daemon, making one on first use.
// The token file appears whole, 0600, or not at all: it is written aside and linked
// into place, so that concurrent first uses agree on one token and none reads a file
// half made. A file that exists but holds no token is an error, never a token "".
func Token(dataDir string) (string, error) {
	path := filepath.Join(dataDir, TokenFile)
	if tok, err := readToken(path); !errors.Is(err, os.ErrNotExist) {
		return tok, err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", fmt.Errorf("kiln: token: %w", err)
	}
	var b [32]byte
	rand.Read(b[:])
	tok := hex.EncodeToString(b[:])
	f, err := os.CreateTemp(dataDir, TokenFile+".*")
	if err != nil {
		return "", fmt.Errorf("kiln: token: %w", err)
	}
	defer os.Remove(f.Name())
	_, err = f.WriteString(tok + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("kiln: token: %w", err)
	}
	if err := os.Link(f.Name(), path); errors.Is(err, os.ErrExist) { // made meanwhile by another
		return readToken(path)
	} else if err != nil {
		return "", fmt.Errorf("kiln: token: %w", err)
	}
	return tok, nil
}

// readToken reads the token file at path; one that holds only white space is
// ErrNoToken.
func readToken(path string) (string, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrNoToken, err)
	}
	tok := strings.TrimSpace(string(data))
	if tok == "" {
		return "", fmt.Errorf("%w: %s is empty; remove it to have a new one made, or write a token in it", ErrNoToken, path)
	}
	return tok, nil
}

// Serve runs a daemon on opts.DataDir until ctx ends: it holds the directory's lease,
// serves the HTTP API on the Unix socket (and on opts.Listen, with the bearer token),
// and holds sessions across clients. When ctx ends it stops accepting, interrupts the
// running cells at once and records them, cuts off the clients still being answered
// after ShutdownGrace, and returns once every request's handler has.
func Serve(ctx context.Context, opts Options) (err error) {
	if opts.DataDir == "" {
		if opts.DataDir, err = store.DefaultDir(os.Getenv); err != nil {
			return err
		}
	}
	if opts.DataDir, err = filepath.Abs(opts.DataDir); err != nil {
		return fmt.Errorf("kiln: data directory: %w", err)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Workspace == "" {
		if opts.Workspace, err = os.Getwd(); err != nil {
			return fmt.Errorf("kiln: workspace: %w", err)
		}
	}
	sock := client.SocketPath(opts.DataDir)
	if len(sock) > maxSocketPath {
		return fmt.Errorf("kiln: the socket path %s is over %d bytes; use a shorter --data", sock, maxSocketPath)
	}
	var token string
	var tlsConf *tls.Config
	if opts.Listen == "" && (opts.TLSCert != "" || opts.TLSKey != "" || opts.TLSSelfSigned || opts.Insecure) {
		return errors.New("kiln: TLS and --insecure are settings of the TCP listener: give --listen too")
	}
	if opts.Listen != "" {
		if token, err = Token(opts.DataDir); err != nil {
			return err
		}
		if tlsConf, err = listenTLS(&opts); err != nil {
			return err
		}
	}
	agentCfg, err := serveAgentConfig(opts)
	if err != nil {
		return err
	}
	limits := sessionConfinement(&opts, agentCfg)
	confine, err := session.NewConfinement(ctx, opts.Sandbox, opts.Network, opts.DataDir, nil, true, opts.Logger)
	if err != nil {
		return err
	}
	var peers *peer.Service // set before any session opens
	if opts.Store == "" {
		opts.Store = agentCfg.Store()
	}
	if opts.LeaseTTL == 0 {
		opts.LeaseTTL = agentCfg.LeaseTTL()
	}
	d, err := serve.Start(ctx, serve.Options{Dir: opts.DataDir, Store: opts.Store, LeaseTTL: opts.LeaseTTL, Workspace: opts.Workspace, Python: opts.Python, Limits: limits,
		WorkspaceRoot: opts.WorkspaceRoot, Agent: agentCfg, Sandbox: opts.Sandbox, Network: opts.Network, SandboxHost: confine.Host,
		IdleTimeout: opts.IdleTimeout, Retention: agentCfg.Retention(), Logger: opts.Logger,
		OnStop: func(ctx context.Context, id, reason string) { peers.SessionStopped(ctx, id, reason) }})
	if err != nil {
		return err
	}
	if peers, err = peer.New(peer.Config{Store: d.Store(), Sessions: serve.Peers{D: d}, Dir: filepath.Join(opts.DataDir, "peers"),
		Logger: opts.Logger}); err != nil {
		d.Close()
		return err
	}
	defer peers.Close()
	d.SetPeers(peers)
	d.WakeAgents(ctx)
	if err := peers.Recover(ctx); err != nil {
		d.Close()
		return err
	}
	// The lease is ours: a socket file left by a daemon that died is stale.
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		d.Close()
		return fmt.Errorf("kiln: stale socket: %w", err)
	}
	listeners, err := listen(sock, opts.Listen)
	if err != nil {
		d.Close()
		return err
	}
	info := Info{Socket: sock}
	if tlsConf != nil {
		listeners[1] = tls.NewListener(listeners[1], tlsConf)
		info.TLSCert = opts.TLSCert
		if info.TLSFingerprint, err = certs.Fingerprint(opts.TLSCert); err != nil {
			d.Close()
			return err
		}
	}
	if len(listeners) > 1 { // where the daemon's leases on a shared record send clients
		scheme := "http://"
		if tlsConf != nil {
			scheme = "https://"
		}
		if err := d.Advertise(ctx, scheme+advertised(listeners[1].Addr().String())); err != nil {
			for _, ln := range listeners {
				ln.Close()
			}
			d.Close()
			return err
		}
	}
	serveCtx, stopServing := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stopServing(nil)
	runner, err := kiln.NewRunner(ctx, kiln.RunnerOptions{Python: opts.Python, Dir: opts.Workspace, Logger: opts.Logger,
		Sandbox: opts.Sandbox, Network: opts.Network, DataDir: opts.DataDir, SandboxHost: confine.Host})
	if err != nil {
		d.Close()
		return err
	}
	defer runner.Close()
	runProgram := programRunner(runner)
	var servers []*http.Server
	var conns sync.WaitGroup // the connections served, each one's requests handled on its goroutine
	connState := func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew: // on the accepting goroutine, before its Serve can return
			conns.Add(1)
		case http.StateClosed, http.StateHijacked:
			conns.Done()
		}
	}
	mcpServer := mcpserver.New(d, mcpserver.Options{RunProgram: runProgram, Logger: opts.Logger})
	mcpHandler := mcpServer.Handler(opts.Logger)
	var streams atomic.Int64 // one bound for the socket's streams and the TCP listener's
	for i, ln := range listeners {
		aopts := api.Options{Heartbeat: opts.Heartbeat, Logger: opts.Logger, RunProgram: runProgram, MCP: mcpHandler, Streams: &streams,
			Peers: peers}
		if i == 1 {
			info.Listen = ln.Addr().String()
			aopts.Token, aopts.AllowHosts = token, opts.AllowHosts
		}
		h := api.New(d, aopts)
		servers = append(servers, &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout: 2 * time.Minute, ErrorLog: slog.NewLogLogger(opts.Logger.Handler(), slog.LevelWarn),
			BaseContext: func(net.Listener) context.Context { return serveCtx }, ConnState: connState})
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(servers))
	for i, srv := range servers {
		wg.Go(func() {
			if err := srv.Serve(listeners[i]); !errors.Is(err, http.ErrServerClosed) {
				errs <- err
			}
		})
	}
	opts.Logger.Info("serving", "socket", sock, "listen", info.Listen, "data", opts.DataDir)
	if opts.Ready != nil {
		opts.Ready(info)
	}
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errs:
	}
	// End the streams, long polls and MCP calls, and stop the cells and record them at
	// once, while the answers drain: a client that takes no bytes holds only its own. A
	// long poll ended with ErrClosed answers the record the stop writes.
	stopServing(serve.ErrClosed)
	mcpServer.Close() // its sessions outlive their requests, and its calls would hold them
	peers.Close()     // no delivery or drained stop starts on a daemon that stops
	stopped := make(chan error, 1)
	go func() { stopped <- d.Shutdown() }()
	drainCtx, cancel := context.WithTimeout(context.Background(), ShutdownGrace)
	defer cancel()
	var drain sync.WaitGroup
	for _, srv := range servers {
		drain.Go(func() {
			if srv.Shutdown(drainCtx) != nil {
				srv.Close() // past the grace: cut the clients still being answered off
			}
		})
	}
	drain.Wait()
	wg.Wait()
	conns.Wait() // no handler outlives Serve
	stopErr := <-stopped
	closeErr := d.Close()
	os.Remove(sock)
	return errors.Join(serveErr, stopErr, closeErr)
}

// listenTLS is the TLS of opts' TCP listener, nil for none, with the files of a pair
// generated on request set in opts; a listener not on loopback without TLS is refused
// unless opts.Insecure.
func listenTLS(opts *Options) (*tls.Config, error) {
	switch {
	case opts.TLSSelfSigned && (opts.TLSCert != "" || opts.TLSKey != ""):
		return nil, errors.New("kiln: a self-signed pair or --tls-cert and --tls-key, not both")
	case (opts.TLSCert == "") != (opts.TLSKey == ""):
		return nil, errors.New("kiln: --tls-cert and --tls-key go together")
	case opts.TLSSelfSigned:
		host, _, _ := net.SplitHostPort(opts.Listen)
		var err error
		if opts.TLSCert, opts.TLSKey, err = certs.SelfSigned(opts.DataDir, host); err != nil {
			return nil, err
		}
	case opts.TLSCert == "":
		if !certs.Loopback(opts.Listen) && !opts.Insecure {
			return nil, fmt.Errorf("kiln: --listen %s is not a loopback address, and the bearer token must not cross a network "+
				"in clear text: serve TLS (--tls-cert and --tls-key, or --tls-self-signed), or say --insecure", opts.Listen)
		}
		return nil, nil
	}
	return certs.ServerConfig(opts.TLSCert, opts.TLSKey)
}

// ServeStdio carries one client connection between in and out and the Unix socket of
// the daemon serving dataDir, until either side ends it: a command an SSH session runs,
// so that a client reaches the daemon with no port open. No daemon serving dataDir is
// ErrNoDaemon.
func ServeStdio(ctx context.Context, dataDir string, in io.Reader, out io.Writer) error {
	conn, err := (&net.Dialer{}).DialContext(ctx, "unix", client.SocketPath(dataDir))
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("%w: %s: start one with kiln serve", client.ErrNoDaemon, dataDir)
	}
	if err != nil {
		return fmt.Errorf("kiln: daemon: %w", err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	go func() {
		io.Copy(conn, in)
		conn.(*net.UnixConn).CloseWrite() // the client's end: the daemon answers what it has, then closes
	}()
	_, err = io.Copy(out, conn)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// maxDaemonPrograms bounds the programs a daemon runs at once, over HTTP and MCP
// together: each is a python process of its own.
const maxDaemonPrograms = 16

// programRunner runs the daemon's one-shot programs on runner, at most
// maxDaemonPrograms at once, answering their results as kiln run --json prints them.
func programRunner(runner *kiln.Runner) func(ctx context.Context, code string, l api.ProgramLimits) ([]byte, error) {
	running := make(chan struct{}, maxDaemonPrograms)
	return func(ctx context.Context, code string, l api.ProgramLimits) ([]byte, error) {
		select {
		case running <- struct{}{}:
			defer func() { <-running }()
		default:
			return nil, fmt.Errorf("%w: %d run now, the most at once", api.ErrTooManyPrograms, maxDaemonPrograms)
		}
		var limits kiln.Limits // read as kiln.Limits reads its JSON, by the same rule
		data, err := json.Marshal(l)
		if err == nil {
			err = limits.UnmarshalJSON(data)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %w", api.ErrProgramInvalid, err)
		}
		res, err := runner.Run(ctx, kiln.Program{Source: code, Limits: limits})
		if errors.Is(err, kiln.ErrInvalidProgram) {
			return nil, fmt.Errorf("%w: %w", api.ErrProgramInvalid, err)
		}
		if err != nil {
			return nil, err
		}
		return res.MarshalJSON()
	}
}

// advertised is the TCP address addr as another host reaches it: an unspecified
// address (0.0.0.0, ::) names this host instead.
func advertised(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		if name, err := os.Hostname(); err == nil {
			host = name
		}
	}
	return net.JoinHostPort(host, port)
}

// listen opens the Unix socket, 0600, and the TCP address if one is named.
func listen(sock, addr string) ([]net.Listener, error) {
	uln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, fmt.Errorf("kiln: listen: %w", err)
	}
	if err := os.Chmod(sock, 0o600); err != nil {
		uln.Close()
		return nil, fmt.Errorf("kiln: listen: %w", err)
	}
	if addr == "" {
		return []net.Listener{uln}, nil
	}
	tln, err := net.Listen("tcp", addr)
	if err != nil {
		uln.Close()
		return nil, fmt.Errorf("kiln: listen: %w", err)
	}
	return []net.Listener{uln, tln}, nil
}

// sessionConfinement gives opts kiln.toml's [sandbox] where it names no sandbox or
// network (the flags take precedence), and returns kiln.toml's [limits] as the limits
// of sessions that give none.
func sessionConfinement(opts *Options, cfg *agentrun.Config) limits.Session {
	sb, l := cfg.Confinement()
	if opts.Sandbox == "" {
		opts.Sandbox = sb.Profile
	}
	if opts.Network == "" {
		opts.Network = sb.Network
	}
	return l
}

// serveAgentConfig reads the daemon's agent configuration: opts.Config, else
// <data>/kiln.toml when it exists.
func serveAgentConfig(opts Options) (*agentrun.Config, error) {
	if opts.Config != "" {
		return agentrun.LoadConfig(opts.Config, false)
	}
	return agentrun.LoadConfig(filepath.Join(opts.DataDir, ConfigFile), true)
}
