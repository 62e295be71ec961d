// Package approvals decides what happens to an agent's tool calls and who
// may decide the ones that wait on people.
//
// A Policy is an ordered list of Rules read from the `policy:` section of
// the config file with ParseConfig. Each rule names tools with a glob, may
// narrow itself with a CEL condition over the call's arguments, the user and
// the channel, and gives a verdict: Allow, Ask or Deny. The first matching
// rule wins; with none, the tool's MCP hints and then the policy default
// decide. Evaluation is deterministic and fails closed: a condition that
// cannot be evaluated asks (or denies, if its rule denies).
//
// An Engine merges the file policy with changes made with the
// `/approvals policy` slash command (ParseRule reads their one-line form)
// and with standing rules made by Remember decisions, all kept in a store so
// that every replica of the bot judges alike, and writes each change to the
// audit log.
//
// Fingerprint binds a decision to the exact arguments an approver was
// shown, and Authorize says whether someone may decide a call.
package approvals
