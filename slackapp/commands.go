package slackapp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/slack-go/slack"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/store"
)

// CommandHelp is the text of /approvals help.
const CommandHelp = "*/approvals* manages tool-call approvals.\n" +
	"• `/approvals pending [page]`: calls waiting on a decision in this channel, a page at a time\n" +
	"• `/approvals policy list [page]`: the effective policy rules, with their layer (file or runtime) and what wins; a long list is shown a page at a time\n" +
	"• `/approvals policy add tool=&lt;glob&gt; verdict=allow|ask|deny [when='&lt;CEL&gt;'] [approvers=U1,S2] [four_eyes=true] [min_approvals=2] [ttl=2h] [remind_after=30m] [reason=\"…\"] [id=name]` (admins)\n" +
	"• `/approvals policy remove &lt;rule id&gt;` (admins; rules added here only: the policy file changes by editing it)\n" +
	"• `/approvals policy test &lt;tool&gt; &lt;json arguments&gt;`: the verdict and the rule that gives it; nothing runs\n" +
	"• `/approvals rules list [page]`: standing rules (\"Always allow here\") in this channel\n" +
	"• `/approvals rules list all [page]`: every channel's standing rules, DMs and private channels too (admins)\n" +
	"• `/approvals rules revoke &lt;id&gt;` (the rule's creator, or admins)\n" +
	"• `/approvals audit [n] [page]`: the newest n audit entries, at most 100 (default 20), a page at a time (admins)"

// commandTimeout keeps a command's answer within Slack's 3 seconds.
const commandTimeout = 2500 * time.Millisecond

// onSlash answers /approvals in the ack, as an ephemeral message.
// A payload that does not decode is logged and acked.
func (a *App) onSlash(ctx context.Context, env *envelope, start time.Time) {
	var cmd slack.SlashCommand
	if err := env.decodePayload(&cmd); err != nil {
		a.malformed(env, err, start)
		return
	}
	k := a.acker(env, start)
	a.spawn(ctx, "command", func(ctx context.Context) {
		// Deferred here, it runs before spawn recovers a panic: the
		// command is answered whatever happens.
		defer k.ack(ephemeral(commandFailedText))
		ctx, cancel := context.WithTimeout(ctx, commandTimeout)
		defer cancel()
		// Slack sends an envelope again when its ack was not received
		// (a connection refreshed meanwhile): a command that changes
		// the policy must not run twice. One that only reads is
		// answered again: the first answer never reached its reader.
		if changes(cmd.Text) && !a.firstTime(ctx, "envelope:"+env.ID) {
			a.m.duplicate()
			k.ack(ephemeral(commandRepeatedText))
			return
		}
		k.ack(ephemeral(a.command(ctx, cmd)))
	})
}

// changes reports whether the /approvals command text changes anything
// (policy add or remove, rules revoke): only those are not run twice.
func changes(text string) bool {
	args := strings.Fields(strings.ToLower(text))
	return len(args) > 1 && (args[0] == "policy" && (args[1] == "add" || args[1] == "remove") || args[0] == "rules" && args[1] == "revoke")
}

// commandFailedText answers a command whose handler failed unexpectedly.
const commandFailedText = "Something went wrong while answering this command; please try again."

// commandRepeatedText answers a command that changes something, which
// Slack delivered again.
const commandRepeatedText = "Slack sent this command again; it was received the first time, and nothing was done twice. Its first answer may not have reached you: `/approvals policy list` and `/approvals rules list` show where things stand."

// command runs one /approvals command and returns its answer.
func (a *App) command(ctx context.Context, cmd slack.SlashCommand) string {
	args := strings.Fields(cmd.Text)
	if len(args) == 0 {
		return CommandHelp
	}
	rest := func(n int) string {
		// The text after the first n words, as typed.
		s := strings.TrimSpace(cmd.Text)
		for i := 0; i < n; i++ {
			s = strings.TrimSpace(strings.TrimPrefix(s, strings.Fields(s)[0]))
		}
		return s
	}
	sub := strings.ToLower(args[0])
	switch {
	case sub == "help":
		return CommandHelp
	case sub == "pending":
		page, refusal := pageAt(args, 1, "`/approvals pending [page]` shows page `page` (from 1) of the calls waiting here")
		if refusal != "" {
			return refusal
		}
		return a.cmdPending(ctx, cmd, page)
	case sub == "audit":
		if refusal, ok := a.requireAdmin(ctx, cmd.UserID, adminRead); !ok {
			return refusal
		}
		n := 20
		if len(args) > 1 {
			v, err := strconv.Atoi(args[1])
			if err != nil || v < 1 || v > 100 {
				return "`/approvals audit [n] [page]` shows the newest n audit entries, n from 1 to 100 (default 20); " + inlineCode(args[1]) + " is not one."
			}
			n = v
		}
		page, refusal := pageAt(args, 2, "`/approvals audit [n] [page]` shows page `page` (from 1) of the newest n audit entries")
		if refusal != "" {
			return refusal
		}
		return a.cmdAudit(ctx, cmd.UserID, n, page)
	case sub == "policy" && len(args) > 1:
		switch strings.ToLower(args[1]) {
		case "list":
			page, refusal := pageAt(args, 2, "`/approvals policy list [page]` shows page `page` (from 1) of the policy rules")
			if refusal != "" {
				return refusal
			}
			return a.cmdPolicyList(ctx, page)
		case "test":
			return a.cmdPolicyTest(ctx, cmd, rest(2))
		case "add", "remove":
			if refusal, ok := a.requireAdmin(ctx, cmd.UserID, adminChange); !ok {
				return refusal
			}
			if strings.ToLower(args[1]) == "add" {
				return a.cmdPolicyAdd(ctx, cmd.UserID, rest(2))
			}
			return a.cmdPolicyRemove(ctx, cmd.UserID, rest(2))
		}
	case sub == "rules" && len(args) > 1:
		switch strings.ToLower(args[1]) {
		case "list":
			if len(args) > 2 && strings.EqualFold(args[2], "all") {
				if refusal, ok := a.requireAdmin(ctx, cmd.UserID, adminRules); !ok {
					return refusal
				}
				page, refusal := pageAt(args, 3, "`/approvals rules list all [page]` shows page `page` (from 1) of every channel's standing rules")
				if refusal != "" {
					return refusal
				}
				return a.cmdRulesListAll(ctx, cmd.UserID, page)
			}
			page, refusal := pageAt(args, 2, "`/approvals rules list [page]` shows page `page` (from 1) of this channel's standing rules")
			if refusal != "" {
				return refusal
			}
			return a.cmdRulesList(ctx, cmd.ChannelID, page, nil)
		case "revoke":
			return a.cmdRulesRevoke(ctx, cmd.UserID, rest(2))
		}
	}
	return "I don't know that command.\n\n" + CommandHelp
}

// adminUse is what an admin-only command does, for its refusal.
type adminUse int

const (
	adminChange adminUse = iota // changes the policy or standing rules
	adminRead                   // reads the audit log
	adminRules                  // lists every channel's standing rules
)

// requireAdmin allows ADMIN_USERS and the admins and owners of the bot's
// workspace (or of its Enterprise Grid organisation); not those of another
// organisation met in a shared channel, nor a deactivated account. For
// anyone else it returns false and the answer to give them.
// adminUnchecked starts requireAdmin's refusal when Slack did not say
// whether the user is an admin.
const adminUnchecked = "I couldn't check whether you are an admin"

func (a *App) requireAdmin(ctx context.Context, user string, use adminUse) (refusal string, ok bool) {
	if a.admins[user] {
		return "", true
	}
	u, err := a.api.GetUserInfoContext(ctx, user)
	if err != nil {
		a.log.Warn("look up user", "user", user, "err", err)
		switch use {
		case adminRead:
			return adminUnchecked + ", so I can't show the audit log. Please try again.", false
		case adminRules:
			return adminUnchecked + ", so I can't list every channel's standing rules. Please try again.", false
		}
		return adminUnchecked + ", so nothing changed. Please try again.", false
	}
	if a.adminOfThisWorkspace(u) {
		return "", true
	}
	switch use {
	case adminRead:
		return "Only admins can read the audit log (ADMIN_USERS, or workspace admins and owners).", false
	case adminRules:
		return "Only admins can list every channel's standing rules (ADMIN_USERS, or workspace admins and owners); `/approvals rules list` lists this channel's.", false
	}
	return "Only admins can change the policy (ADMIN_USERS, or workspace admins and owners). Nothing changed.", false
}

// adminOfThisWorkspace reports whether u, as users.info shows them, is an
// active admin or owner of the bot's workspace, or of its organisation.
func (a *App) adminOfThisWorkspace(u *slack.User) bool {
	switch {
	case u.Deleted || u.IsBot:
		return false
	case u.TeamID == a.teamID:
		return u.IsAdmin || u.IsOwner || u.IsPrimaryOwner
	}
	// On Enterprise Grid a user's team is their home workspace: an admin
	// of this one, or of the organisation, may come from another of its
	// workspaces.
	e := u.Enterprise
	if a.enterpriseID == "" || e.EnterpriseID != a.enterpriseID {
		return false
	}
	return e.IsAdmin || e.IsOwner || e.IsPrimaryOwner || slices.Contains(e.Teams, a.teamID) && (u.IsAdmin || u.IsOwner || u.IsPrimaryOwner)
}

// approvalsScanLimit bounds the pending calls /approvals pending checks,
// oldest first.
const approvalsScanLimit = 500

func (a *App) cmdPending(ctx context.Context, cmd slack.SlashCommand, page int) string {
	calls, err := a.ag.Pending(ctx, store.Filter{Limit: approvalsScanLimit})
	if err != nil {
		return "I couldn't read the pending calls right now; please try again."
	}
	var lines []string
	unchecked := 0
	for _, c := range calls {
		if c.Channel != cmd.ChannelID {
			continue
		}
		// A call whose audience could not be checked (Slack failed the
		// look-up, or took too long) is counted, not taken for one the
		// user may not see: "nothing is waiting" would be false.
		if ok, err := a.maySeeChecked(ctx, c.Call, cmd.UserID); err != nil {
			unchecked++
			continue
		} else if !ok {
			continue
		}
		lines = append(lines, fmt.Sprintf("• %s requested by %s, rule %s, expires %s", inlineCode(c.Tool), requesterRefs(c.Requester, c.Requesters), inlineCode(c.RuleID), slackDate(c.ExpiresAt)))
	}
	more := ""
	if len(calls) == approvalsScanLimit {
		more = fmt.Sprintf("Only the oldest %d pending calls of the workspace were checked; more may be waiting here.\n", approvalsScanLimit)
	}
	if unchecked > 0 {
		more += fmt.Sprintf("%d more call(s) here could not be checked against who may see them (Slack did not answer in time): try again in a moment.\n", unchecked)
	}
	if len(lines) == 0 {
		if unchecked > 0 {
			return more
		}
		return "Nothing is waiting on approval in this channel.\n" + more
	}
	text, pages := answerPage(fmt.Sprintf("*%d call(s) waiting on approval here:*\n", len(lines)), lines, more, page, func(p int) string {
		return fmt.Sprintf("/approvals pending %d", p)
	})
	if text == "" {
		return fmt.Sprintf("There is no page %d: the %d calls waiting here fit on %d.", page, len(lines), pages)
	}
	return text
}

// auditLookups bounds the time /approvals audit spends finding out which
// conversations its reader can see.
const auditLookups = 2 * time.Second

// auditScan bounds the audit entries /approvals audit reads to find the
// newest n its reader may see.
const auditScan = 500

// cmdAudit shows user (an admin) the newest n audit entries they may see:
// those made outside a conversation (policy changes), those of
// conversations they can see, and those of calls they decided. Entries
// about other conversations are left out, and counted. The entries are
// shown a page at a time (see answerPage); page counts from 1.
func (a *App) cmdAudit(ctx context.Context, user string, n, page int) string {
	entries, err := a.st.AuditLog(ctx, max(n, auditScan))
	if err != nil {
		return "I couldn't read the audit log right now; please try again."
	}
	if len(entries) == 0 {
		return "The audit log is empty."
	}
	// A call by its conversation and id: the model names a call that
	// needs no card, and its id is its own only in its conversation.
	type callIn struct{ thread, id string }
	// Only a decision makes a call the user's to read whole: having asked
	// for it, or asked Why? about it, in a conversation they have left
	// since, shows them their own entries and no one else's.
	decided := map[callIn]bool{}
	for _, e := range entries {
		if e.Actor == user && e.CallID != "" && e.Action == "decide" {
			decided[callIn{e.Thread, e.CallID}] = true
		}
	}
	// The look-ups fit in the command's answer (Slack waits 3 s for it);
	// a conversation not checked in time counts as one not seen.
	lctx, cancel := context.WithTimeout(ctx, auditLookups)
	defer cancel()
	sees := map[string]bool{}
	visible := func(e store.AuditEntry) bool {
		if e.Channel == "" || e.Actor == user || decided[callIn{e.Thread, e.CallID}] {
			return true
		}
		ok, known := sees[e.Channel]
		if !known {
			ok = lctx.Err() == nil && a.inAudience(lctx, e.Channel, user)
			sees[e.Channel] = ok
		}
		return ok
	}
	var lines []string
	left := 0
	for _, e := range entries {
		if len(lines) == n {
			break
		}
		if !visible(e) {
			left++
			continue
		}
		lines = append(lines, auditLine(e))
	}
	tail := ""
	if left > 0 {
		tail = fmt.Sprintf("_%d newer entries about conversations you are not part of (or that could not be checked in time) are left out._\n", left)
	}
	if len(lines) == 0 {
		return "Nothing in the audit log is about a conversation you can see.\n" + tail
	}
	text, pages := answerPage("*Audit log, newest first:*\n", lines, tail, page, func(p int) string {
		return fmt.Sprintf("/approvals audit %d %d", n, p)
	})
	if text == "" {
		return fmt.Sprintf("There is no page %d: the newest %d entries you may see fit on %d.", page, len(lines), pages)
	}
	return text
}

// answerPageRoom is kept free on each page of answerPage for the line that
// says which entries it shows.
const answerPageRoom = 200

// answerPage lays the entries of a long list (one line each, without its
// newline) out on pages of whole entries, each of which fits in a
// command's answer (see ephemeral) with head before the entries and tail
// after them, and returns page p (from 1) and the number of pages. When
// there are several, a last line says which entries the page shows and,
// but on the last page, how many more there are and the command that shows
// the next page (next(p+1)). An entry too long for a page on its own gets
// one, which ephemeral cuts. The text is empty when p is past the last
// page.
func answerPage(head string, entries []string, tail string, p int, next func(page int) string) (string, int) {
	return answerPageOf(head, entries, tail, p, next, nil)
}

// answerPageOf is answerPage that, with shown set, shows entry i of the
// page as shown(i), which must be no longer than entries[i] (for a
// look-up made for the entries shown only).
func answerPageOf(head string, entries []string, tail string, p int, next func(page int) string, shown func(i int) string) (string, int) {
	roomChars := maxEphemeralChars - textLen(head) - textLen(tail) - answerPageRoom
	roomBytes := maxEphemeralBytes - encodedLen(head) - encodedLen(tail) - 2*answerPageRoom
	fit := func(e string) string { return fitEntry(e, roomChars, roomBytes) }
	var starts []int // the index of each page's first entry
	chars, bytes := 0, 0
	for i, e := range entries {
		e = fit(e)
		c, b := textLen(e)+1, encodedLen(e+"\n")
		if len(starts) == 0 || chars+c > roomChars || bytes+b > roomBytes {
			starts = append(starts, i)
			chars, bytes = 0, 0
		}
		chars += c
		bytes += b
	}
	pages := len(starts)
	if p < 1 || p > pages {
		return "", pages
	}
	from, to := starts[p-1], len(entries)
	if p < pages {
		to = starts[p]
	}
	var b strings.Builder
	b.WriteString(head)
	for i := from; i < to; i++ {
		e := entries[i]
		if shown != nil {
			e = shown(i)
		}
		b.WriteString(fit(e) + "\n")
	}
	b.WriteString(tail)
	if pages > 1 {
		fmt.Fprintf(&b, "_Page %d of %d: entries %d–%d of %d.", p, pages, from+1, to, len(entries))
		if p < pages {
			fmt.Fprintf(&b, " %d more not shown: `%s` shows the next page.", len(entries)-to, next(p+1))
		}
		b.WriteString("_\n")
	}
	return b.String(), pages
}

// fitEntry is e cut, if it must be, to fit a page of answerPage by itself
// (room characters, roomBytes once encoded), with the ellipsis that says
// so, and its inline code closed: a page's footer, which says what other
// pages hold, always follows it.
func fitEntry(e string, room, roomBytes int) string {
	if textLen(e)+1 <= room && encodedLen(e+"\n") <= roomBytes {
		return e
	}
	for n := room - 2; n > 0; n = n * 9 / 10 {
		cut, _ := truncate(e, n)
		if strings.Count(cut, "`")%2 == 1 {
			cut += "`"
		}
		if encodedLen(cut+"\n") <= roomBytes {
			return cut
		}
	}
	return ellipsis
}

// encodedLen is the length of s encoded as a JSON string, without quotes.
func encodedLen(s string) int {
	b, _ := json.Marshal(s)
	return len(b) - 2
}

// pageAt reads the page number (from 1) that args[i] gives, 1 when there
// is none; a word that is no page number gets refusal, which says what
// usage is and that the word is not a page number.
func pageAt(args []string, i int, usage string) (page int, refusal string) {
	if len(args) <= i {
		return 1, ""
	}
	v, err := strconv.Atoi(args[i])
	if err != nil || v < 1 {
		return 0, usage + "; " + inlineCode(args[i]) + " is not a page number."
	}
	return v, ""
}

// channelIDRE is the shape of a Slack channel id that may be linked.
var channelIDRE = regexp.MustCompile(`^[CGD][A-Z0-9]+$`)

// auditLine renders one audit entry: each field once, and every text that
// came from a person or the model (tool names, rule text, reasons) in a code
// span, so it shows as typed and cannot format or ping.
func auditLine(e store.AuditEntry) string {
	parts := []string{e.At.UTC().Format("2006-01-02 15:04:05Z"), inlineCode(e.Action), "by " + userRef(e.Actor, "someone unknown")}
	if e.Tool != "" {
		// A tool's name is a valid one (the agent audits any other as
		// invalid_tool_name); hidden characters are written out all the
		// same, as the call id's are.
		tool, _ := revealHidden(e.Tool)
		parts = append(parts, "tool "+inlineCode(tool))
	}
	if e.Channel != "" {
		where := "in " + inlineCode(e.Channel)
		if channelIDRE.MatchString(e.Channel) {
			where = "in <#" + e.Channel + ">"
		}
		if _, _, thread, ok := parseKey(e.Thread); ok {
			where += " thread " + inlineCode(thread)
		}
		parts = append(parts, where)
	}
	if e.CallID != "" {
		// The model's server chooses a call's id, and a person wrote the
		// detail (a reason): hidden characters are written out, as on
		// the cards.
		id, _ := revealHidden(e.CallID)
		parts = append(parts, "call "+inlineCode(id))
	}
	if e.Fingerprint != "" {
		parts = append(parts, "args "+inlineCode(shortFP(e.Fingerprint)))
	}
	if e.Decision != "" {
		parts = append(parts, "decision "+inlineCode(e.Decision))
	}
	if e.Outcome != "" {
		parts = append(parts, "outcome "+inlineCode(e.Outcome))
	}
	if e.Detail != "" {
		detail, _ := revealHidden(e.Detail)
		detail, _ = truncate(detail, 120)
		parts = append(parts, inlineCode(detail))
	}
	return "• " + strings.Join(parts, " · ")
}

func shortFP(fp string) string {
	if len(fp) > 12 {
		return fp[:12]
	}
	return fp
}

// cmdPolicyList shows the effective policy rules, a page at a time (see
// answerPage); page counts from 1.
func (a *App) cmdPolicyList(ctx context.Context, page int) string {
	rules, err := a.policy.Rules(ctx)
	if err != nil {
		return "I couldn't read the policy right now; please try again."
	}
	if len(rules) == 0 {
		return "No policy rules: tool annotations decide (read-only tools run, others ask), then the default."
	}
	lines := make([]string, 0, len(rules))
	for i, r := range rules {
		line := fmt.Sprintf("%d. %s [%s] %s", i+1, inlineCode(r.ID), layerName(r.Source), inlineCode(ruleBody(r.Rule)))
		if r.Source != approvals.SourceFile {
			if over := a.policy.Overrules(r.Rule); len(over) > 0 {
				line += ": " + overrulesText(over)
			}
		}
		lines = append(lines, line)
	}
	text, pages := answerPage(policyLayersText+"\n", lines, "", page, func(p int) string {
		return fmt.Sprintf("/approvals policy list %d", p)
	})
	if text == "" {
		return fmt.Sprintf("There is no page %d: the %d policy rules fit on %d.", page, len(rules), pages)
	}
	return text
}

// ruleBody is a rule's text without its id, for lines that name the id
// already.
func ruleBody(r approvals.Rule) string {
	r.ID = ""
	return r.String()
}

// policyLayersText says how the two layers of rules combine.
const policyLayersText = "*Policy rules.* Two layers: the policy file (a floor) and rules added at run time. " +
	"In each layer the first matching rule counts (runtime rules newest first); the stricter of the two wins " +
	"(deny > ask > allow), so a runtime rule can tighten a call but never relax a file rule."

// layerName is how policy list names a rule's layer.
func layerName(s approvals.Source) string {
	if s == approvals.SourceFile {
		return "file"
	}
	return "runtime"
}

// overrulesText says which stricter file rules win over a runtime rule.
func overrulesText(over []approvals.Overrule) string {
	var always, partly []string
	for _, o := range over {
		name := fmt.Sprintf("%s (%s)", inlineCode(o.Rule.ID), o.Rule.Verdict)
		if o.Always {
			always = append(always, name)
		} else {
			partly = append(partly, name)
		}
	}
	var parts []string
	if len(always) > 0 {
		parts = append(parts, "no effect where the stricter file rule "+strings.Join(always, ", ")+" applies: it matches every call this rule does")
	}
	if len(partly) > 0 {
		parts = append(parts, "the stricter file rule "+strings.Join(partly, ", ")+" wins where both match")
	}
	return strings.Join(parts, "; ")
}

func (a *App) cmdPolicyAdd(ctx context.Context, user, text string) string {
	r, err := approvals.ParseRule(text)
	if err != nil {
		return "That rule is not valid: " + Escape(err.Error()) + "\nNothing changed."
	}
	added, err := a.policy.AddRule(ctx, user, r)
	if errors.Is(err, approvals.ErrUnconfirmed) {
		return fmt.Sprintf("I couldn't tell whether rule %s was added: %s. `/approvals policy list` shows whether it is in force; to add it again, give its id (`id=%s`), which is refused if it is there.", inlineCode(added.ID), Escape(err.Error()), Escape(added.ID))
	}
	if err != nil && !madeAnyway(err) {
		return "I couldn't add the rule: " + Escape(err.Error())
	}
	// The rule is clipped so that the notes after it (warnings among
	// them) always fit in the answer.
	out := fmt.Sprintf("Added runtime rule %s: %s", inlineCode(added.ID), clippedCode(ruleBody(added))) + notAudited(err)
	if over := a.policy.Overrules(added); len(over) > 0 {
		out += "\nNote: " + overrulesText(over) + ". The policy file is a floor: change the file to relax it."
	}
	if keep := a.policy.KeepApprovers(added); len(keep) > 0 {
		var ids []string
		for _, r := range keep {
			ids = append(ids, inlineCode(r.ID))
		}
		out += "\nNote: where the file rule " + strings.Join(ids, ", ") + " asks too, its approvers decide the call, not this rule's (the file is a floor); this rule adds only its tightening there."
	}
	if names := a.toolNames(); approvals.MatchesNone(added.Tool, names) {
		out += fmt.Sprintf("\nNote: none of the %d tools I have now is named like %s (MCP tools are named `server__tool`): check the name. The rule applies to such a tool once one is listed.", len(names), inlineCode(added.Tool))
	}
	if n := a.policy.Unreminded(added); n != "" {
		out += "\nNote: " + Escape(n) + "."
	}
	if unable := a.unableNamed(ctx, a.cachedLookup(), added.Approvers); len(unable) > 0 {
		out += "\nNote: " + unableText(unable) + ": calls this rule asks for wait on the others, or until they expire."
	}
	if def, relaxes := a.policy.RelaxesDefault(added); relaxes {
		out += fmt.Sprintf("\nNote: where no file rule matches a call, this rule decides it instead of the file's default (%s) and the tool's annotations (which ask unless it is read-only).", def)
	}
	loosened, err := a.policy.Loosens(ctx, added)
	if err != nil {
		a.log.Warn("list the runtime rules a new one comes before", "rule", added.ID, "err", err)
	}
	if len(loosened) > 0 {
		var ids []string
		for _, r := range loosened {
			what := string(r.Verdict)
			if drops := approvals.AskDrops(added, r); r.Verdict == added.Verdict && len(drops) > 0 {
				// Both ask: what the older one needs that this does not.
				what += ", with " + strings.Join(drops, ", ")
			}
			ids = append(ids, fmt.Sprintf("%s (%s)", inlineCode(r.ID), what))
		}
		out += fmt.Sprintf("\n*Careful:* runtime rules apply newest first, so where this rule and the stricter older runtime rule %s both match, this one decides, and is looser. If that is not what you meant: `/approvals policy remove %s`.",
			strings.Join(ids, ", "), added.ID)
	}
	return out
}

// toolNames lists the names of the tools the agent has now.
func (a *App) toolNames() []string {
	var names []string
	if a.ag != nil {
		for _, t := range a.ag.Tools().List() {
			names = append(names, t.Name)
		}
	}
	return names
}

func (a *App) cmdPolicyRemove(ctx context.Context, user, id string) string {
	id = strings.TrimSpace(id)
	if id == "" {
		return "Which rule? `/approvals policy remove &lt;rule id&gt;`"
	}
	err := a.policy.RemoveRule(ctx, user, id)
	switch {
	case errors.Is(err, approvals.ErrFileRule):
		return fmt.Sprintf("Rule %s is in the policy file, which is a floor: change the file to remove it. Nothing changed.", inlineCode(id))
	case errors.Is(err, approvals.ErrUnknownRule):
		return fmt.Sprintf("There is no rule %s. Nothing changed.", inlineCode(id))
	case errors.Is(err, approvals.ErrUnconfirmed):
		return fmt.Sprintf("I couldn't tell whether rule %s was removed: %s. `/approvals policy list` shows whether it is still in force; removing it again is safe.", inlineCode(id), Escape(err.Error()))
	case err != nil && !madeAnyway(err):
		return "I couldn't remove the rule: " + Escape(err.Error())
	}
	return fmt.Sprintf("Removed rule %s.", inlineCode(id)) + notAudited(err)
}

// notAudited warns, after the answer to a change that was made, that its
// audit entry could not be written (err wraps approvals.ErrAuditFailed), or
// that the store's replicas did not acknowledge it (store.ErrNotReplicated),
// so that no one makes the change again; it is empty when err is nil.
func notAudited(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, store.ErrNotReplicated) && !errors.Is(err, approvals.ErrAuditFailed):
		return "\n*Warning:* the change was made, but the store's replicas did not acknowledge it, and a failover may lose it: check it is there after one. " + Escape(err.Error())
	}
	return "\n*Warning:* the change was made, but the audit log does not record it: " + Escape(err.Error())
}

// madeAnyway reports whether err, from a change, says it was made all the
// same: without its audit entry, or on the store's primary only.
func madeAnyway(err error) bool {
	return errors.Is(err, approvals.ErrAuditFailed) || errors.Is(err, store.ErrNotReplicated)
}

func (a *App) cmdPolicyTest(ctx context.Context, cmd slack.SlashCommand, text string) string {
	text = strings.TrimSpace(text)
	tool, args := text, ""
	if i := strings.IndexFunc(text, unicode.IsSpace); i >= 0 {
		// Any space ends the tool's name: a line break, a tab.
		tool, args = text[:i], strings.TrimSpace(text[i:])
	}
	if tool == "" {
		return "Usage: `/approvals policy test &lt;tool&gt; &lt;json arguments&gt;`"
	}
	if args == "" {
		args = "{}"
	}
	typed := args
	args = plainText(typed)
	if !json.Valid([]byte(args)) {
		// Typed in Slack, the JSON's quotes may have become typographic
		// ones: read it as policy add reads a rule. Valid JSON is left
		// as it is, typographic quotes inside its strings and all.
		args = approvals.NormalizeText(typed)
	}
	in := approvals.Input{Tool: tool, Args: json.RawMessage(args), User: cmd.UserID, Channel: cmd.ChannelID}
	human := false // a question for people, which no verdict runs
	ag := a.ag
	if ag != nil {
		t, ok := ag.Tools().Lookup(tool)
		if !ok {
			return fmt.Sprintf("There is no tool %s.", inlineCode(tool))
		}
		in.Hints, human = t.Annotations, t.Human
		in.Question = human
	}
	// The agent's own checks (one JSON object, its depth, keys that look
	// alike), then the tool's schema: arguments either refuses never reach
	// the policy, which judges them with the schema's defaults, as a call
	// of the model is judged.
	canonical, err := agent.CheckArgs(in.Args)
	if err == nil && ag != nil {
		var filled json.RawMessage
		if filled, err = ag.Tools().Filled(tool, in.Args); err == nil {
			canonical, err = agent.CheckArgs(filled)
		}
	}
	if err != nil {
		return "Those arguments would be refused before the policy: " + Escape(err.Error())
	}
	in.Args = canonical
	v, err := a.policy.Test(ctx, in)
	if human && v.Action == approvals.Allow {
		// As a real call: a question for people cannot be answered by
		// running it, so it is asked.
		v.Action = approvals.Ask
	}
	// The arguments are clipped so that the verdict after them always
	// fits in the answer.
	out := fmt.Sprintf("%s %s → *%s* by rule %s", inlineCode(tool), clippedCode(string(canonical)), v.Action, inlineCode(v.RuleID))
	if v.Reason != "" {
		out += ": " + Escape(v.Reason)
	}
	if v.Problem != "" {
		out += "\nCould not evaluate: " + inlineCode(clip(oneLine(v.Problem), 500))
	}
	if len(v.Approvers) > 0 {
		out += "\nApprovers: " + inlineCode(strings.Join(v.Approvers, ", "))
	}
	if v.FourEyes {
		out += " (four eyes)"
	}
	if v.MinApprovals > 1 {
		out += fmt.Sprintf("\nNeeds %d distinct approvers.", v.MinApprovals)
	}
	if err != nil {
		out += "\n(The policy's stored rules could not be read: this is the verdict while they cannot be.)"
	}
	return out + "\nNothing was run."
}

// cmdRulesListAll shows user (an admin) every channel's standing rules, a
// page at a time, each saying where it is: the channel, where user can see
// it, as the audit log shows its entries, and otherwise only that it is a
// conversation they are not part of. Only the rules of the page shown are
// looked up.
func (a *App) cmdRulesListAll(ctx context.Context, user string, page int) string {
	// The look-ups fit in the command's answer, as the audit log's do.
	lctx, cancel := context.WithTimeout(ctx, auditLookups)
	defer cancel()
	sees := map[string]bool{}
	where := func(channel string) string {
		ok, known := sees[channel]
		if !known {
			ok = lctx.Err() == nil && a.inAudience(lctx, channel, user)
			sees[channel] = ok
		}
		if !ok {
			return unseenOrUnchecked
		}
		return channelRef(channel)
	}
	return a.cmdRulesList(ctx, "", page, where)
}

// unseenChannel stands for a channel someone is not shown, as not theirs;
// unseenOrUnchecked, in a list, for one whose look-up may not have been
// made in time too.
const (
	unseenChannel     = "a conversation you are not part of"
	unseenOrUnchecked = unseenChannel + " (or that could not be checked in time)"
)

// cmdRulesList shows the standing rules of a channel, or with channel
// empty of every channel, each saying where(its channel), a page at a
// time (see answerPage); page counts from 1. where is called for the rules
// of the page shown only.
func (a *App) cmdRulesList(ctx context.Context, channel string, page int, where func(channel string) string) string {
	rules, err := a.policy.StandingRules(ctx, channel)
	if err != nil {
		return "I couldn't read the standing rules right now; please try again."
	}
	scope, none, command := "this channel", "this channel", "/approvals rules list %d"
	if channel == "" {
		scope, none, command = "every channel", "any channel", "/approvals rules list all %d"
	}
	if len(rules) == 0 {
		return "No standing rules in " + none + "."
	}
	lineOf := func(r approvals.StandingRule, in string) string {
		line := fmt.Sprintf("• %s: %s allowed, by %s", inlineCode(r.ID), inlineCode(r.Tool), userRef(r.CreatedBy, "someone unknown"))
		if in != "" {
			line += " in " + in
		}
		if r.Fingerprint != "" {
			line += " for exactly the arguments " + inlineCode(shortFP(r.Fingerprint))
		}
		if r.When != "" {
			line += " when " + inlineCode(r.When)
		}
		if !r.ExpiresAt.IsZero() {
			line += ", until " + slackDate(r.ExpiresAt)
		}
		return line
	}
	// The pages are laid out with where's longest answer, which the
	// page shown then replaces.
	laidOut := ""
	if where != nil {
		laidOut = unseenOrUnchecked
	}
	lines := make([]string, 0, len(rules))
	for _, r := range rules {
		lines = append(lines, lineOf(r, laidOut))
	}
	var shown func(i int) string
	if where != nil {
		shown = func(i int) string {
			line := lineOf(rules[i], where(rules[i].Channel))
			if textLen(line) > textLen(lines[i]) || encodedLen(line) > encodedLen(lines[i]) {
				return lines[i]
			}
			return line
		}
	}
	text, pages := answerPageOf("*Standing rules in "+scope+":*\n", lines, "", page, func(p int) string {
		return fmt.Sprintf(command, p)
	}, shown)
	if text == "" {
		return fmt.Sprintf("There is no page %d: the %d standing rules of %s fit on %d.", page, len(rules), scope, pages)
	}
	return text
}

func (a *App) cmdRulesRevoke(ctx context.Context, user, id string) string {
	id = strings.TrimSpace(id)
	if id == "" {
		return "Which rule? `/approvals rules revoke &lt;id&gt;`"
	}
	return a.revokeStanding(ctx, user, id)
}

// inAudience reports whether user can see channel, as the agent checks
// it for a decision on a call open to anyone in its conversation: the
// requester too, who may have left it. A failed check hides the call.
func (a *App) inAudience(ctx context.Context, channel, user string) bool {
	ok, err := a.canSee(ctx, channel, user)
	return ok && err == nil
}

// canSee is audience.CanSee, with a failed look-up logged.
func (a *App) canSee(ctx context.Context, channel, user string) (bool, error) {
	ok, err := a.audience.CanSee(ctx, channel, user)
	if err != nil {
		a.log.Warn("check who can see a conversation", "channel", channel, "user", user, "err", err)
	}
	return ok, err
}

// homeScanLimit bounds the pending calls read for the Home tabs (the
// oldest), and a user's own requests, so that a large backlog does not
// become a long read nor a long series of group and channel lookups. The
// tab shows the first maxHomeInbox entries anyway; past the limit its
// counts cover the calls read.
const homeScanLimit = 500

// homeTab is a Home tab publishHomes publishes: whose, and the hash of
// the view Slack shows them as this process knows it ("" when it does
// not). check marks a tab published without a hash, to be compared with
// a reading made after it; sent is the view it was published with.
type homeTab struct {
	user  string
	hash  string
	check bool
	sent  []byte
}

// publishHomes shows each user's approver inbox and own waiting requests
// (see homeView), one tab at a time, from one listing of the pending calls
// and of the standing rules. The caller holds the users' tabs (see
// homeRefresh). It stops early when stopping is closed.
//
// Other replicas publish the same tabs, unordered with this process. So a
// tab is published with the hash Slack gave the view this process last
// published for it, taken before the reading: Slack refuses the publish
// (hash_conflict) once another one replaced that view, from a reading
// that may be newer than this one. A refused tab is read again and
// published without a hash, as is a tab whose hash this process does not
// know. Such a publish may itself replace a newer view, published in the
// moment between its reading and its own publish, so it is checked
// against a reading made after it, and published again, with the hash it
// got, if that reading differs: only a still later publish can refuse
// that one. The view that stays thus shows a reading made after the
// publish it replaced. Only the tabs that need it are read again,
// together: at most two more listings a call, none once this process
// published each tab last.
func (a *App) publishHomes(ctx context.Context, users []string, stopping <-chan struct{}) {
	if a.ag == nil || len(users) == 0 {
		return
	}
	// Each hash is taken before the reading, so that a publish Slack
	// accepts with it replaced a view read no later than this one.
	tabs := make([]homeTab, 0, len(users))
	for _, u := range users {
		tabs = append(tabs, homeTab{user: u, hash: a.homes.hashOf(u)})
	}
	for len(tabs) > 0 && !closed(stopping) {
		tabs = a.publishHomesOnce(ctx, tabs, stopping)
	}
}

// publishHomesOnce reads the pending calls and the standing rules, publishes
// each tab of tabs from that reading, and returns those to publish again
// from a later reading (see publishHomes): a tab moves from a publish with
// its hash to one without, and from that to its check, never back.
func (a *App) publishHomesOnce(ctx context.Context, tabs []homeTab, stopping <-chan struct{}) []homeTab {
	ag := a.ag
	scanned, err := ag.Pending(ctx, store.Filter{Limit: homeScanLimit})
	if err != nil {
		// A tab published from no reading would say nothing waits: the
		// tabs stay as they are, and the next round publishes them.
		a.log.Warn("list pending calls for Home tabs; they are published in the next round", "users", len(tabs), "err", err)
		users := make([]string, len(tabs))
		for i, tab := range tabs {
			users[i] = tab.user
		}
		a.homes.later(users)
		return nil
	}
	if len(scanned) == homeScanLimit {
		a.log.Info("many pending calls; the Home tab checks the oldest ones", "checked", homeScanLimit)
	}
	rules, rulesErr := a.policy.StandingRules(ctx, "")
	if rulesErr != nil {
		a.log.Warn("list standing rules", "err", rulesErr)
	}
	var again []homeTab
	for _, tab := range tabs {
		if closed(stopping) {
			return nil
		}
		view, unchecked, unread := a.homeView(ctx, ag, scanned, rules, rulesErr, tab.user)
		if unread != nil {
			// A tab built from a reading that failed would say none of
			// the user's requests, or standing rules, are there: it
			// stays as it is, for the next round.
			a.log.Warn("build a Home tab; it is published in the next round", "user", tab.user, "err", unread)
			a.homes.later([]string{tab.user})
			continue
		}
		if unchecked != nil && mayPass(unchecked) {
			// Published without the calls Slack did not say the user
			// may see (a channel's members it did not list), and again
			// in the next round, which may.
			a.log.Warn("check a call for a Home tab; the tab is published again in the next round", "user", tab.user, "err", unchecked)
			a.homes.later([]string{tab.user})
		}
		var sent []byte
		if tab.check || tab.hash == "" {
			sent, _ = json.Marshal(view)
		}
		if tab.check && bytes.Equal(sent, tab.sent) {
			continue // the tab shows this reading
		}
		req := slack.PublishViewContextRequest{UserID: tab.user, View: view}
		if tab.hash != "" {
			req.Hash = &tab.hash
		}
		resp, err := a.api.PublishViewContext(ctx, req)
		switch {
		case err == nil:
			a.homes.setHash(tab.user, resp.Hash)
			if tab.hash == "" && !tab.check && resp.Hash != "" {
				again = append(again, homeTab{user: tab.user, hash: resp.Hash, check: true, sent: sent})
			}
		case hashConflict(err):
			// Another replica published the tab since this process
			// did: its reading may be older than this one, or newer.
			a.homes.setHash(tab.user, "")
			if !tab.check {
				again = append(again, homeTab{user: tab.user})
			}
			// A check's publish was refused for a publish made after
			// the one it checks, from a reading after it, which is
			// checked likewise if it went without a hash.
		case mayPass(err):
			// Refused for now (rate limited past the client's retries,
			// Slack's own failure): published in the next round, not
			// left showing what it showed.
			a.log.Warn("publish home; it is published in the next round", "user", tab.user, "err", err)
			a.homes.later([]string{tab.user})
		default:
			a.log.Warn("publish home", "user", tab.user, "err", err)
		}
	}
	return again
}

// mayPass reports whether err is a failure of Slack's, or of the way to
// it, that may pass (a rate limit, its own failure, a 5xx, a call that
// got no answer in time): what failed is worth making again.
func mayPass(err error) bool {
	_, unanswered := errors.AsType[*url.Error](err)
	return refusedBySlack(err) || unanswered || errors.Is(err, context.DeadlineExceeded)
}

// hashConflict reports whether err is Slack refusing a view published with
// the hash of a view that was replaced since.
func hashConflict(err error) bool {
	e, ok := errors.AsType[slack.SlackErrorResponse](err)
	return ok && e.Err == "hash_conflict"
}

// homeView is user's Home tab, from scanned, the oldest pending calls, and
// rules, the standing rules (unless rulesErr): the inbox lists the pending
// calls the user may decide (those naming the user or a user group they
// belong to, and those open to anyone in their conversation that the user
// can see), then come their own waiting requests and standing rules.
//
// unchecked is the error of a check that could not say whether a call is
// the user's to see or decide (Slack did not list a channel's members or a
// group's), unread that of a reading that failed (their own requests, the
// standing rules): the view then leaves out what may be there.
func (a *App) homeView(ctx context.Context, ag Agent, scanned []agent.PendingCall, rules []approvals.StandingRule, rulesErr error, user string) (_ slack.HomeTabViewRequest, unchecked, unread error) {
	var inbox, mine []Card
	for _, c := range scanned {
		if err := a.mayDecide(ctx, c.Call, user); err != nil {
			if errors.Is(err, approvals.ErrUnverified) {
				unchecked = errors.Join(unchecked, err)
			}
			continue
		}
		card := cardOf(c, nil)
		card.CopyOf = c.Channel // the Home tab is no channel: its entry names the call's
		inbox = append(inbox, card)
	}
	own, err := a.ownPending(ctx, ag, scanned, user)
	if err != nil {
		unread = err
	}
	for _, c := range own {
		// Asked for in a channel the user has left since: not theirs
		// to see any more.
		ok, err := a.maySeeChecked(ctx, c.Call, user)
		if err != nil {
			unchecked = errors.Join(unchecked, err)
		}
		if ok && err == nil {
			mine = append(mine, cardOf(c, nil))
		}
	}
	checked := 0
	if len(scanned) == homeScanLimit {
		checked = homeScanLimit
	}
	view := homeViewOf(inbox, mine, checked)
	if rulesErr == nil {
		var own []approvals.StandingRule
		for _, r := range rules {
			if r.CreatedBy == user {
				own = append(own, r)
			}
		}
		view.Blocks.BlockSet = append(view.Blocks.BlockSet, StandingRuleBlocks(own, maxViewBlocks-len(view.Blocks.BlockSet))...)
	} else {
		unread = rulesErr
	}
	return view, unchecked, unread
}

// ownPending returns the oldest homeScanLimit pending calls user
// requested, alone or with others (see requestedBy): from scanned, the
// oldest pending calls, when that listing is complete (shorter than
// homeScanLimit), and from the store otherwise.
func (a *App) ownPending(ctx context.Context, ag Agent, scanned []agent.PendingCall, user string) ([]agent.PendingCall, error) {
	if len(scanned) == homeScanLimit {
		own, err := ag.Pending(ctx, store.Filter{Requester: user, Limit: homeScanLimit})
		if err != nil {
			return nil, fmt.Errorf("list own requests: %w", err)
		}
		return own, nil
	}
	var own []agent.PendingCall
	for _, c := range scanned {
		if slices.Contains(requestedBy(c.Call), user) {
			own = append(own, c)
		}
	}
	return own, nil
}

// requestedBy lists the people whose request c is, as the store lists
// them for a Filter's Requester (see store.Call.RequestedBy).
func requestedBy(c agent.Call) []string {
	return store.Call{Requester: c.Requester, Requesters: c.Requesters}.RequestedBy()
}

// clippedCode is s as inline code, clipped so that it takes at most 1,500
// characters once escaped: what an answer says after it always fits.
func clippedCode(s string) string {
	shown := inlineCode(s)
	for n := 1500; textLen(shown) > 1500; n = n * 2 / 3 {
		shown = inlineCode(clip(s, n))
	}
	return shown
}
