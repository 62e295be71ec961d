package agent

import "sync"

// maxResumable bounds the runs a resumable remembers; past it, Resume
// reads the run's conversation from the store.
const maxResumable = 10000

// resumable remembers the conversation of each run whose step a decision
// of this process completed, until its Resume: the conversation of a run
// never changes, so Resume can take the conversation's lease and the
// run's claim in one store step without reading the run first.
type resumable struct {
	mu   sync.Mutex
	runs map[string]string // run id -> conversation
}

// add remembers the conversation of a run to resume, making room by
// forgetting another run when maxResumable are kept: one whose Resume
// never came here (a turn resumed it, or another process) would otherwise
// stay, and once enough had, no run would be remembered again.
func (r *resumable) add(runID, conversation string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.runs == nil {
		r.runs = make(map[string]string)
	}
	if _, ok := r.runs[runID]; !ok && len(r.runs) >= maxResumable {
		for id := range r.runs {
			delete(r.runs, id)
			break
		}
	}
	r.runs[runID] = conversation
}

// take returns and forgets the conversation of a run, if remembered.
func (r *resumable) take(runID string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	conv, ok := r.runs[runID]
	delete(r.runs, runID)
	if len(r.runs) == 0 {
		r.runs = nil // a map keeps the size a burst gave it
	}
	return conv, ok
}
