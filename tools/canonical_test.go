package tools

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/agent"
)

// Paths, programs, working directories and URLs are taken only in the one
// form the policy's rules are written against: another spelling of the
// same file, program, directory or address (tmp/../x, ./secrets/x, the
// root's absolute path, /usr/bin/rm for rm, staging/../prod, an upper-case
// host, a needless escape in the path or the query, an empty port or one
// with leading zeros) is refused before the policy judges the call.
func TestOnlyPlainPathsAndProgramNames(t *testing.T) {
	root := t.TempDir()
	ws, err := WorkspaceTools(WorkspaceConfig{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	cmd, err := RunCommand(CommandConfig{Allow: []string{"ls", "rm"}, Dir: work})
	if err != nil {
		t.Fatal(err)
	}
	web, err := HTTPTools(HTTPConfig{AllowedHosts: []string{"*.example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	reg := agent.NewRegistry()
	for _, tool := range append(append(ws, cmd), web...) {
		if err := reg.Register(tool); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		tool, args, want string
	}{
		{"workspace_write", `{"path":"tmp/../notes.md","content":"x"}`, `write it plainly, as "notes.md"`},
		{"workspace_read", `{"path":"./secrets/api-token.txt"}`, `write it plainly, as "secrets/api-token.txt"`},
		{"workspace_read", `{"path":"` + root + `/secrets/api-token.txt"}`, "not an absolute one"},
		{"workspace_delete", `{"path":"tmp//a"}`, `as "tmp/a"`},
		{"workspace_list", `{"path":"tmp/"}`, `as "tmp"`},
		{"workspace_read", `{"path":"../x"}`, "leaves the workspace"},
		{"run_command", `{"argv":["/usr/bin/rm","-f","notes.md"]}`, `program "/usr/bin/rm" is not allowed; name it exactly as one of: ls, rm`},
		{"run_command", `{"argv":["./ls"]}`, "not allowed"},
		{"workspace_read", `{"path":"secrets/api-token.txt"}`, ""},
		{"workspace_list", `{"path":"."}`, ""},
		{"workspace_list", `{}`, ""},
		{"run_command", `{"argv":["rm","-f","notes.md"]}`, ""},
		{"run_command", `{"argv":["ls"],"dir":"staging/../prod"}`, `write it plainly, as "prod"`},
		{"run_command", `{"argv":["ls"],"dir":"` + work + `/prod"}`, `give it relative to ` + work + `, as "prod"`},
		{"run_command", `{"argv":["ls"],"dir":"/srv/prod"}`, "is outside"},
		{"run_command", `{"argv":["ls"],"dir":"../prod"}`, "is outside"},
		{"run_command", `{"argv":["ls"],"dir":"staging/app"}`, ""},
		{"http_get", `{"url":"https://VAULT.example.com/v1/secret"}`, "the host in lower case"},
		{"http_get", `{"url":"https://vault.example.com/v1/%73ecret"}`, `"%73" unescaped`},
		{"http_request", `{"method":"DELETE","url":"https://vault.example.com/v1/a/../secret"}`, "no . or .. in the path"},
		{"http_get", `{"url":"https://vault.example.com/v1/secret?q=%73"}`, `"%73" unescaped`},
		{"http_request", `{"method":"POST","url":"https://vault.example.com/v1/secret?force=%74rue"}`, `"%74" unescaped`},
		{"http_get", `{"url":"https://vault.example.com/v1/secret?q=a%20b%2Fc&r=%7e"}`, `"%7e" unescaped`},
		{"http_get", `{"url":"https://vault.example.com/v1/secret?q=a%20b%2Fc%3D"}`, ""},
		{"http_request", `{"method":"DELETE","url":"https://api.example.com:/repos/x"}`, "no : without a port after the host"},
		{"http_get", `{"url":"http://127.0.0.1:039519/"}`, "the port as 39519, without leading zeros"},
		{"http_get", `{"url":"https://api.example.com:0443/repos/x"}`, "the port as 443, without leading zeros"},
		{"http_get", `{"url":"http://[::1]:/x"}`, "no : without a port after the host"},
		{"http_get", `{"url":"https://api.example.com:8443/repos/x"}`, ""},
	} {
		err := reg.Validate(tt.tool, json.RawMessage(tt.args))
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s %s: refused (%v), want it taken", tt.tool, tt.args, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s %s: %v, want an error with %q", tt.tool, tt.args, err, tt.want)
		}
	}
}
