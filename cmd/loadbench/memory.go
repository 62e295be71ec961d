package main

import (
	"fmt"
	"time"
)

// settleStep is how often the bots' memory is read while it settles.
const settleStep = time.Second

// Memory is what the bots hold, summed over them: the resident set from
// /proc and the Go runtime's own figures from /metrics.
type Memory struct {
	RSSBytes int64 `json:"rss_bytes"`
	// RSSFileBytes is the part of RSS mapped from files (RssFile): the
	// binary's pages, mostly.
	RSSFileBytes int64 `json:"rss_file_bytes"`
	// HeapInuseBytes is go_memstats_heap_inuse_bytes: spans with at least
	// one object, garbage not yet collected included.
	HeapInuseBytes int64 `json:"heap_inuse_bytes"`
	// HeapFreeBytes is heap the runtime holds free and has not returned
	// to the OS (go_memstats_heap_idle_bytes minus
	// go_memstats_heap_released_bytes): resident, but not in use.
	HeapFreeBytes int64 `json:"heap_free_bytes"`
	// HeapGoalBytes is go_memstats_next_gc_bytes: the heap at which the
	// next collection starts, set by the last one from what it found live
	// (twice that, plus stacks and globals, by default), so unlike the heap
	// in use it does not depend on where in its cycle the bot is.
	HeapGoalBytes   int64 `json:"heap_goal_bytes"`
	StackInuseBytes int64 `json:"stack_inuse_bytes"`
	// RuntimeBytes is the runtime's own memory beside the heap and the
	// stacks: span structures in use (go_memstats_mspan_inuse_bytes), the
	// per-processor caches, the profiling buckets, the collector's
	// metadata (go_memstats_gc_sys_bytes) and the rest
	// (go_memstats_other_sys_bytes). Some of it is mapped but never
	// touched, so it is an upper bound of what it adds to RSS.
	RuntimeBytes int64 `json:"runtime_bytes"`
	Goroutines   int   `json:"goroutines"`
	// OpenFDs is process_open_fds: connections, files and the rest.
	OpenFDs int `json:"open_fds"`
}

// memory reads the bots' memory, summed, and each bot's garbage
// collections so far (go_gc_duration_seconds_count).
func (e *env) memory() (Memory, []int64, error) {
	var out Memory
	gcs := make([]int64, len(e.bots))
	for i, b := range e.bots {
		m, err := b.scrape(e.ctx, e.client)
		if err != nil {
			return Memory{}, nil, err
		}
		rss, file, err := b.rss()
		if err != nil {
			return Memory{}, nil, err
		}
		out.RSSBytes += rss
		out.RSSFileBytes += file
		out.HeapInuseBytes += int64(m["go_memstats_heap_inuse_bytes"])
		out.HeapFreeBytes += int64(m["go_memstats_heap_idle_bytes"] - m["go_memstats_heap_released_bytes"])
		out.HeapGoalBytes += int64(m["go_memstats_next_gc_bytes"])
		out.StackInuseBytes += int64(m["go_memstats_stack_inuse_bytes"])
		out.RuntimeBytes += int64(m["go_memstats_mspan_inuse_bytes"] + m["go_memstats_mcache_inuse_bytes"] +
			m["go_memstats_buck_hash_sys_bytes"] + m["go_memstats_gc_sys_bytes"] + m["go_memstats_other_sys_bytes"])
		out.Goroutines += int(m["go_goroutines"])
		out.OpenFDs += int(m["process_open_fds"])
		gcs[i] = int64(m["go_gc_duration_seconds_count"])
	}
	return out, gcs, nil
}

// settle reads the bots' memory after a burst, when each had run gcs
// garbage collections, over one whole collection cycle of their own,
// without asking anything of them: from the end of each bot's first
// collection since the burst to the end of its next one (the Go runtime
// collects at least every two minutes). What a bot holds swings within a
// cycle, from what is live to the next collection's goal, so the reading
// with the highest RSS of the cycle is returned: the most the bot holds
// once the burst is over. It gives up after o.settle and returns the
// highest reading so far, with settled false.
//
// The cycle begins no sooner than o.settleAfter after the burst, so that
// every count is read as long after its burst, whether its bots collect
// garbage at once (busy with the burst's tail) or minutes later (idle),
// the runtime has returned free memory to the OS as it does over time,
// and the connections the burst opened and left idle are closed.
func (e *env) settle(gcs []int64) (Memory, bool, error) {
	if e.o.settleAfter > 0 {
		select {
		case <-time.After(e.o.settleAfter):
		case <-e.ctx.Done():
			return Memory{}, false, e.ctx.Err()
		}
		var err error
		if _, gcs, err = e.memory(); err != nil {
			return Memory{}, false, err
		}
	}
	deadline := time.Now().Add(e.o.settle)
	var cycle []int64 // the collections when the cycle began; nil before
	var peak Memory
	for {
		m, now, err := e.memory()
		if err != nil {
			return peak, false, err
		}
		if cycle == nil && after(now, gcs) {
			cycle = now
		}
		if cycle != nil {
			if m.RSSBytes > peak.RSSBytes {
				peak = m
			}
			if after(now, cycle) {
				return peak, true, nil
			}
		}
		if time.Now().After(deadline) {
			if cycle == nil {
				peak = m
			}
			return peak, false, nil
		}
		select {
		case <-time.After(settleStep):
		case <-e.ctx.Done():
			return peak, false, e.ctx.Err()
		}
	}
}

// after reports whether every bot has collected garbage since it had run
// then collections.
func after(now, then []int64) bool {
	for i := range now {
		if now[i] <= then[i] {
			return false
		}
	}
	return true
}

// heapProfilePath is where the heap profile taken at runs paused runs goes:
// the -bot-heapprofile file itself for the last count, the file with
// ".RUNS" appended for the others.
func heapProfilePath(file string, runs, last int) string {
	if runs == last {
		return file
	}
	return fmt.Sprintf("%s.%d", file, runs)
}
