package approvals

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
)

func TestFingerprintCanonical(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"sorted keys", `{"b":1,"a":2}`, `{"a":2,"b":1}`},
		{"nested keys sorted", `{"z":{"y":1,"x":[{"d":1,"c":2}]},"a":null}`, `{"a":null,"z":{"x":[{"c":2,"d":1}],"y":1}}`},
		{"whitespace dropped", " {\n\t\"a\" : [ 1 , 2 ] ,\r\n \"b\": true }\n", `{"a":[1,2],"b":true}`},
		{"numbers as given", `{"a":1.0,"b":1e3,"c":-0,"d":12345678901234567890123}`, `{"a":1.0,"b":1e3,"c":-0,"d":12345678901234567890123}`},
		{"unicode escapes decoded", `{"s":"\u0041\u00e9"}`, `{"s":"Aé"}`},
		{"html characters kept", `{"s":"\u003ca\u0026b\u003e"}`, `{"s":"<a&b>"}`},
		{"control characters escaped", `{"s":"a\u000ab\"c\\"}`, `{"s":"a\nb\"c\\"}`},
		{"keys sorted by bytes", `{"é":1,"z":2,"A":3}`, `{"A":3,"z":2,"é":1}`},
		{"array order kept", `[3,1,[2,1]]`, `[3,1,[2,1]]`},
		{"scalar", ` "x" `, `"x"`},
		{"empty object", `{ }`, `{}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, fp, err := Fingerprint(json.RawMessage(tt.in))
			if err != nil {
				t.Fatalf("Fingerprint(%q): %v", tt.in, err)
			}
			if string(got) != tt.want {
				t.Errorf("Fingerprint(%q): got canonical %s, want %s", tt.in, got, tt.want)
			}
			sum := sha256.Sum256([]byte(tt.want))
			if want := hex.EncodeToString(sum[:]); fp != want {
				t.Errorf("Fingerprint(%q): got fp %s, want sha256 of canonical %s", tt.in, fp, want)
			}
		})
	}
}

func TestFingerprintEquivalence(t *testing.T) {
	tests := []struct {
		name string
		a, b string
		same bool
	}{
		{"key order", `{"a":1,"b":2}`, `{"b":2,"a":1}`, true},
		{"whitespace", `{"a":[1,2]}`, "{ \"a\" :\n [1, 2] }", true},
		{"unicode escape", `{"a":"é"}`, `{"a":"\u00e9"}`, true},
		{"escaped slash", `{"a":"/"}`, `{"a":"\/"}`, true},
		{"1.0 vs 1", `{"a":1.0}`, `{"a":1}`, false},
		{"1e2 vs 100", `{"a":1e2}`, `{"a":100}`, false},
		{"array order", `{"a":[1,2]}`, `{"a":[2,1]}`, false},
		{"string vs number", `{"a":"1"}`, `{"a":1}`, false},
		{"nested value", `{"a":{"b":1}}`, `{"a":{"b":2}}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, fa, err := Fingerprint(json.RawMessage(tt.a))
			if err != nil {
				t.Fatal(err)
			}
			_, fb, err := Fingerprint(json.RawMessage(tt.b))
			if err != nil {
				t.Fatal(err)
			}
			if got := fa == fb; got != tt.same {
				t.Errorf("same fingerprint for %s and %s: got %v, want %v", tt.a, tt.b, got, tt.same)
			}
		})
	}
}

func TestFingerprintInvalid(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"empty", ``, "no value"},
		{"only space", "  ", "no value"},
		{"truncated", `{"a":`, ""},
		{"trailing comma", `{"a":1,}`, ""},
		{"missing colon", `{"a" 1}`, ""},
		{"bare word", `{"a":nope}`, ""},
		{"two values", `{} {}`, "data after the value"},
		{"duplicate key", `{"a":1,"a":2}`, `key "a" given twice`},
		{"duplicate nested key", `{"x":{"a":1,"\u0061":2}}`, `key "a" given twice`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, fp, err := Fingerprint(json.RawMessage(tt.in))
			if err == nil {
				t.Fatalf("Fingerprint(%q) = %s, %s; want an error", tt.in, got, fp)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Fingerprint(%q): got error %q, want it to contain %q", tt.in, err, tt.want)
			}
		})
	}
}

func TestFingerprintIdempotent(t *testing.T) {
	in := `{"b":[{"y":"\u00e9","x":1.50}],"a":"<&>"}`
	c1, f1, err := Fingerprint(json.RawMessage(in))
	if err != nil {
		t.Fatal(err)
	}
	c2, f2, err := Fingerprint(c1)
	if err != nil {
		t.Fatal(err)
	}
	if string(c1) != string(c2) || f1 != f2 {
		t.Errorf("canonical form is not stable: got %s (%s) then %s (%s)", c1, f1, c2, f2)
	}
	if !json.Valid(c1) {
		t.Errorf("canonical form %s is not valid JSON", c1)
	}
}
