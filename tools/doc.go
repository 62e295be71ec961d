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
//	    max_output_bytes: 65536
//	builtin_tools:
//	  ask_human: {}
//	  http_request: {allowed_hosts: ["api.github.com", "*.internal.example", "127.0.0.1:8080"], max_response_bytes: 65536, timeout: 10s}
//	  run_command: {allow: ["kubectl", "/usr/bin/systemctl"], dir: /srv/ops, timeout: 30s, max_output_bytes: 65536}
//	  workspace: {root: /srv/scratch, max_file_bytes: 1048576}
//
// Keys: a server takes name, command or url, env and dir (command only),
// headers (url only), max_output_bytes; ${VAR} in command, env, dir, url
// and headers (and in run_command's env) comes from the environment, and
// must be set and not empty. The built-ins take http_request:
// allowed_hosts, max_response_bytes, timeout, read_only; run_command:
// allow, dir, env, timeout, max_output_bytes, allow_overlap; workspace:
// root, max_file_bytes; ask_human: nothing. A section left out leaves its
// tools off; unknown keys are errors.
//
// An allowed host without a port allows only the scheme's default port (80
// for http, 443 for https); "host:8080" allows port 8080 and "host:*" any
// port. The HTTP tools and MCP servers over HTTP use no proxy: HTTP_PROXY
// and HTTPS_PROXY are ignored.
//
// run_command's dir and the workspace root must not overlap (one inside
// the other): a file the model writes, such as .git/config or a Makefile,
// could make an allowed program run arbitrary code. allow_overlap: true in
// run_command accepts that risk. The workspace root is created if missing.
//
// [Config.Secrets] lists the values that came from ${VAR} references and
// may be secret (headers, env values, parts of URLs), for the caller's log
// redaction.
//
// [Load] registers the enabled built-ins and the MCP servers' tools into an
// [agent.Registry] and returns a [Manager] that keeps the servers connected
// and reports their state for health checks. A server's tools are
// registered once it first connects; until then the model sees one
// read-only stand-in, <server>__unavailable, which answers that the server
// is not connected and why. A server that disconnects later keeps its
// tools, which answer that it is unavailable. An MCP tool result longer
// than the server's max_output_bytes (default 64 KiB) is truncated with a
// note.
//
// The built-ins and their hints (policies allow read-only tools and ask for
// destructive ones unless a rule says otherwise):
//
//   - ask_human: a question answered by a person; no hints.
//   - http_get: GET and HEAD on allowed hosts; read-only.
//   - http_request: any method on allowed hosts; destructive. The
//     http_request section enables both HTTP tools, or only http_get with
//     read_only: true.
//   - run_command: an allowlisted program, no shell; destructive. What it
//     leaves running in the background is killed when it exits.
//   - workspace_list, workspace_read: read-only.
//   - workspace_write, workspace_delete: destructive.
//
// Every built-in checks its arguments and reports a refusal or failure as an
// error result the model can read and act on.
package tools
