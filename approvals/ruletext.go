package approvals

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// ParseRule builds a rule from the one-line form used by
// `/approvals policy add`, and validates it like a rule of the policy file
// (including compiling its condition). The line is a list of key=value
// fields separated by spaces, in any order:
//
//	tool=files__delete_* verdict=ask when='args.path.startsWith("/tmp")' approvers=U1ABC,S2DEF four_eyes=true ttl=2h reason="Deleting needs review"
//
// Keys: tool (required, a glob), verdict (required: allow, ask or deny),
// id, when (a CEL bool condition), reason, approvers (comma-separated Slack
// user and user-group ids; Slack mentions such as <@U1ABC|ana> and
// <!subteam^S2DEF|@ops> are accepted too), four_eyes (true or false),
// ttl (a Go duration such as 2h or 90m, at most 672h), min_approvals (a whole number,
// 1 or more: distinct approvers needed) and remind_after (a duration). A value containing spaces is
// quoted: 'single quotes' take everything literally up to the next single
// quote; "double quotes" allow \" and \\ inside. Typographic quotes (“ ” ‘ ’)
// count as plain ones, and Slack's escapes &amp; &lt; &gt; are decoded, so
// text pasted from Slack works as typed. Each key may appear once.
// Rule.String gives the same form back.
func ParseRule(text string) (Rule, error) {
	if r, at, ok := hiddenRune(text); ok {
		// Pasted text can carry a zero-width space or a bidirectional
		// control that no reply shows: a condition that reads as
		// args.service == "payroll" would then never match payroll.
		return Rule{}, fmt.Errorf("the rule holds an invisible character (U+%04X, at character %d); type it again, or write it as \\u%04x inside a CEL string if it is meant", r, at, r)
	}
	fields, err := splitFields(NormalizeText(text))
	if err != nil {
		return Rule{}, err
	}
	if len(fields) == 0 {
		return Rule{}, errors.New("empty rule: give at least tool=<glob> verdict=<allow|ask|deny>")
	}
	var r Rule
	seen := make(map[string]bool)
	for _, f := range fields {
		if seen[f.key] {
			return Rule{}, fmt.Errorf("%s: given twice", f.key)
		}
		seen[f.key] = true
		switch f.key {
		case "id":
			if err := validateID(f.value); err != nil {
				return Rule{}, fmt.Errorf("id: %w", err)
			}
			r.ID = f.value
		case "tool":
			r.Tool = f.value
		case "verdict":
			r.Verdict = Action(strings.ToLower(f.value))
		case "when":
			if strings.TrimSpace(f.value) == "" {
				return Rule{}, fmt.Errorf("when: %w", errEmptyWhen)
			}
			r.When = f.value
		case "reason":
			r.Reason = f.value
		case "approvers":
			for a := range strings.SplitSeq(f.value, ",") {
				if a = strings.TrimSpace(a); a != "" {
					r.Approvers = append(r.Approvers, mentionID(a))
				}
			}
			if len(r.Approvers) == 0 {
				// As with when: a blank left by a template would open
				// the rule to anyone in the channel.
				return Rule{}, errors.New("approvers: empty; leave it out for anyone in the conversation")
			}
		case "four_eyes":
			b, err := strconv.ParseBool(f.value)
			if err != nil {
				return Rule{}, fmt.Errorf("four_eyes: want true or false, got %q", f.value)
			}
			r.FourEyes = b
		case "ttl":
			d, err := parseTTL(f.value)
			if err != nil {
				return Rule{}, fmt.Errorf("ttl: %w", err)
			}
			r.TTL = d
		case "remind_after":
			d, err := parseTTL(f.value)
			if err != nil {
				return Rule{}, fmt.Errorf("remind_after: %w", err)
			}
			r.RemindAfter = d
		case "min_approvals":
			n, err := strconv.Atoi(f.value)
			if err != nil || n < 1 {
				return Rule{}, fmt.Errorf("min_approvals: want a whole number, 1 or more, got %q", f.value)
			}
			r.MinApprovals = n
		default:
			return Rule{}, fmt.Errorf("unknown key %q: want tool, verdict, when, reason, approvers, four_eyes, ttl, min_approvals, remind_after or id", f.key)
		}
	}
	env, err := newEnv()
	if err != nil {
		return Rule{}, err
	}
	if _, err := compileRule(env, r); err != nil {
		return Rule{}, err
	}
	return r, nil
}

// String formats r in the one-line form ParseRule reads.
func (r Rule) String() string {
	var b strings.Builder
	add := func(k, v string) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(k + "=" + v)
	}
	if r.ID != "" {
		add("id", quote(r.ID))
	}
	add("tool", quote(r.Tool))
	add("verdict", quote(string(r.Verdict)))
	if r.When != "" {
		add("when", quote(r.When))
	}
	if len(r.Approvers) > 0 {
		add("approvers", quote(strings.Join(r.Approvers, ",")))
	}
	if r.FourEyes {
		add("four_eyes", "true")
	}
	if r.TTL > 0 {
		add("ttl", formatDuration(r.TTL))
	}
	if r.MinApprovals > 1 {
		add("min_approvals", strconv.Itoa(r.MinApprovals))
	}
	if r.RemindAfter > 0 {
		add("remind_after", formatDuration(r.RemindAfter))
	}
	if r.Reason != "" {
		add("reason", quote(r.Reason))
	}
	return b.String()
}

// formatDuration is time.Duration.String without zero trailing units:
// "2h" rather than "2h0m0s".
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// quote returns v bare if it can be read back bare, else quoted.
func quote(v string) string {
	if v != "" && !strings.ContainsFunc(v, func(r rune) bool {
		return unicode.IsSpace(r) || strings.ContainsRune(`"'“”‘’„&`, r)
	}) {
		return v
	}
	if !strings.ContainsAny(v, "'‘’") {
		return "'" + v + "'"
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(v) + `"`
}

// NormalizeText decodes Slack's HTML escapes (&amp; &lt; &gt;) and turns
// typographic quotes (“ ” „ ‘ ’), which Slack's clients and phones put in
// place of typed ones, into plain ones. ParseRule reads its text so; other
// commands that take text typed in Slack (JSON arguments, say) use it too.
func NormalizeText(s string) string {
	return strings.NewReplacer(
		"&lt;", "<", "&gt;", ">", "&amp;", "&",
		"“", `"`, "”", `"`, "„", `"`,
		"‘", "'", "’", "'",
	).Replace(s)
}

// hiddenRune returns the first character of s a reader would not see
// (Unicode's format characters: zero-width spaces and joiners,
// bidirectional controls, the byte-order mark; control characters other
// than tab and line breaks; the line and paragraph separators), and its
// position in characters from 1.
func hiddenRune(s string) (rune, int, bool) {
	at := 0
	for _, r := range s {
		at++
		switch {
		case r == '\t' || r == '\n' || r == '\r':
		case unicode.Is(unicode.Cf, r), unicode.Is(unicode.Cc, r), r == '\u2028', r == '\u2029':
			return r, at, true
		}
	}
	return 0, 0, false
}

// mentionID turns a Slack mention (<@U1|name>, <!subteam^S1|@team>) into
// the bare id; other text is returned as is.
func mentionID(s string) string {
	if !strings.HasPrefix(s, "<") || !strings.HasSuffix(s, ">") {
		return s
	}
	inner := s[1 : len(s)-1]
	inner, _, _ = strings.Cut(inner, "|")
	switch {
	case strings.HasPrefix(inner, "@"):
		return inner[1:]
	case strings.HasPrefix(inner, "!subteam^"):
		return strings.TrimPrefix(inner, "!subteam^")
	}
	return s
}

type field struct{ key, value string }

// splitFields splits key=value fields separated by spaces, with quoting as
// ParseRule describes.
func splitFields(s string) ([]field, error) {
	var out []field
	rs := []rune(s)
	i := 0
	for {
		for i < len(rs) && unicode.IsSpace(rs[i]) {
			i++
		}
		if i == len(rs) {
			return out, nil
		}
		start := i
		for i < len(rs) && rs[i] != '=' && !unicode.IsSpace(rs[i]) {
			i++
		}
		key := string(rs[start:i])
		if i == len(rs) || rs[i] != '=' || key == "" {
			return nil, fmt.Errorf("expected key=value, got %q", string(rs[start:i]))
		}
		i++ // '='
		var val strings.Builder
		for i < len(rs) && !unicode.IsSpace(rs[i]) {
			switch q := rs[i]; q {
			case '\'':
				end := slices.Index(rs[i+1:], '\'')
				if end < 0 {
					return nil, fmt.Errorf("%s: unterminated ' quote", key)
				}
				val.WriteString(string(rs[i+1 : i+1+end]))
				i += end + 2
			case '"':
				i++
				closed := false
				for i < len(rs) {
					c := rs[i]
					if c == '\\' && i+1 < len(rs) && (rs[i+1] == '"' || rs[i+1] == '\\') {
						val.WriteRune(rs[i+1])
						i += 2
						continue
					}
					i++
					if c == '"' {
						closed = true
						break
					}
					val.WriteRune(c)
				}
				if !closed {
					return nil, fmt.Errorf("%s: unterminated \" quote", key)
				}
			default:
				val.WriteRune(q)
				i++
			}
		}
		out = append(out, field{key: key, value: val.String()})
	}
}
