package approvals

import (
	"slices"
	"strings"
	"testing"
)

func TestCheckConfig(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string // substrings of each problem, in order
	}{
		{
			name: "sound",
			yaml: "policy:\n  rules:\n    - tool: a\n      verdict: allow\n",
		},
		{
			name: "every bad rule",
			yaml: `policy:
  rules:
    - tool: a
      verdict: allow
    - tool: b
      when: 'args.x +'
      verdict: ask
    - tool: c
      verdict: maybe
    - tool: d
      when: 'args.n'
      verdict: deny
    - tool: e
      verdit: allow
`,
			want: []string{
				"policy rule 2 (line 5, id rule-2): when",
				"policy rule 3 (line 8, id rule-3): verdict (line 9): unknown verdict \"maybe\"",
				"policy rule 4 (line 10, id rule-4): when (line 11): must be a bool expression",
				"policy rule 5 (line 13): unknown key \"verdit\" (line 14)",
			},
		},
		{
			name: "duplicate id after a bad rule",
			yaml: `policy:
  rules:
    - tool: a
      verdict: nope
    - id: x
      tool: b
      verdict: allow
    - id: x
      tool: c
      verdict: allow
`,
			want: []string{"policy rule 1 (line 3, id rule-1): verdict (line 4)", "policy rule 3 (line 8): id (line 8): duplicate id \"x\""},
		},
		{
			// The broken rule's stand-in takes an id no rule has, not
			// rule-2, which the third rule names.
			name: "duplicate id before a rule-N id",
			yaml: `policy:
  rules:
    - id: a
      tool: a
      verdict: allow
    - id: a
      tool: b
      verdict: allow
    - id: rule-2
      tool: c
      verdict: allow
`,
			want: []string{"policy rule 2 (line 6): id (line 6): duplicate id \"a\""},
		},
		{
			name: "bad default stops",
			yaml: "policy:\n  default: maybe\n  rules:\n    - tool: a\n      verdict: nope\n",
			want: []string{"policy.default (line 2)"},
		},
		{
			name: "yaml syntax",
			yaml: "policy: [\n",
			want: []string{"parse config"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, errs := CheckConfig([]byte(tt.yaml))
			if len(errs) != len(tt.want) {
				t.Fatalf("CheckConfig gave %d problems %q, want %d", len(errs), errs, len(tt.want))
			}
			for i, err := range errs {
				if !strings.Contains(err.Error(), tt.want[i]) {
					t.Errorf("problem %d = %q, want it to contain %q", i+1, err, tt.want[i])
				}
			}
			if (p == nil) != (len(tt.want) > 0) {
				t.Errorf("policy = %v with %d problems", p, len(errs))
			}
			_, perr := ParseConfig([]byte(tt.yaml))
			if (perr == nil) != (len(tt.want) == 0) || (perr != nil && !slices.ContainsFunc(errs, func(e error) bool { return e.Error() == perr.Error() })) {
				t.Errorf("ParseConfig error %v, want one of the problems %v", perr, errs)
			}
		})
	}
}
