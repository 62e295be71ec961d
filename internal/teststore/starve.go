package teststore

import (
	"context"
	"sync"
)

// Starvation models, for a store wrapper, a live process that is starved
// of CPU while its work holds a conversation's lease or a run's resume
// claim: once Starve is called, the renewals the wrapper passes to
// Renewal are held until Unstarve, and then ask the store; after
// LoseLeases or LoseClaims, renewals of leases, or of claims, report the
// hold lost without asking the store. The wrapper calls Renewal in its
// RenewLease (claim false) and RenewClaim (claim true).
type Starvation struct {
	mu         sync.Mutex
	held       chan struct{} // closed by Unstarve; nil while not starved
	lostLeases bool
	lostClaims bool
	renewed    chan struct{}
	once       sync.Once
}

// NewStarvation returns a Starvation with nothing starved or lost.
func NewStarvation() *Starvation { return &Starvation{renewed: make(chan struct{})} }

// Starve holds the renewals from now on, until Unstarve.
func (s *Starvation) Starve() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held = make(chan struct{})
}

// Unstarve lets the held renewals, and later ones, ask the store.
func (s *Starvation) Unstarve() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.held)
}

// LoseLeases makes the renewals of leases report them lost.
func (s *Starvation) LoseLeases() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lostLeases = true
}

// LoseClaims makes the renewals of resume claims report them lost.
func (s *Starvation) LoseClaims() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lostClaims = true
}

// Renewed is closed at the first renewal that was held or reported lost.
func (s *Starvation) Renewed() <-chan struct{} { return s.renewed }

// Renewal decides what a renewal (of a claim, or of a lease) gets: lost
// true to report it lost; false, nil once the wrapper should ask the
// store (at once while not starved); ctx's error if it ends while held.
func (s *Starvation) Renewal(ctx context.Context, claim bool) (lost bool, err error) {
	s.mu.Lock()
	held, l := s.held, s.lostLeases
	if claim {
		l = s.lostClaims
	}
	s.mu.Unlock()
	if !l && held == nil {
		return false, nil
	}
	s.once.Do(func() { close(s.renewed) })
	if l {
		return true, nil
	}
	select {
	case <-held:
		return false, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}
