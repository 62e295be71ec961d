package slackapp

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/toolgate/toolgate/internal/fastjson"
)

// BenchmarkDecodeClickEnvelope decodes the envelope of a click on a card
// as the fake Slack sends it (the payload carries the whole card, 5 KB),
// as the reader did with encoding/json and does with fastjson.
func BenchmarkDecodeClickEnvelope(b *testing.B) {
	data, err := os.ReadFile("testdata/click_envelope.json")
	if err != nil {
		b.Fatal(err)
	}
	for _, d := range []struct {
		name   string
		decode func([]byte, any) error
	}{{"encoding-json", json.Unmarshal}, {"fastjson", fastjson.Unmarshal}} {
		b.Run(d.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				env := &envelope{}
				if err := d.decode(data, env); err != nil || len(env.Payload.Actions) != 1 || env.Payload.Actions[0].ActionID != ActionApprove {
					b.Fatalf("decode = %+v, %v", env.Payload.Actions, err)
				}
			}
		})
	}
}
