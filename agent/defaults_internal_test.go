package agent

import (
	"encoding/json"
	"strings"
	"testing"
)

// A schema reached two ways at each level of nesting (both branches of an
// allOf refer to it) fills each value once: the work grows with the
// arguments, not with the number of ways through the schema, which
// doubles at each level.
func TestDefaultsWorkDoesNotMultiplyWithNesting(t *testing.T) {
	schema := `{"$defs":{"N":{"type":"object","allOf":[{"$ref":"#/$defs/L"},{"$ref":"#/$defs/L"}]},"L":{"properties":{"c":{"$ref":"#/$defs/N"},"d":{"default":1}}}},"$ref":"#/$defs/N"}`
	reg, err := compileTool(Tool{Name: "deep", Human: true, Schema: json.RawMessage(schema)})
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Repeat(`{"c":`, 20) + `{}` + strings.Repeat(`}`, 20)
	parse := func() any {
		var v any
		if err := json.Unmarshal([]byte(args), &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	v := parse()
	fillDefaults(reg.schema, v)
	got, _ := json.Marshal(v)
	if n := strings.Count(string(got), `"d":1`); n != 21 {
		t.Fatalf("filled %s: want d in each of the 21 objects", got)
	}
	visited := 0
	countVisits = func() { visited++ }
	t.Cleanup(func() { countVisits = func() {} })
	fillDefaults(reg.schema, parse())
	if visited > 21*8 {
		t.Errorf("filling 21 nested objects visited %d schemas: the work multiplies with nesting", visited)
	}
}
