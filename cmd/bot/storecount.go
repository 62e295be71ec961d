package main

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/store"
)

// countedStore is the bot's store with every method call counted in
// toolgate_store_calls_total{method}. Each call is one request to the store
// as the bot sees it (one Redis round trip or bolt transaction for most
// methods). The load tool reads the counter to report the store calls of a
// pause, a decision and a resume.
type countedStore struct {
	botStore
	calls *prometheus.CounterVec
}

// countedBatchStore is a countedStore over a store that can also list
// several record kinds at once, which the policy engine looks for.
type countedBatchStore struct {
	countedStore
	batch approvals.BatchRecordStore
}

var (
	_ botStore                   = (*countedStore)(nil)
	_ approvals.BatchRecordStore = (*countedBatchStore)(nil)
)

// countStore wraps st so that each of its calls is counted in a
// toolgate_store_calls_total counter registered with reg. The result
// offers RecordsOf exactly when st does. Close is not counted.
func countStore(st botStore, reg prometheus.Registerer) botStore {
	calls := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolgate_store_calls_total",
		Help: "Calls to the store (Redis or the embedded store), by method.",
	}, []string{"method"})
	reg.MustRegister(calls)
	c := countedStore{botStore: st, calls: calls}
	if b, ok := st.(approvals.BatchRecordStore); ok {
		return &countedBatchStore{countedStore: c, batch: b}
	}
	return &c
}

func (s *countedStore) count(method string) { s.calls.WithLabelValues(method).Inc() }

func (s *countedBatchStore) RecordsOf(ctx context.Context, kinds ...string) (map[string][]store.Record, error) {
	s.count("RecordsOf")
	return s.batch.RecordsOf(ctx, kinds...)
}

func (s *countedStore) SaveConversation(ctx context.Context, c store.Conversation) error {
	s.count("SaveConversation")
	return s.botStore.SaveConversation(ctx, c)
}

func (s *countedStore) LoadConversation(ctx context.Context, key string) (store.Conversation, error) {
	s.count("LoadConversation")
	return s.botStore.LoadConversation(ctx, key)
}

func (s *countedStore) CreateRun(ctx context.Context, r store.Run, calls []store.Call) error {
	s.count("CreateRun")
	return s.botStore.CreateRun(ctx, r, calls)
}

func (s *countedStore) LoadRun(ctx context.Context, runID string) (store.Run, []store.Call, error) {
	s.count("LoadRun")
	return s.botStore.LoadRun(ctx, runID)
}

func (s *countedStore) GetCall(ctx context.Context, callID string) (store.Call, error) {
	s.count("GetCall")
	return s.botStore.GetCall(ctx, callID)
}

func (s *countedStore) Decide(ctx context.Context, callID, fingerprint string, d store.Decision) (store.Call, bool, error) {
	s.count("Decide")
	return s.botStore.Decide(ctx, callID, fingerprint, d)
}

func (s *countedStore) ClaimResume(ctx context.Context, runID, owner string, lease time.Duration) (bool, error) {
	s.count("ClaimResume")
	return s.botStore.ClaimResume(ctx, runID, owner, lease)
}

func (s *countedStore) BeginExecution(ctx context.Context, callID string) (bool, error) {
	s.count("BeginExecution")
	return s.botStore.BeginExecution(ctx, callID)
}

func (s *countedStore) SaveResult(ctx context.Context, callID string, result []byte) error {
	s.count("SaveResult")
	return s.botStore.SaveResult(ctx, callID, result)
}

func (s *countedStore) FinishRun(ctx context.Context, runID string) error {
	s.count("FinishRun")
	return s.botStore.FinishRun(ctx, runID)
}

func (s *countedStore) Pending(ctx context.Context, f store.Filter) ([]store.Call, error) {
	s.count("Pending")
	return s.botStore.Pending(ctx, f)
}

func (s *countedStore) Due(ctx context.Context, now time.Time, limit int) ([]store.Call, error) {
	s.count("Due")
	return s.botStore.Due(ctx, now, limit)
}

func (s *countedStore) Stalled(ctx context.Context, limit int) ([]string, error) {
	s.count("Stalled")
	return s.botStore.Stalled(ctx, limit)
}

func (s *countedStore) AcquireLease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	s.count("AcquireLease")
	return s.botStore.AcquireLease(ctx, key, owner, ttl)
}

func (s *countedStore) ReleaseLease(ctx context.Context, key, owner string) error {
	s.count("ReleaseLease")
	return s.botStore.ReleaseLease(ctx, key, owner)
}

func (s *countedStore) Audit(ctx context.Context, e store.AuditEntry) error {
	s.count("Audit")
	return s.botStore.Audit(ctx, e)
}

func (s *countedStore) SeenEvent(ctx context.Context, id string, ttl time.Duration) (bool, error) {
	s.count("SeenEvent")
	return s.botStore.SeenEvent(ctx, id, ttl)
}

func (s *countedStore) PutRecord(ctx context.Context, r store.Record, expectVersion int64) (store.Record, error) {
	s.count("PutRecord")
	return s.botStore.PutRecord(ctx, r, expectVersion)
}

func (s *countedStore) Records(ctx context.Context, kind string) ([]store.Record, error) {
	s.count("Records")
	return s.botStore.Records(ctx, kind)
}

func (s *countedStore) DeleteRecord(ctx context.Context, kind, id string) error {
	s.count("DeleteRecord")
	return s.botStore.DeleteRecord(ctx, kind, id)
}

func (s *countedStore) AuditLog(ctx context.Context, limit int) ([]store.AuditEntry, error) {
	s.count("AuditLog")
	return s.botStore.AuditLog(ctx, limit)
}

func (s *countedStore) Ping(ctx context.Context) error {
	s.count("Ping")
	return s.botStore.Ping(ctx)
}
