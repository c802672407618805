package kiln

import (
	"os"

	"github.com/kilnrt/kiln/internal/store"
)

// DefaultDataDir is the data directory used when none is given:
// $XDG_DATA_HOME/kiln, else ~/.local/share/kiln, with getenv reading the environment.
func DefaultDataDir(getenv func(string) string) (string, error) {
	return store.DefaultDir(getenv)
}

// dataDirOrDefault is dataDir, or DefaultDataDir when it is "".
func dataDirOrDefault(dataDir string) (string, error) {
	if dataDir != "" {
		return dataDir, nil
	}
	return DefaultDataDir(os.Getenv)
}
