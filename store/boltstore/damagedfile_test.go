package boltstore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/toolgate/toolgate/store"
)

// envOpenDamaged names, in a child process of TestOpenRefusesADamagedFile,
// the file the child opens.
const envOpenDamaged = "BOLTSTORE_TEST_OPEN_DAMAGED"

// Open on a file with a damaged page (one that bbolt's walk for the free
// pages, in a goroutine of its own, would panic on and end the process
// with) returns an error that names the file and says what to do, and
// leaves the file as it was. Open runs in a child process: a panic in a
// goroutine of bbolt's cannot be recovered in this one.
func TestOpenRefusesADamagedFile(t *testing.T) {
	if path := os.Getenv(envOpenDamaged); path != "" {
		s, err := Open(path, Options{PruneInterval: time.Hour, LockTimeout: 100 * time.Millisecond})
		if err != nil {
			fmt.Printf("OPEN ERROR: %v\n", err)
			return
		}
		fmt.Println("OPENED")
		s.Close()
		return
	}
	// Page layout (bbolt's internal/common): a header of id (uint64),
	// flags (uint16), count (uint16) and overflow (uint32), then, in a
	// branch page, elements of pos (uint32), ksize (uint32) and the
	// child's page id (uint64).
	const (
		offID, offFlags, offFirstChild = 0, 8, 16 + 8
		branchPage                     = 0x01
	)
	cases := []struct {
		name   string
		offset int64
		value  uint64
		size   int
	}{
		{"a page of no known type", offFlags, 0x40, 2},
		{"a page that says it is another", offID, 1 << 20, 8},
		// Its header is read out of the memory the file is mapped to: a
		// fault, not a panic, unless the reader asked for one.
		{"a child page far past the end of the file", offFirstChild, 1 << 30, 8},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "toolgate.db")
			s, err := Open(path, Options{PruneInterval: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			pause(t, s, 200, 2)
			var root int64
			var psize int
			err = s.db.View(func(tx *bolt.Tx) error {
				root, psize = int64(tx.Bucket(bucketCalls).Root()), s.db.Info().PageSize
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			var flags [2]byte
			if _, err := f.ReadAt(flags[:], root*int64(psize)+offFlags); err != nil {
				t.Fatal(err)
			}
			if binary.LittleEndian.Uint16(flags[:]) != branchPage {
				t.Fatalf("the root page of the calls is not a branch page (flags %x)", flags)
			}
			b := binary.LittleEndian.AppendUint64(nil, tc.value)[:tc.size]
			if _, err := f.WriteAt(b, root*int64(psize)+tc.offset); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			before, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}

			cmd := exec.Command(os.Args[0], "-test.run=^TestOpenRefusesADamagedFile$")
			cmd.Env = append(os.Environ(), envOpenDamaged+"="+path)
			out, err := cmd.CombinedOutput()
			want := "OPEN ERROR: open store " + path + ": the file is damaged ("
			const advice = "): restore it from a backup, or move it aside to start empty"
			t.Logf("child: %s", out)
			if err != nil || !strings.Contains(string(out), want) || !strings.Contains(string(out), advice) {
				t.Errorf("Open of a file with %s, in a child process: %v, output:\n%s\nwant it to exit 0 with %q...%q",
					tc.name, err, firstLines(string(out), 30), want, advice)
			}
			after, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(before, after) {
				t.Errorf("Open of a file with %s changed the file", tc.name)
			}
		})
	}
}

// firstLines returns the first n lines of s.
func firstLines(s string, n int) string {
	lines := strings.SplitAfter(s, "\n")
	return strings.Join(lines[:min(n, len(lines))], "")
}

// A file whose creation was cut short (a full disk: bbolt writes a new
// file's four pages in one write, of which only the first two landed)
// holds nothing: Open creates it afresh instead of calling it damaged, and
// what is saved then is there after the next Open. A file that is in use
// is not touched.
func TestOpenCreatesAgainAFileWhoseCreationWasCutShort(t *testing.T) {
	dir := t.TempDir()
	whole := filepath.Join(dir, "whole.db")
	db, err := bolt.Open(whole, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	first, err := os.ReadFile(whole)
	if err != nil || len(first) < 4*4096 {
		t.Fatalf("a new bbolt file holds %d bytes (%v)", len(first), err)
	}
	path := filepath.Join(dir, "toolgate.db")
	if err := os.WriteFile(path, first[:2*4096], 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path, Options{PruneInterval: time.Hour, LockTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatalf("Open of a file whose creation was cut short: %v", err)
	}
	if _, err := s.PutRecord(t.Context(), store.Record{Kind: "k", ID: "1", Data: []byte(`{}`)}, 0); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = Open(path, Options{PruneInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if recs, err := s.Records(t.Context(), "k"); err != nil || len(recs) != 1 {
		t.Errorf("after a reopen: %d records (%v); want the one saved", len(recs), err)
	}

	// A short file that is no store (a path mistaken for one) is left
	// alone, for Open to refuse.
	other := filepath.Join(dir, "config.yaml")
	content := []byte("policy:\n  default: ask\n")
	if err := os.WriteFile(other, content, 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(other, Options{PruneInterval: time.Hour, LockTimeout: 100 * time.Millisecond}); err == nil {
		s.Close()
		t.Error("a file that is no store opened as one")
	}
	if got, err := os.ReadFile(other); err != nil || !bytes.Equal(got, content) {
		t.Errorf("the file that is no store holds %d bytes (%v); want it untouched", len(got), err)
	}

	// Held by another process's bbolt (a flock of its own on the file),
	// a short file is left for bolt.Open, which waits for the lock.
	held := filepath.Join(dir, "held.db")
	if err := os.WriteFile(held, first[:2*4096], 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(held)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(held, Options{PruneInterval: time.Hour, LockTimeout: 100 * time.Millisecond}); err == nil || !strings.Contains(err.Error(), "locked") {
		t.Errorf("Open of a file another process holds = %v; want it locked", err)
	}
	if fi, err := os.Stat(held); err != nil || fi.Size() != 2*4096 {
		t.Errorf("the held file is %v bytes (%v); want it untouched", fi.Size(), err)
	}
}
