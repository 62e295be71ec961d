// Package tools provides the tools the agent may call: the tools of MCP
// servers and a few built-in chat-ops tools, each with the hints a policy
// falls back on when no rule matches.
//
// [ParseConfig] reads the mcp_servers and builtin_tools sections of the
// configuration file:
//
//	mcp_servers:
//	  - name: files                  # tools appear as files__<tool>
//	    command: ["./files-mcp", "--root", "/srv/scratch"]
//	    env: {LOG_LEVEL: debug}
//	    dir: /srv
//	  - name: github
//	    url: https://mcp.example.com/mcp
//	    headers: {Authorization: "Bearer ${GITHUB_TOKEN}"}
//	builtin_tools:
//	  ask_human: {}
//	  http_request: {allowed_hosts: ["api.github.com", "*.internal.example"], max_response_bytes: 65536, timeout: 10s}
//	  run_command: {allow: ["kubectl", "/usr/bin/systemctl"], dir: /srv, timeout: 30s, max_output_bytes: 65536}
//	  workspace: {root: /srv/scratch, max_file_bytes: 1048576}
//
// Keys: a server takes name, command or url, env and dir (command only),
// headers (url only); ${VAR} in them comes from the environment. The
// built-ins take http_request: allowed_hosts, max_response_bytes, timeout,
// read_only; run_command: allow, dir, env, timeout, max_output_bytes;
// workspace: root, max_file_bytes; ask_human: nothing. A section left out
// leaves its tools off; unknown keys are errors.
//
// [Load] registers the enabled built-ins and the MCP servers' tools into an
// [agent.Registry] and returns a [Manager] that keeps the servers connected
// and reports their state for health checks.
//
// The built-ins and their hints (policies allow read-only tools and ask for
// destructive ones unless a rule says otherwise):
//
//   - ask_human: a question answered by a person; no hints.
//   - http_get: GET and HEAD on allowed hosts; read-only.
//   - http_request: any method on allowed hosts; destructive. The
//     http_request section enables both HTTP tools, or only http_get with
//     read_only: true.
//   - run_command: an allowlisted program, no shell; destructive.
//   - workspace_list, workspace_read: read-only.
//   - workspace_write, workspace_delete: destructive.
//
// Every built-in checks its arguments and reports a refusal or failure as an
// error result the model can read and act on.
package tools
