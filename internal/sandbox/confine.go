package sandbox

import (
	"cmp"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"unsafe"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// coverOptions is the tmpfs that covers a hidden directory: empty, small, and only a
// place for the mount points of what stays reachable inside it.
const coverOptions = "mode=0755,size=64k,nr_inodes=1024"

// privateDirs are covered with a writable tmpfs of the child's own.
var privateDirs = [...]string{"/tmp", "/dev/shm"}

// mountView makes the child's view of the filesystem in its mount namespace: the
// directories of s.Hide covered by an empty tmpfs, then those of s.Keep inside them
// bound back, a private /tmp and /dev/shm, and a /proc of the child's PID namespace.
// Landlock then decides what of the view may be read or written; the covering is for
// what Landlock does not stop below ABI 9, connecting to a Unix socket by its path.
func mountView(s spec) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return &viewError{msg: "making mounts private: " + err.Error()}
	}
	type kept struct {
		path string
		fd   int
		st   unix.Stat_t
	}
	var keeps []kept
	defer func() {
		for _, k := range keeps {
			unix.Close(k.fd)
		}
	}()
	for _, path := range s.Keep {
		fd, err := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			continue // nothing there to keep
		}
		k := kept{path: path, fd: fd}
		unix.Fstat(fd, &k.st)
		keeps = append(keeps, k)
	}
	slices.SortFunc(keeps, func(a, b kept) int { return cmp.Compare(len(a.path), len(b.path)) })
	hides := slices.Clone(s.Hide)
	slices.SortFunc(hides, func(a, b string) int { return cmp.Compare(len(a), len(b)) })
	cover := func(dir string) error {
		err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, coverOptions)
		if err == nil || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			return nil // a directory that is not there needs no hiding
		}
		return refusedMount(fmt.Errorf("hiding %s: %w", dir, err))
	}
	for _, h := range hides {
		if err := cover(h); err != nil {
			return err
		}
	}
	for _, d := range privateDirs {
		if err := unix.Mount("tmpfs", d, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777"); err != nil && !errors.Is(err, unix.ENOENT) {
			return refusedMount(fmt.Errorf("a private %s: %w", d, err))
		}
	}
	for _, k := range keeps {
		var st unix.Stat_t
		if unix.Stat(k.path, &st) == nil && st.Dev == k.st.Dev && st.Ino == k.st.Ino {
			continue // not covered
		}
		if err := mkdirAll(k.path); err != nil {
			return fmt.Errorf("keeping %s: %w", k.path, err)
		}
		if err := unix.Mount("/proc/self/fd/"+itoa(k.fd), k.path, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("keeping %s: %w", k.path, err)
		}
	}
	// A hidden directory inside one kept is covered again.
	for _, h := range hides {
		for _, k := range keeps {
			if within(h, k.path) && h != k.path {
				if err := cover(h); err != nil {
					return err
				}
				break
			}
		}
	}
	if s.Proc {
		if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return &viewError{proc: true, msg: "mounting /proc: " + err.Error()}
		}
	}
	return nil
}

// viewError is a mount the kernel refused in the child's namespaces, of those the
// namespace probe tries: it reaches the host through the helper's report.
type viewError struct {
	proc bool // mounting a /proc of the child's PID namespace
	msg  string
}

// refusedMount is err, a tmpfs mount that failed, as a viewError where the kernel
// refused it (as it does tmpfs in a namespace it does not let mount).
func refusedMount(err error) error {
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.ENODEV) || errors.Is(err, unix.EINVAL) {
		return &viewError{msg: err.Error()}
	}
	return err
}

// Report prefixes of a viewError, after "error ".
const (
	reportView = "view "
	reportProc = "proc "
)

func (e *viewError) Error() string { return ErrUnavailable.Error() + ": " + e.msg }

func (e *viewError) Unwrap() error { return ErrUnavailable }

// report is the helper's report line of e, after "error ".
func (e *viewError) report() string {
	if e.proc {
		return reportProc + e.msg
	}
	return reportView + e.msg
}

// mkdirAll makes dir and its missing parents, 0755.
func mkdirAll(dir string) error {
	if err := unix.Mkdir(dir, 0o755); err == nil || errors.Is(err, unix.EEXIST) {
		return nil
	} else if !errors.Is(err, unix.ENOENT) || dir == "/" {
		return err
	}
	if err := mkdirAll(filepath.Dir(dir)); err != nil {
		return err
	}
	if err := unix.Mkdir(dir, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
		return err
	}
	return nil
}

// within reports whether path is dir or inside it.
func within(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, strings.TrimSuffix(dir, "/")+"/")
}

// landlockConfigs are go-landlock's configurations by ABI, from 1.
var landlockConfigs = [maxLandlockABI]landlock.Config{
	landlock.V1, landlock.V2, landlock.V3, landlock.V4, landlock.V5, landlock.V6, landlock.V7,
}

// The system's read-only directories: its programs and libraries, and its
// configuration.
var systemDirs = [...]string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"}

// The kernel's views, readable and never executable.
var kernelDirs = [...]string{"/proc", "/sys"}

// The devices a child may read and write; the rest of /dev may be listed only.
var devFiles = [...]string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"}

// The dynamic loaders, which the kernel executes for every dynamically linked program.
var loaders = [...]string{"/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1", "/lib/ld-linux-x86-64.so.2"}

// restrictLandlock confines this thread, and the program it executes, to the
// filesystem and network of s, at ABI s.Landlock, and scopes its signals and abstract
// Unix sockets where the ABI has that. It reports whether they are scoped. The caller
// has set no_new_privs.
func restrictLandlock(s spec) (bool, error) {
	fd, flags, scoped, err := landlockRuleset(s, true)
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return false, fmt.Errorf("no_new_privs: %w", err)
	}
	if err := ll.LandlockRestrictSelf(fd, flags); err != nil {
		return false, fmt.Errorf("restricting: %w", err)
	}
	return scoped, nil
}

// landlockAccess is the Landlock configuration of s and the access its rules give.
type landlockAccess struct {
	cfg                         landlock.Config
	read, sys, write, dev, exec landlock.AccessFSSet
}

// accessOf is s's landlockAccess.
func accessOf(s spec) landlockAccess {
	cfg := landlockConfigs[min(s.Landlock, maxLandlockABI)-1]
	if s.NetworkMode == NetworkHost || s.NetworkMode == "" {
		cfg.HandledAccessNet = 0
	}
	a := landlockAccess{cfg: cfg, read: landlock.AccessFSSet(ll.AccessFSReadFile | ll.AccessFSReadDir),
		exec: landlock.AccessFSSet(ll.AccessFSExecute), dev: landlock.AccessFSSet(ll.AccessFSReadDir)}
	a.sys, a.write = a.read|a.exec, cfg.HandledAccessFS
	if s.Strict {
		a.sys, a.write = a.read, cfg.HandledAccessFS&^a.exec
	}
	return a
}

// rule is the rule giving access to paths, as s's rules do: within what is handled,
// missing paths ignored, and refer where files are made.
func (a landlockAccess) rule(s spec, access landlock.AccessFSSet, paths ...string) landlock.FSRule {
	r := landlock.PathAccess(access&a.cfg.HandledAccessFS, paths...).IgnoreIfMissing()
	if s.Landlock >= 2 && access&landlock.AccessFSSet(ll.AccessFSMakeReg) != 0 {
		r = r.WithRefer()
	}
	return r
}

// landlockRuleset makes the ruleset of s and returns its descriptor and the flags to
// restrict with. Without fresh, it leaves out the rules of the paths a child's view
// mounts anew (freshPaths), which only the child can make.
func landlockRuleset(s spec, fresh bool) (fd int, flags uint32, scoped bool, err error) {
	a := accessOf(s)
	kernel, private := kernelDirs[:], privateDirs[:]
	if !fresh {
		kernel, private = slices.DeleteFunc(slices.Clone(kernel), isFresh), nil
	}
	rules := []landlock.Rule{
		a.rule(s, a.sys, systemDirs[:]...),
		a.rule(s, a.read, kernel...),
		a.rule(s, a.dev, "/dev"),
		a.rule(s, a.read|a.exec, s.Read...),
		a.rule(s, a.write, append(slices.Clone(s.Write), private...)...),
	}
	dev := landlock.RWFiles(devFiles[:]...).IgnoreIfMissing()
	if s.Landlock >= 5 {
		dev = dev.WithIoctlDev()
	}
	rules = append(rules, dev)
	if s.Strict {
		rules = append(rules, landlock.ROFiles(loaders[:]...).IgnoreIfMissing())
	}
	if a.cfg.HandledAccessNet != 0 {
		for _, p := range s.Ports {
			rules = append(rules, landlock.ConnectTCP(p))
		}
	}
	fd, flags, err = a.cfg.NewRulesetFD(rules...)
	if err != nil {
		return -1, 0, false, err
	}
	if fd < 0 {
		return -1, 0, false, errors.New("no ruleset made")
	}
	return fd, flags, a.cfg.Scoped != 0, nil
}

// deniedSyscalls are refused with EPERM: what reads or changes another process
// (ptrace, process_vm_*, pidfd_getfd), what changes the filesystem's shape (mount and
// its kin), and the kernel's larger attack surfaces (bpf, keys, userfaultfd, perf,
// io_uring, kexec, modules).
var deniedSyscalls = [...]string{
	"ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp",
	"mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsmount", "fsconfig", "fspick",
	"mount_setattr", "setns", "chroot", "open_by_handle_at", "name_to_handle_at",
	"bpf", "keyctl", "add_key", "request_key", "userfaultfd", "perf_event_open",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"swapon", "swapoff", "reboot", "acct", "quotactl", "iopl", "ioperm", "syslog",
}

// loadSeccomp installs the filter (seccompFilter). The caller has set no_new_privs.
func loadSeccomp() error {
	raw, err := seccompFilter()
	if err != nil {
		return err
	}
	filter := make([]unix.SockFilter, len(raw))
	for i, in := range raw {
		filter[i] = unix.SockFilter{Code: in.Op, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	return unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&prog)), 0, 0)
}

// seccompFilter is the filter, assembled: a system call of another ABI than this
// architecture's native one (i386's int 0x80 on x86-64, which the policy's numbers do
// not describe) refused with ENOSYS, then seccompPolicy.
func seccompFilter() ([]bpf.RawInstruction, error) {
	native, err := arch.GetInfo("")
	if err != nil {
		return nil, err
	}
	policy := seccompPolicy()
	insts, err := policy.Assemble()
	if err != nil {
		return nil, err
	}
	guard := []bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4}, // struct seccomp_data's arch
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(native.ID), SkipTrue: 1},
		bpf.RetConstant{Val: unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)},
	}
	return bpf.Assemble(append(guard, insts...))
}

// seccompPolicy is the filter's policy, for the native ABI: deniedSyscalls and new user
// namespaces refused with EPERM, clone3 with ENOSYS (its flags are out of a filter's
// reach; the C library then uses clone, whose flags are not).
func seccompPolicy() seccomp.Policy {
	newUser := seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.BitsSet, Value: unix.CLONE_NEWUSER}}
	return seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{
			{Action: seccomp.ActionErrno, Names: deniedSyscalls[:]},
			{Action: seccomp.ActionErrno, NamesWithCondtions: []seccomp.NameWithConditions{
				{Name: "unshare", Conditions: newUser},
				{Name: "clone", Conditions: newUser},
			}},
			{Action: seccomp.ActionErrno | seccomp.Action(unix.ENOSYS), Names: []string{"clone3"}},
		},
	}
}
