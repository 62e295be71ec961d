package boltstore

import (
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/store"
)

// The deletion time of a record is read whichever place its field has in
// the record's JSON: first, as records are written now, or after the rest,
// as records written before were.
func TestDeleteAtOf(t *testing.T) {
	at := time.Date(2026, 12, 5, 10, 0, 0, 123456789, time.UTC)
	big := json.RawMessage(`{"state":"` + strings.Repeat("x", 1000) + `"}`)
	first, err := json.Marshal(convRecord{Conversation: store.Conversation{Key: "k", State: big}, DeleteAt: at})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(first), `{"delete_at":`) {
		t.Fatalf("a conversation record is written as %.40s..., want its deletion time first", first)
	}
	last := []byte(`{"conversation":{"key":"k","state":` + string(big) + `},"delete_at":"` + at.Format(time.RFC3339Nano) + `"}`)
	for name, v := range map[string][]byte{"first": first, "last": last} {
		got, err := deleteAtOf(v)
		if err != nil || !got.Equal(at) {
			t.Errorf("deleteAtOf(record with it %s) = %v, %v; want %v", name, got, err, at)
		}
	}
	if _, err := deleteAtOf([]byte(`{"delete_at":`)); err == nil {
		t.Error("deleteAtOf(a broken record) = nil error")
	}
}

// BenchmarkPrune is a prune pass over 500 conversations of 250 KiB of
// state each, none due: the cost of the pass that runs every
// PruneInterval whatever there is to delete.
func BenchmarkPrune(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "bench.db"), Options{PruneInterval: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	state := json.RawMessage(`{"messages":"` + strings.Repeat("x", 250<<10) + `"}`)
	for i := range 500 {
		if err := s.SaveConversation(b.Context(), store.Conversation{Key: "T1/C1/" + strconv.Itoa(i), State: state}); err != nil {
			b.Fatal(err)
		}
	}
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		if err := s.prune(now); err != nil {
			b.Fatal(err)
		}
	}
}
