package fastjson

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// record has the kinds of fields the stores and envelopes decode.
type record struct {
	ID      string            `json:"id"`
	Args    json.RawMessage   `json:"args"`
	At      time.Time         `json:"at"`
	N       int64             `json:"n,omitempty"`
	F       float64           `json:"f,omitempty"`
	Tags    []string          `json:"tags,omitempty"`
	Fields  map[string]string `json:"fields,omitempty"`
	Any     any               `json:"any,omitempty"`
	Ptr     *record           `json:"ptr,omitempty"`
	Skipped string            `json:"-"`
}

var inputs = []string{
	`{"id":"r1","args":{"cmd" : "rm -rf /tmp/x", "n":[1, 2.50e3, -0]} ,"at":"2026-12-05T06:00:00.123456789Z"}`,
	`{"id":"<&>\u003c\u2028","args":"\u003cb\u003e <b> &amp;"}`,
	`{"id":"\ud800 lone surrogate \u00e9 é","args":"\ud800"}`,
	"{\"id\":\"\xff\xfe invalid utf-8\",\"args\":\"\xff\"}",
	`{"ID":"case","Args":[ 1 ,2 ]}`,
	`{"id":"dup","id":"dup2","args":null}`,
	`{"n":9007199254740993,"f":1e308,"any":{"a":[true,null,"x",1.5]}}`,
	`{"tags":["a","b"],"fields":{"k":"v","":"empty"},"ptr":{"id":"inner","args":{}}}`,
	`{"unknown":{"deep":[[[{"x":"y"}]]]},"id":"after unknown"}`,
	` {"id":"spaces"} `,
	`{"id":"x","-":"dash","Skipped":"no"}`,
	// Refused input: the errors and the partial results are encoding/json's.
	`{"id":5,"args":{"a":1}}`,
	`{"id":"ok","n":"not a number","tags":["a"]}`,
	`{"id":"truncated","args":{"a":`,
	`{"id":"x"} trailing`,
	`{"tags":["x"],"fields":{"new":"v"},"ptr":{"id":"new"},"n":1 garbage}`,
	`[1,2,3]`,
	``,
	`{"at":"not a time","id":"y"}`,
}

// TestUnmarshalDecodesAsEncodingJSON decodes each input with Unmarshal
// and with encoding/json into the same types and wants the same value,
// raw messages byte for byte, and the same error.
func TestUnmarshalDecodesAsEncodingJSON(t *testing.T) {
	for _, in := range inputs {
		// From a zero value, and from one with fields set beforehand,
		// maps and slices included, as a caller may set them.
		for _, before := range []func() record{
			func() record { return record{} },
			func() record {
				return record{ID: "before", Skipped: "kept", Tags: []string{"a", "b"}, Fields: map[string]string{"k": "v"}, Ptr: &record{ID: "inner"}}
			},
		} {
			got, want := before(), before()
			gotErr := Unmarshal([]byte(in), &got)
			wantErr := json.Unmarshal([]byte(in), &want)
			if !reflect.DeepEqual(got, want) || !bytes.Equal(got.Args, want.Args) {
				t.Errorf("Unmarshal(%q) into %+v = %+v, want %+v", in, before(), got, want)
			}
			if errText(gotErr) != errText(wantErr) {
				t.Errorf("Unmarshal(%q) error = %v, want %v", in, gotErr, wantErr)
			}
		}
		var gotAny, wantAny any
		gotErr := Unmarshal([]byte(in), &gotAny)
		wantErr := json.Unmarshal([]byte(in), &wantAny)
		if !reflect.DeepEqual(gotAny, wantAny) || errText(gotErr) != errText(wantErr) {
			t.Errorf("Unmarshal(%q) into any = %v, %v; want %v, %v", in, gotAny, gotErr, wantAny, wantErr)
		}
	}
}

// TestUnmarshalCopiesWhatItKeeps decodes from a buffer that is then
// overwritten, as a store's buffer or a memory-mapped page is: nothing
// decoded may point into it.
func TestUnmarshalCopiesWhatItKeeps(t *testing.T) {
	buf := []byte(`{"id":"kept","args":{"a":"b"},"tags":["t"],"fields":{"k":"v"}}`)
	var r record
	if err := Unmarshal(buf, &r); err != nil {
		t.Fatal(err)
	}
	for i := range buf {
		buf[i] = 'X'
	}
	want := record{ID: "kept", Args: json.RawMessage(`{"a":"b"}`), Tags: []string{"t"}, Fields: map[string]string{"k": "v"}}
	if !reflect.DeepEqual(r, want) {
		t.Errorf("after the buffer was overwritten: %+v, want %+v", r, want)
	}
}

func FuzzUnmarshal(f *testing.F) {
	for _, in := range inputs {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var got, want record
		gotErr := Unmarshal(in, &got)
		wantErr := json.Unmarshal(in, &want)
		if errText(gotErr) != errText(wantErr) {
			t.Fatalf("Unmarshal(%q) error = %v, want %v", in, gotErr, wantErr)
		}
		if !reflect.DeepEqual(got, want) || !bytes.Equal(got.Args, want.Args) {
			t.Fatalf("Unmarshal(%q) = %+v, want %+v", in, got, want)
		}
	})
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// marshaler encodes through encoding/json, as the client libraries' types
// do, with spaces and escapes Marshal keeps as they are.
type marshaler struct{ Text string }

func (m marshaler) MarshalJSON() ([]byte, error) {
	b, err := json.MarshalIndent(map[string]string{"text": m.Text, "kind": "<m>"}, "", "  ")
	return b, err
}

// assertMarshalsAsEncodingJSON checks that Marshal encodes v as the same
// JSON value encoding/json does, or fails where it fails, and that, for
// values whose methods and raw messages are compact, it writes the bytes
// a json.Encoder without HTML escaping writes.
func assertMarshalsAsEncodingJSON(t *testing.T, v any, sameBytes bool) {
	t.Helper()
	got, err := Marshal(v)
	want, wantErr := json.Marshal(v)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("Marshal(%#v) error %v, encoding/json's %v", v, err, wantErr)
	}
	if err != nil {
		return
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("Marshal(%#v) wrote invalid JSON %q: %v", v, got, err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("Marshal(%#v) = %s, encoding/json: %s", v, got, want)
	}
	if !sameBytes {
		return
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	if exp := bytes.TrimSuffix(buf.Bytes(), []byte("\n")); !bytes.Equal(got, exp) {
		t.Errorf("Marshal(%#v) = %s, a json.Encoder without HTML escaping: %s", v, got, exp)
	}
}

func TestMarshalEncodesAsEncodingJSON(t *testing.T) {
	at := time.Date(2026, 12, 5, 6, 0, 0, 123456789, time.UTC)
	for _, tt := range []struct {
		v         any
		sameBytes bool
	}{
		{record{ID: "<&> \u2028 \"q\" \\", Args: json.RawMessage(`{"cmd":"rm <x> & y","n":[1,2.50e3,-0]}`), At: at, N: 1 << 60, F: 1.5e-7, Tags: []string{"a", ""}, Fields: map[string]string{"z": "1", "a": "2", "<": "3"}}, true},
		{record{ID: "\xff\xfe invalid utf-8 \xed\xa0\x80", Args: json.RawMessage(`"\ud800"`)}, true},
		{record{Any: map[string]any{"b": []any{1.0, nil, "x"}, "a": true}, Ptr: &record{ID: "inner", Args: json.RawMessage(`null`)}}, true},
		{[]any{marshaler{Text: "a <b> & c"}, &marshaler{Text: "\n"}}, false},
		{map[string]marshaler{"k": {Text: "v"}}, false},
		{record{Args: json.RawMessage(`{"a" : 1}`)}, false},
		{record{Args: json.RawMessage(`{not json`)}, false},
		{func() {}, false},
		{nil, true},
	} {
		assertMarshalsAsEncodingJSON(t, tt.v, tt.sameBytes)
	}
	// What is returned is the caller's: the next call leaves it.
	a, _ := Marshal("first")
	if _, err := Marshal("second"); err != nil || string(a) != `"first"` {
		t.Errorf("a result changed to %s after the next call (%v)", a, err)
	}
}

func FuzzMarshal(f *testing.F) {
	f.Add("<b>&amp;</b>", `{"a":[1,"x"]}`, "k")
	f.Add("\xff\u2028\xed\xa0\x80", `"\u003c"`, "")
	f.Fuzz(func(t *testing.T, s, raw, key string) {
		v := record{ID: s, Tags: []string{s}, Fields: map[string]string{key: s}, Any: map[string]any{key: s}}
		if json.Valid([]byte(raw)) {
			var compact bytes.Buffer
			if json.Compact(&compact, []byte(raw)) == nil {
				v.Args = compact.Bytes()
			}
		}
		assertMarshalsAsEncodingJSON(t, v, true)
		assertMarshalsAsEncodingJSON(t, []any{marshaler{Text: s}}, false)
	})
}
