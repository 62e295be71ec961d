package tools_test

import (
	"fmt"

	"github.com/toolgate/toolgate/tools"
)

func ExampleParseConfig() {
	cfg, err := tools.ParseConfig([]byte(`
mcp_servers:
  - name: github
    url: https://mcp.example.com/mcp
builtin_tools:
  ask_human: {}
  http_request: {allowed_hosts: ["api.github.com"], read_only: true}
policy:
  default: ask
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	builtins, err := tools.Builtins(cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range cfg.Servers {
		fmt.Println("server", s.Name, s.URL)
	}
	for _, t := range builtins {
		fmt.Println("tool", t.Name, "read-only:", t.Annotations.ReadOnly)
	}
	// Output:
	// server github https://mcp.example.com/mcp
	// tool ask_human read-only: false
	// tool http_get read-only: true
}
