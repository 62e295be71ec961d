package agent

import (
	"encoding/json"
	"strings"
	"testing"
)

// A schema reached two ways at each level of nesting (both branches of an
// allOf refer to it, or two branches each describe the same property)
// fills each value once: the work grows with the arguments, not with the
// number of ways through the schema, which doubles at each level.
func TestDefaultsWorkDoesNotMultiplyWithNesting(t *testing.T) {
	for name, schema := range map[string]string{
		"one schema two ways":        `{"$defs":{"N":{"type":"object","allOf":[{"$ref":"#/$defs/L"},{"$ref":"#/$defs/L"}]},"L":{"properties":{"c":{"$ref":"#/$defs/N"},"d":{"default":1}}}},"$ref":"#/$defs/N"}`,
		"two branches, one property": `{"$defs":{"N":{"type":"object","allOf":[{"$ref":"#/$defs/L1"},{"$ref":"#/$defs/L2"}]},"L1":{"properties":{"c":{"$ref":"#/$defs/N"}}},"L2":{"properties":{"c":{"$ref":"#/$defs/N"},"d":{"default":1}}}},"$ref":"#/$defs/N"}`,
	} {
		t.Run(name, func(t *testing.T) { testDefaultsWork(t, schema) })
	}
}

func testDefaultsWork(t *testing.T, schema string) {
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
	var f filler
	f.fill(reg.schema, parse(), new(visits))
	if visited := f.visited; visited > 21*8 {
		t.Errorf("filling 21 nested objects visited %d schemas: the work multiplies with nesting", visited)
	}
}
