package regfile

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// place makes, in a new directory, a regular file, a directory, a FIFO with no writer
// and a symlink to the regular file.
func place(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "file"), []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "dir"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("file", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestOpenTakesOnlyARegularFile(t *testing.T) {
	dir := place(t)
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	opens := map[string]func(name string) (*File, error){
		"Open":          func(name string) (*File, error) { return Open(filepath.Join(dir, name), false) },
		"Open noFollow": func(name string) (*File, error) { return Open(filepath.Join(dir, name), true) },
		"OpenIn":        func(name string) (*File, error) { return OpenIn(root, name) },
	}
	for how, open := range opens {
		t.Run(how, func(t *testing.T) {
			f, err := open("file")
			if err != nil {
				t.Fatalf("a regular file: %v", err)
			}
			if f.Info.Size() != 5 || !f.Info.Mode().IsRegular() {
				t.Errorf("Info = %v, size %d", f.Info.Mode(), f.Info.Size())
			}
			f.Close()
			// A FIFO with no writer returns at once, refused: it is not waited on.
			for name, want := range map[string]string{"dir": "is a directory", "fifo": "is not a regular file"} {
				f, err := open(name)
				if !errors.Is(err, ErrNotRegular) || !strings.HasSuffix(err.Error(), name+" "+want) {
					t.Errorf("%s: got %v, %v; want an error ending %q", name, f, err, name+" "+want)
				}
			}
		})
	}
	if _, err := Open(filepath.Join(dir, "link"), true); !errors.Is(err, syscall.ELOOP) {
		t.Errorf("a symlink, not followed: got %v, want ELOOP", err)
	}
	if f, err := Open(filepath.Join(dir, "link"), false); err != nil {
		t.Errorf("a symlink, followed: %v", err)
	} else {
		f.Close()
	}
	if _, err := OpenIn(root, "../"+filepath.Base(dir)+"/file"); err == nil {
		t.Error("OpenIn went out of its root")
	}
	if _, err := Open("/dev/null", false); !errors.Is(err, ErrNotRegular) {
		t.Errorf("a device: got %v, want ErrNotRegular", err)
	}
}

func TestReadAllRefusesPastItsBound(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := os.WriteFile(path, bytes.Repeat([]byte("x"), 100), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		max     int64
		wantErr bool
	}{{100, false}, {99, true}, {1000, false}, {0, true}} {
		f, err := Open(path, true)
		if err != nil {
			t.Fatal(err)
		}
		data, err := f.ReadAll(tc.max)
		f.Close()
		switch {
		case tc.wantErr && !errors.Is(err, ErrTooLarge):
			t.Errorf("bound %d: got %d bytes, %v; want ErrTooLarge", tc.max, len(data), err)
		case tc.wantErr && err.Error() != path+" is larger than "+strconv.FormatInt(tc.max, 10)+" bytes":
			t.Errorf("bound %d: error %q does not say which file and bound", tc.max, err)
		case !tc.wantErr && (err != nil || len(data) != 100):
			t.Errorf("bound %d: got %d bytes, %v; want all 100", tc.max, len(data), err)
		}
	}
}

// TestReadAllReadsWhatIsThereNow reads a file that grew after it was opened: the bound
// holds on what is read, not on the size seen at the open.
func TestReadAllReadsWhatIsThereNow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte("ab"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path, true)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.WriteFile(path, bytes.Repeat([]byte("y"), 50), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadAll(10); !errors.Is(err, ErrTooLarge) {
		t.Errorf("a file grown past the bound after its open: got %v, want ErrTooLarge", err)
	}
}
