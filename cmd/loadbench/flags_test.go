package main

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// Bad command lines are refused with a message naming the flag.
func TestParseFlagsErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"-replicas", "2"}, "-replicas 2 needs -store redis"},
		{[]string{"-store", "redis", "-redis-url", ""}, "-store redis needs -redis-url"},
		{[]string{"-store", "mongo"}, `-store: "mongo" is not embedded or redis`},
		{[]string{"-ask", "1.5"}, "-ask: 1.5 is not between 0 and 1"},
		{[]string{"-rate", "0"}, "-rate and -paused-rate must be positive"},
		{[]string{"-paused", "100,10"}, "counts must increase"},
		{[]string{"-paused", "ten"}, `-paused: "ten" is not a positive count`},
		{[]string{"-settle", "-1s"}, "-settle must not be negative"},
		{[]string{"-settle-after", "-1s"}, "-settle-after must not be negative"},
		{[]string{"-bot-cpuprofile", "a", "-bot-trace", "b"}, "give one"},
		{[]string{"-paused-warmup", "-1"}, "-paused-warmup must not be negative"},
		{[]string{"-env", "MAX_TURNS"}, `"MAX_TURNS" is not KEY=VALUE`},
		{[]string{"-mention-bytes", "39001"}, "-mention-bytes: 39001 is not between 0 and 39000"},
		{[]string{"-mention-bytes", "-1"}, "-mention-bytes: -1 is not between 0 and 39000"},
		{[]string{"extra"}, `unexpected argument "extra"`},
		// Values that are no finite number: NaN and Inf have no JSON, so
		// a run would fail only when it writes its report.
		{[]string{"-ask", "NaN"}, "-ask: NaN is not between 0 and 1"},
		{[]string{"-rate", "NaN"}, "-rate: NaN is not a finite number"},
		{[]string{"-rate", "Inf"}, "-rate: +Inf is not a finite number"},
		{[]string{"-paused-rate", "NaN"}, "-paused-rate: NaN is not a finite number"},
		{[]string{"-paused-rate", "-Inf"}, "-paused-rate: -Inf is not a finite number"},
		{[]string{"-rate", "1e300", "-duration", "1s"}, "-rate 1e+300 x -duration 1s is too many conversations"},
		{[]string{"-duration", "-1s"}, "-duration must not be negative"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			_, err := parseFlags(tt.args, io.Discard)
			if err == nil || !errors.Is(err, errFlags) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("parseFlags(%q) = %v, want a command-line error containing %q", tt.args, err, tt.want)
			}
		})
	}
}

// -duration turns the rate into a number of conversations; -paused keeps
// its counts in order.
func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"-rate", "200", "-duration", "1m", "-paused", "100, 10000,100000", "-env", "MAX_TURNS=256", "-model-latency", "2s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.conversations != 12000 {
		t.Errorf("200/s for 1m gives %d conversations, want 12000", o.conversations)
	}
	if got := o.paused; len(got) != 3 || got[0] != 100 || got[1] != 10000 || got[2] != 100000 {
		t.Errorf("-paused gave %v, want [100 10000 100000]", got)
	}
	if len(o.env) != 1 || o.env[0] != "MAX_TURNS=256" || o.modelLatency != 2*time.Second {
		t.Errorf("-env gave %v and -model-latency %v", o.env, o.modelLatency)
	}
}

// The metrics parser keeps samples with their labels, sums the store
// counter by method and keeps the Redis round trips apart.
func TestParseMetrics(t *testing.T) {
	m, err := parseMetrics(strings.NewReader(`# HELP toolgate_store_calls_total Calls to the store.
# TYPE toolgate_store_calls_total counter
toolgate_store_calls_total{method="Decide"} 3
toolgate_store_calls_total{method="SeenEvent"} 12
# TYPE toolgate_store_round_trips_total counter
toolgate_store_round_trips_total 17
go_memstats_heap_inuse_bytes 1.2345e+07
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := m["go_memstats_heap_inuse_bytes"]; got != 12345000 {
		t.Errorf("heap in use %v, want 12345000", got)
	}
	calls := m.storeCalls()
	if len(calls) != 3 || calls["Decide"] != 3 || calls["SeenEvent"] != 12 || calls[roundTripsKey] != 17 {
		t.Errorf("store calls %v, want Decide 3, SeenEvent 12 and %s 17", calls, roundTripsKey)
	}
}

// Percentiles are nearest-rank.
func TestSummarize(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	got := summarize(ds)
	if want := (Dist{Count: 100, P50: 50, P99: 99, Max: 100}); got != want {
		t.Errorf("summarize(1..100 ms) = %+v, want %+v", got, want)
	}
	if got := summarize(nil); got != (Dist{}) {
		t.Errorf("summarize(nil) = %+v, want zero", got)
	}
}

// A mention's pasted text has the size asked for, on lines of its own
// after the request.
func TestPasted(t *testing.T) {
	for _, n := range []int{0, 1, 2, len(pastedLine), len(pastedLine) + 1, 1000, maxMentionBytes} {
		got := pasted(n)
		if len(got) != n {
			t.Errorf("pasted(%d) has %d bytes", n, len(got))
		}
		if n > 0 && got[0] != '\n' {
			t.Errorf("pasted(%d) = %.20q..., want a line break first", n, got)
		}
	}
}
