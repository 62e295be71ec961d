package approvals

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"go.yaml.in/yaml/v3"
)

// CheckConfig reads the `policy:` section like ParseConfig but does not stop
// at the first bad rule: it returns the compiled policy when every rule is
// sound, and otherwise nil and every problem found, in rule order. Each
// problem is the error ParseConfig would give for that rule (its 1-based
// position, YAML line and field). A problem outside the rules (YAML that does
// not parse, a bad default) is returned alone. Rules keep their positions
// while the others are checked, so generated ids ("rule-N") are the ones
// ParseConfig would give.
func CheckConfig(data []byte) (*Policy, []error) {
	var doc struct {
		Policy yaml.Node `yaml:"policy"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, []error{fmt.Errorf("parse config: %w", err)}
	}
	seq := rulesNode(&doc.Policy)
	var problems []*ruleError
	for {
		def, rules, err := parsePolicySection(&doc.Policy)
		if err == nil {
			var p *Policy
			if p, err = newPolicyAt(def, rules); err == nil {
				if len(problems) == 0 {
					return p, nil
				}
				break
			}
		}
		var re *ruleError
		if seq == nil || !errors.As(err, &re) || re.index >= len(seq.Content) || slices.ContainsFunc(problems, func(p *ruleError) bool { return p.index == re.index }) {
			return nil, []error{err}
		}
		problems = append(problems, re)
		// Check the others with this rule replaced by a sound one.
		seq.Content[re.index] = placeholderRule(seq.Content[re.index].Line, unusedID(seq))
	}
	slices.SortStableFunc(problems, func(a, b *ruleError) int { return cmp.Compare(a.index, b.index) })
	errs := make([]error, len(problems))
	for i, p := range problems {
		errs[i] = p
	}
	return nil, errs
}

// rulesNode returns the sequence node of policy.rules, or nil.
func rulesNode(policy *yaml.Node) *yaml.Node {
	policy = deref(policy)
	if policy.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(policy.Content); i += 2 {
		if v := deref(policy.Content[i+1]); policy.Content[i].Value == "rules" && v.Kind == yaml.SequenceNode {
			return v
		}
	}
	return nil
}

// unusedID returns an id for a placeholder (see placeholderRule) that no
// rule of the sequence seq names, so that it clashes with none of the rules
// still to check; the ids rules without one get are rule-N.
func unusedID(seq *yaml.Node) string {
	used := map[string]bool{}
	for _, rn := range seq.Content {
		if rn = deref(rn); rn.Kind != yaml.MappingNode {
			continue
		}
		fields, _ := ruleFields(rn)
		for i := 0; i+1 < len(fields); i += 2 {
			if fields[i].Value == "id" {
				used[fields[i+1].Value] = true
			}
		}
	}
	for n := 1; ; n++ {
		if id := fmt.Sprintf("unchecked-%d", n); !used[id] {
			return id
		}
	}
}

// placeholderRule is a sound rule mapping with the given id that matches
// no call: its condition is false.
func placeholderRule(line int, id string) *yaml.Node {
	str := func(v string) *yaml.Node {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v, Line: line}
	}
	return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: line, Content: []*yaml.Node{
		str("id"), str(id), str("tool"), str("*"), str("when"), str("false"), str("verdict"), str("deny"),
	}}
}
