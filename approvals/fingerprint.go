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
	"unicode/utf8"
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
// Invalid JSON, trailing data after the value, an object with the same
// key twice (which tools may read differently), and text that is not
// valid UTF-8 or holds an escape of half a surrogate pair (\ud800 alone)
// are errors: decoding would turn each into U+FFFD, so that arguments the
// model wrote differently shared a fingerprint and the tool got other
// bytes than the model sent.
func Fingerprint(args json.RawMessage) (canonical json.RawMessage, fp string, err error) {
	if err := CheckText(args); err != nil {
		return nil, "", fmt.Errorf("canonical arguments: %w", err)
	}
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

// CheckText refuses JSON text that is not valid UTF-8, or whose \u escapes
// include half a surrogate pair: a high surrogate (\ud800-\udbff) not
// followed by an escaped low one (\udc00-\udfff), or a low one alone.
// Fingerprint refuses such arguments with it; a caller that decodes the
// arguments and encodes them again before Fingerprint sees them (to fill
// in a schema's defaults, say) checks the text as written with it first,
// as decoding turns both into U+FFFD. Other invalid JSON is left to the
// decoder: a backslash only starts an escape inside a string, so escapes
// are found without following strings.
func CheckText(b []byte) error {
	if !utf8.Valid(b) {
		return errors.New("arguments contain invalid UTF-8")
	}
	const msg = "arguments contain an unpaired surrogate escape (\\u%04x): write the character itself, or both halves of its pair"
	for i := 0; ; {
		j := bytes.IndexByte(b[i:], '\\')
		if j < 0 || i+j+1 >= len(b) {
			return nil
		}
		i += j
		if b[i+1] != 'u' {
			i += 2 // \\, \" and the others: the next byte starts no escape
			continue
		}
		r, ok := hex4(b, i+2)
		switch {
		case !ok:
			i += 2 // the decoder refuses it
		case 0xd800 <= r && r <= 0xdbff:
			lo, ok := hex4(b, i+8)
			if !ok || b[i+6] != '\\' || b[i+7] != 'u' || lo < 0xdc00 || lo > 0xdfff {
				return fmt.Errorf(msg, r)
			}
			i += 12
		case 0xdc00 <= r && r <= 0xdfff:
			return fmt.Errorf(msg, r)
		default:
			i += 6
		}
	}
}

// hex4 reads the 4 hex digits of a \u escape at b[i:].
func hex4(b []byte, i int) (rune, bool) {
	if i < 0 || i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}
