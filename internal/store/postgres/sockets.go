package postgres

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// SocketDirs are the directories of the Unix sockets through which the database
// rawURL names is reached: its hosts that are paths (libpq's way of naming a socket's
// directory), the one it falls back to when it names none included. A daemon hides
// them from the code it runs, which could otherwise connect to the server as the
// daemon's own user.
func SocketDirs(rawURL string) ([]string, error) {
	cfg, err := pgx.ParseConfig(rawURL)
	if err != nil {
		return nil, fmt.Errorf("postgres: %s: %w", Redact(rawURL), err)
	}
	hosts := []string{cfg.Host}
	for _, f := range cfg.Fallbacks {
		hosts = append(hosts, f.Host)
	}
	var dirs []string
	for _, h := range hosts {
		if strings.HasPrefix(h, "/") {
			dirs = append(dirs, h)
		}
	}
	return dirs, nil
}
