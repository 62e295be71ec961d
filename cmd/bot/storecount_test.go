package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/boltstore"
)

// batchStore is a botStore that also lists several record kinds at once.
type batchStore struct {
	botStore
	kinds [][]string
}

func (b *batchStore) RecordsOf(_ context.Context, kinds ...string) (map[string][]store.Record, error) {
	b.kinds = append(b.kinds, kinds)
	return map[string][]store.Record{}, nil
}

func openBolt(t *testing.T) *boltstore.Store {
	t.Helper()
	st, err := boltstore.Open(filepath.Join(t.TempDir(), "toolgate.db"), boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// Every call through the wrapper is counted by method, and reaches the
// store.
func TestCountStoreCounts(t *testing.T) {
	reg := prometheus.NewRegistry()
	st := countStore(openBolt(t), reg)
	ctx := t.Context()
	for range 2 {
		if _, err := st.SeenEvent(ctx, "Ev1", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.SaveConversation(ctx, store.Conversation{Key: "C1/1.0"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.LoadConversation(ctx, "C1/1.0"); err != nil {
		t.Fatal(err)
	}
	for method, want := range map[string]float64{"SeenEvent": 2, "SaveConversation": 1, "LoadConversation": 1, "Decide": -1} {
		if got := counterValue(t, reg, "toolgate_store_calls_total", "method", method); got != want {
			t.Errorf("toolgate_store_calls_total{method=%q} = %v, want %v", method, got, want)
		}
	}
	isNew, err := st.SeenEvent(ctx, "Ev1", time.Minute)
	if err != nil || isNew {
		t.Errorf("SeenEvent through the wrapper after two calls = %v, %v; want false (not new): the calls did not reach the store", isNew, err)
	}
}

// The policy engine's batch listing is offered exactly when the wrapped
// store has it, and is counted.
func TestCountStoreKeepsBatchRecords(t *testing.T) {
	if _, ok := countStore(openBolt(t), prometheus.NewRegistry()).(approvals.BatchRecordStore); ok {
		t.Error("the wrapper of a store without RecordsOf offers RecordsOf")
	}
	inner := &batchStore{botStore: openBolt(t)}
	reg := prometheus.NewRegistry()
	b, ok := countStore(inner, reg).(approvals.BatchRecordStore)
	if !ok {
		t.Fatal("the wrapper of a store with RecordsOf does not offer it")
	}
	if _, err := b.RecordsOf(t.Context(), "a", "b"); err != nil {
		t.Fatal(err)
	}
	if len(inner.kinds) != 1 || len(inner.kinds[0]) != 2 {
		t.Errorf("the store got RecordsOf calls %v, want one with two kinds", inner.kinds)
	}
	if got := counterValue(t, reg, "toolgate_store_calls_total", "method", "RecordsOf"); got != 1 {
		t.Errorf("RecordsOf counted %v times, want 1", got)
	}
}
