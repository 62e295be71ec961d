package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// checkKeys refuses object keys that a person reading the card could take
// for another key, at every depth of the arguments, as duplicate keys are
// refused: two keys of one object that are the same after Unicode
// normalisation (NFKC: "café" written with a combining accent, a
// full-width "ｐａｔｈ"), and a key that mixes look-alike scripts (a
// Cyrillic "а" in a Latin "pаth"). The error says which keys and why, for
// the model to fix. Arguments that are not valid JSON are left to the
// schema check.
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
		seen := make(map[string]string) // NFKC form -> key as written
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
			if first, ok := seen[nf]; ok && first != key {
				return fmt.Errorf("keys %q and %q differ only by Unicode normalisation, so they look like the same key; use one spelling", first, key)
			}
			seen[nf] = key
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
