package approvals

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Fingerprint returns the canonical form of a call's JSON arguments and its
// fingerprint, the hex SHA-256 of the canonical form. Two argument texts
// get the same fingerprint exactly when they say the same thing:
//
//   - object keys are sorted (by their UTF-8 bytes), at every depth;
//   - insignificant whitespace is dropped;
//   - strings are re-encoded, so "\u0041" and "A" are the same;
//   - numbers are kept exactly as written: 1, 1.0 and 1e0 differ, because a
//     tool may tell them apart;
//   - array order is kept.
//
// Invalid JSON, trailing data after the value and an object with the same
// key twice (which tools may read differently) are errors.
func Fingerprint(args json.RawMessage) (canonical json.RawMessage, fp string, err error) {
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	var buf bytes.Buffer
	if err := canonicalValue(dec, &buf); err != nil {
		return nil, "", fmt.Errorf("canonical arguments: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, "", errors.New("canonical arguments: data after the value")
	}
	sum := sha256.Sum256(buf.Bytes())
	return json.RawMessage(buf.Bytes()), hex.EncodeToString(sum[:]), nil
}

// canonicalValue reads one JSON value from dec and writes it canonically.
func canonicalValue(dec *json.Decoder, buf *bytes.Buffer) error {
	tok, err := dec.Token()
	if err == io.EOF {
		return errors.New("no value")
	}
	if err != nil {
		return err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			return canonicalObject(dec, buf)
		case '[':
			return canonicalArray(dec, buf)
		}
		return fmt.Errorf("unexpected %q", t)
	case string:
		return writeString(buf, t)
	case json.Number:
		buf.WriteString(t.String())
	case bool:
		if t {
			buf.WriteString("true")
		} else {
			buf.WriteString("false")
		}
	case nil:
		buf.WriteString("null")
	default:
		return fmt.Errorf("unexpected token %v", tok)
	}
	return nil
}

func canonicalObject(dec *json.Decoder, buf *bytes.Buffer) error {
	type member struct {
		key   string
		value []byte
	}
	var members []member
	seen := make(map[string]bool)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, ok := tok.(string)
		if !ok {
			return fmt.Errorf("object key %v is not a string", tok)
		}
		if seen[key] {
			return fmt.Errorf("key %q given twice", key)
		}
		seen[key] = true
		var v bytes.Buffer
		if err := canonicalValue(dec, &v); err != nil {
			return err
		}
		members = append(members, member{key, v.Bytes()})
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return err
	}
	slices.SortFunc(members, func(a, b member) int { return strings.Compare(a.key, b.key) })
	buf.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			buf.WriteByte(',')
		}
		if err := writeString(buf, m.key); err != nil {
			return err
		}
		buf.WriteByte(':')
		buf.Write(m.value)
	}
	buf.WriteByte('}')
	return nil
}

func canonicalArray(dec *json.Decoder, buf *bytes.Buffer) error {
	buf.WriteByte('[')
	for i := 0; dec.More(); i++ {
		if i > 0 {
			buf.WriteByte(',')
		}
		if err := canonicalValue(dec, buf); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing bracket
		return err
	}
	buf.WriteByte(']')
	return nil
}

// writeString writes s as a JSON string: the standard encoder's escaping
// without the HTML escapes, so the canonical form stays readable.
func writeString(buf *bytes.Buffer, s string) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return err
	}
	buf.Write(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
	return nil
}
