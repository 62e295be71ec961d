package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// checkKeys refuses object keys that a person reading the card, or a tool
// decoding the arguments, could take for another key, at every depth of
// the arguments: a key given twice in one object (decoded, the last one
// wins, as the schema's defaults are filled in: the arguments as written
// must be checked for it), two keys of one object
// that are the same after Unicode normalisation (NFKC: "café" written with
// a combining accent, a full-width "ｐａｔｈ") or differ only by case
// ("filePath" and "filepath": Go's encoding/json and others match fields
// regardless of case, so the policy could judge one and the tool run with
// the other), and a key that mixes look-alike scripts (a Cyrillic "а" in a
// Latin "pаth"). The error says which keys and why, for the model to fix.
// Arguments that are not valid JSON are left to the schema check.
func checkKeys(args json.RawMessage) error {
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	return keysOfValue(dec)
}

// keysOfValue reads one JSON value from dec, checking the keys of every
// object in it.
func keysOfValue(dec *json.Decoder) error {
	tok, err := dec.Token()
	if err == io.EOF {
		return nil
	}
	if err != nil {
		return nil // not JSON: the schema check says so
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	switch d {
	case '[':
		for dec.More() {
			if err := keysOfValue(dec); err != nil {
				return err
			}
		}
	case '{':
		seen := make(map[string]string) // folded NFKC form -> key as written
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return nil
			}
			key, _ := tok.(string)
			if mixed := mixedScripts(key); len(mixed) > 0 {
				return fmt.Errorf("key %q mixes letters of %s, so it can look like another key; write it in one script", key, strings.Join(mixed, " and "))
			}
			nf := norm.NFKC.String(key)
			folded := cases.Fold().String(nf)
			if first, ok := seen[folded]; ok {
				if first == key {
					return fmt.Errorf("key %q given twice", key)
				}
				if norm.NFKC.String(first) == nf {
					return fmt.Errorf("keys %q and %q differ only by Unicode normalisation, so they look like the same key; use one spelling", first, key)
				}
				return fmt.Errorf("keys %q and %q differ only by case, so a tool may read them as the same key; use one of them", first, key)
			}
			seen[folded] = key
			if err := keysOfValue(dec); err != nil {
				return err
			}
		}
	}
	_, _ = dec.Token() // the closing delimiter
	return nil
}

// confusable are scripts whose letters look like each other's; a key mixing
// two of them is refused.
var confusable = []struct {
	name  string
	table *unicode.RangeTable
}{
	{"Latin", unicode.Latin},
	{"Cyrillic", unicode.Cyrillic},
	{"Greek", unicode.Greek},
	{"Armenian", unicode.Armenian},
	{"Cherokee", unicode.Cherokee},
}

// mixedScripts returns the look-alike scripts the letters of key come from
// when there are several of them, and nil otherwise.
func mixedScripts(key string) []string {
	var scripts []string
	for _, r := range key {
		if !unicode.IsLetter(r) {
			continue
		}
		for _, s := range confusable {
			if unicode.Is(s.table, r) {
				if !slices.Contains(scripts, s.name) {
					scripts = append(scripts, s.name)
				}
				break
			}
		}
	}
	if len(scripts) < 2 {
		return nil
	}
	return scripts
}

// maxArgDepth bounds how deeply arguments may nest: far beyond what a
// tool's arguments need, and it keeps what shows them (a card's indented
// JSON, the checks) from growing with a model's nesting.
const maxArgDepth = 64

// checkDepth refuses arguments nested deeper than maxArgDepth. JSON that
// does not parse is left to the schema check.
func checkDepth(args []byte) error {
	depth, inString, escaped := 0, false, false
	for _, c := range args {
		switch {
		case escaped:
			escaped = false
		case inString:
			switch c {
			case '\\':
				escaped = true
			case '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			if depth++; depth > maxArgDepth {
				return fmt.Errorf("arguments nested more than %d levels deep", maxArgDepth)
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return nil
}
