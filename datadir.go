package kiln

import (
	"os"

	"github.com/kilnrt/kiln/internal/store"
)

// dataDirOrDefault is dataDir, or the default data directory (admin.DefaultDataDir)
// when it is "".
func dataDirOrDefault(dataDir string) (string, error) {
	if dataDir != "" {
		return dataDir, nil
	}
	return store.DefaultDir(os.Getenv)
}
