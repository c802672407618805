package serve

import (
	"fmt"
	"strings"

	"github.com/kilnrt/kiln/internal/tools"
)

// MaxMCPServers bounds the MCP servers one session names.
const MaxMCPServers = 16

// MCPServer is an MCP server whose tools a session's cells call as
// await tools.<Name>.<tool>(…): a command the daemon starts and speaks to on its stdin
// and stdout, or a streamable HTTP endpoint it reaches. The daemon starts it (or
// connects) with the session's runtime, and stops it when the session stops.
type MCPServer struct {
	Name    string   `json:"name"`              // the namespace, a Python identifier
	Command []string `json:"command,omitempty"` // argv of a stdio server, run by the daemon
	URL     string   `json:"url,omitempty"`     // http:// or https:// endpoint
}

// checkMCP checks the MCP servers a session names.
func checkMCP(servers []MCPServer) error {
	if len(servers) > MaxMCPServers {
		return fmt.Errorf("%w: %d mcp servers, more than %d", ErrInvalid, len(servers), MaxMCPServers)
	}
	seen := map[string]bool{}
	for _, s := range servers {
		switch {
		case !tools.ValidNamespace(s.Name):
			return fmt.Errorf("%w: mcp server name %q is not a Python identifier", ErrInvalid, s.Name)
		case seen[s.Name]:
			return fmt.Errorf("%w: mcp server %s named twice", ErrInvalid, s.Name)
		case (len(s.Command) == 0) == (s.URL == ""):
			return fmt.Errorf("%w: mcp server %s: give a command or a url, not both", ErrInvalid, s.Name)
		case s.URL != "" && !strings.HasPrefix(s.URL, "http://") && !strings.HasPrefix(s.URL, "https://"):
			return fmt.Errorf("%w: mcp server %s: url %q is not http:// or https://", ErrInvalid, s.Name, s.URL)
		case len(s.Command) > 0 && s.Command[0] == "":
			return fmt.Errorf("%w: mcp server %s: an empty command", ErrInvalid, s.Name)
		}
		for _, arg := range s.Command {
			if strings.ContainsRune(arg, 0) {
				return fmt.Errorf("%w: mcp server %s: an argument holds a NUL", ErrInvalid, s.Name)
			}
		}
		seen[s.Name] = true
	}
	return nil
}
