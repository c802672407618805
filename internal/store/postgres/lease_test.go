package postgres_test

import (
	"bufio"
	"errors"
	"io"
	"net/url"
	"os"
	osexec "os/exec"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kilnrt/kiln/internal/pgtest"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/store/postgres"
)

// holderURL, set in a helper process's environment, names the database whose lease
// TestLeaseHolderProcess takes.
const holderURL = "KILN_TEST_LEASE_HOLDER"

// heldKey is the lease the helper process holds.
const heldKey = "session:s"

// TestALeaseHeldFromAnotherPIDNamespaceLastsItsTerm: a daemon in another PID namespace
// of this host (a container that shares the host's name) holds a lease with a term. Its
// pid names another process here, or none, so /proc cannot say it died: another Store
// leaves the lease to it until its term ends, as it leaves one of another host.
func TestALeaseHeldFromAnotherPIDNamespaceLastsItsTerm(t *testing.T) {
	t.Parallel()
	srv := pgtest.Start(t)
	db := srv.Database(t, t.Name())
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(u.Query().Get("host"), 0o711) // the socket's directory, for a helper root in a user namespace alone
	cmd := osexec.Command(os.Args[0], "-test.run=^TestLeaseHolderProcess$")
	cmd.Env = append(os.Environ(), holderURL+"="+db)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	if os.Getuid() != 0 {
		cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWUSER
		cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getuid(), HostID: os.Getuid(), Size: 1}}
		cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getgid(), HostID: os.Getgid(), Size: 1}}
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Skipf("the kernel refuses a PID namespace here: %v", err)
	}
	defer func() {
		stdin.Close()
		cmd.Wait()
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if line != "held\n" {
		t.Fatalf("the helper said %q, %v", line, err)
	}

	st, err := postgres.OpenStore(t.Context(), db, store.Options{Lease: store.LeaseTerms{TTL: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if l, err := st.AcquireLease(t.Context(), heldKey); !errors.Is(err, store.ErrLeaseHeld) {
		if err == nil {
			l.Release(t.Context())
		}
		t.Fatalf("a lease held in its term from another PID namespace of this host: %v; want ErrLeaseHeld", err)
	}
	if _, live, err := st.LeaseHolder(t.Context(), heldKey); err != nil || !live {
		t.Errorf("its holder: live %v, %v; want live", live, err)
	}
}

// TestLeaseHolderProcess is the helper process of
// TestALeaseHeldFromAnotherPIDNamespaceLastsItsTerm, started in PID and mount namespaces
// of its own: it mounts its /proc, as a container has its own, takes the lease heldKey
// with a term of a minute, says "held", and holds it until its stdin closes.
func TestLeaseHolderProcess(t *testing.T) {
	db := os.Getenv(holderURL)
	if db == "" {
		t.Skip("the helper process of TestALeaseHeldFromAnotherPIDNamespaceLastsItsTerm")
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("proc", "/proc", "proc", 0, ""); err != nil {
		t.Fatal(err)
	}
	st, err := postgres.OpenStore(t.Context(), db, store.Options{Lease: store.LeaseTerms{TTL: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	l, err := st.AcquireLease(t.Context(), heldKey)
	if err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("held\n")
	io.Copy(io.Discard, os.Stdin)
	if err := l.Release(t.Context()); err != nil {
		t.Error(err)
	}
}
