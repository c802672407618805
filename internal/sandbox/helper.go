package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/kilnrt/kiln/internal/proc"
)

// helperName is the argv[0] under which kiln's executable, re-executed, is the helper:
// it confines itself as its first argument, a spec, says, then executes the program
// named by the rest.
const helperName = "kiln-sandbox"

// probeArg is the helper's argument that asks it to probe the namespaces instead.
const probeArg = "probe"

// spec is what the helper applies to itself, from its first argument.
type spec struct {
	Report      int      `json:"report"`             // the report pipe's fd
	Path        string   `json:"path"`               // the program, resolved
	Mount       bool     `json:"mount,omitempty"`    // in new mount, IPC and PID namespaces
	UserNS      uint64   `json:"userns,omitempty"`   // the host's user namespace's inode
	Proc        bool     `json:"proc,omitempty"`     // mount a /proc of its PID namespace
	Hide        []string `json:"hide,omitempty"`     // covered with an empty tmpfs
	Keep        []string `json:"keep,omitempty"`     // seen again where Hide covered them
	Write       []string `json:"write,omitempty"`    // read-write
	Read        []string `json:"read,omitempty"`     // read-only, executable
	Strict      bool     `json:"strict,omitempty"`   // executables only from Read
	Landlock    int      `json:"landlock,omitempty"` // the Landlock ABI to use; 0: none
	NetworkMode string   `json:"network"`
	Ports       []uint16 `json:"ports,omitempty"`
	Seccomp     bool     `json:"seccomp,omitempty"`
	Cgroups     []string `json:"cgroups,omitempty"` // cgroup.procs files to join
	Processes   int      `json:"processes,omitempty"`
	Rlimits     bool     `json:"rlimits,omitempty"` // limits by rlimit, for want of cgroups
	Memory      int64    `json:"memory,omitempty"`
	// Bare applies the rlimits alone: no capability is dropped and no_new_privs is not
	// set, as under a profile that confines nothing.
	Bare bool `json:"bare,omitempty"`
	// Cwd is the path of the directory the helper starts in, entered again once its
	// view is mounted: a directory handed over by descriptor belongs to the host's
	// mounts, out of the child's reach.
	Cwd string `json:"cwd,omitempty"`
}

// The helper runs before main, in a process that executes another program at once.
func init() {
	if len(os.Args) < 2 || os.Args[0] != helperName {
		return
	}
	runtime.LockOSThread() // confinement applies to the thread that executes python
	if os.Args[1] == probeArg {
		os.Exit(probe())
	}
	os.Exit(helper(os.Args[1], os.Args[2:]))
}

// helper applies the spec and executes argv; it returns only on failure, after
// reporting it.
func helper(rawSpec string, argv []string) int {
	var s spec
	if err := json.Unmarshal([]byte(rawSpec), &s); err != nil || len(argv) == 0 {
		fmt.Fprintf(os.Stderr, "kiln-sandbox: a bad spec: %v\n", err)
		return 126
	}
	report := os.NewFile(uintptr(s.Report), "report")
	unix.CloseOnExec(s.Report)
	fail := func(err error) int {
		text := err.Error()
		if v, ok := errors.AsType[*viewError](err); ok {
			text = v.report()
		}
		fmt.Fprintf(report, "error %s\n", oneLine(text))
		return 126
	}
	a, err := confine(s)
	if err != nil {
		return fail(err)
	}
	if err := proc.CloseOnExecFrom(s.Report + 1); err != nil {
		return fail(err)
	}
	line, _ := json.Marshal(a)
	fmt.Fprintf(report, "ok %s\n", line)
	err = syscall.Exec(s.Path, argv, os.Environ())
	return fail(fmt.Errorf("exec %s: %w", argv[0], err))
}

// confine applies s to this process, in order: cgroups, the mount view, rlimits,
// Landlock, then no_new_privs and seccomp, the last of which stops the mounts before.
func confine(s spec) (Applied, error) {
	var a Applied
	for _, f := range s.Cgroups {
		if err := os.WriteFile(f, []byte("0"), 0); err != nil {
			return a, fmt.Errorf("joining the cgroup: %w", err)
		}
	}
	if s.Mount && userNamespace() != s.UserNS {
		a.Namespaces = []string{"user"}
		if os.Getpid() == 1 {
			a.Namespaces = append(a.Namespaces, "pid")
		}
		a.Namespaces = append(a.Namespaces, "mount", "ipc")
		if s.NetworkMode == NetworkNone {
			a.Namespaces = append(a.Namespaces, "net")
		}
		var cwd unix.Stat_t
		if err := unix.Stat(".", &cwd); err != nil {
			return a, fmt.Errorf("the working directory: %w", err)
		}
		if err := mountView(s); err != nil {
			return a, err
		}
		if err := reenter(s.Cwd, cwd); err != nil {
			return a, err
		}
	} else if s.Mount {
		a.Missing = append(a.Missing, "namespaces: "+errNamespacesRefused)
	}
	if s.Rlimits {
		if err := setRlimits(s); err != nil {
			return a, err
		}
	}
	if s.Bare {
		return a, nil
	}
	if err := dropCapabilities(); err != nil {
		return a, err
	}
	if s.Landlock > 0 {
		scoped, err := restrictLandlock(s)
		if err != nil {
			return a, fmt.Errorf("landlock: %w", err)
		}
		a.Landlock, a.Scoped = s.Landlock, scoped
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return a, fmt.Errorf("no_new_privs: %w", err)
	}
	if s.Seccomp {
		if err := loadSeccomp(); err != nil {
			return a, fmt.Errorf("seccomp: %w", err)
		}
		a.Seccomp = true
	}
	return a, nil
}

// reenter enters dir, in the view just mounted, if it is the directory was (the one
// the helper started in); a different one is an error, as a directory swapped in since.
func reenter(dir string, was unix.Stat_t) error {
	if dir == "" {
		return nil
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("entering the working directory %s again: %w", dir, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("entering the working directory %s again: %w", dir, err)
	}
	if st.Dev != was.Dev || st.Ino != was.Ino {
		return fmt.Errorf("the working directory %s is not the directory the child was started in", dir)
	}
	if err := unix.Fchdir(fd); err != nil {
		return fmt.Errorf("entering the working directory %s again: %w", dir, err)
	}
	return nil
}

// dropCapabilities empties the ambient and bounding sets, so that the program executed
// next has no capability, even in its own user namespace, as root there.
func dropCapabilities() error {
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clearing ambient capabilities: %w", err)
	}
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		// EINVAL: a capability this kernel lacks; EPERM: none to drop outside a namespace.
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.EPERM) {
			return fmt.Errorf("dropping capability %d: %w", c, err)
		}
	}
	return nil
}

// setRlimits limits the address space to s.Memory and the user's tasks to
// s.Processes.
func setRlimits(s spec) error {
	if s.Memory > 0 {
		lim := &unix.Rlimit{Cur: uint64(s.Memory), Max: uint64(s.Memory)}
		if err := unix.Setrlimit(unix.RLIMIT_AS, lim); err != nil {
			return fmt.Errorf("memory rlimit: %w", err)
		}
	}
	if s.Processes > 0 {
		n := uint64(s.Processes)
		var old unix.Rlimit
		if unix.Getrlimit(unix.RLIMIT_NPROC, &old) == nil && old.Max < n {
			n = old.Max
		}
		if err := unix.Setrlimit(unix.RLIMIT_NPROC, &unix.Rlimit{Cur: n, Max: n}); err != nil {
			return fmt.Errorf("process rlimit: %w", err)
		}
	}
	return nil
}

// probe tries, in the namespaces the probe started it in, what mountView does, and
// writes a probeReport on stdout.
func probe() int {
	var r probeReport
	defer func() {
		out, _ := json.Marshal(r)
		os.Stdout.Write(out)
	}()
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		r.Err = "making mounts private: " + err.Error()
		return 0
	}
	if err := unix.Mount("tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777"); err != nil {
		r.Err = "mounting a tmpfs: " + err.Error()
		return 0
	}
	r.Mount = true
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		r.Err = "mounting /proc: " + err.Error()
		return 0
	}
	r.Proc = true
	return 0
}

// oneLine replaces the line breaks of s, for a report line.
func oneLine(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c == '\n' || c == '\r' {
			b[i] = ' '
		}
	}
	return string(b)
}

// itoa is strconv.Itoa, for /proc paths.
func itoa(n int) string { return strconv.Itoa(n) }
