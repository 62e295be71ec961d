package botsetup

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/internal/teststore"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/redisstore"
)

// TestOpenStore opens each kind of store twice on the same data: what the
// first handle saved, the second one reads, as after a restart. The audit
// log keeps AuditMax entries.
func TestOpenStore(t *testing.T) {
	kinds := []struct {
		name, logMsg string
		cfg          func(t *testing.T) StoreConfig
	}{
		{name: "embedded", logMsg: "using embedded store", cfg: func(t *testing.T) StoreConfig {
			return StoreConfig{Dir: t.TempDir()}
		}},
		{name: "redis", logMsg: "using redis store", cfg: func(t *testing.T) StoreConfig {
			url, ok := teststore.RedisURL(t)
			if !ok {
				t.Skip("REDIS_URL is not set")
			}
			return StoreConfig{RedisURL: url, RedisPrefix: "test-" + store.NewRunID()}
		}},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			cfg := k.cfg(t)
			cfg.AuditMax = 3
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			ctx := t.Context()
			conv := store.Conversation{Key: "T1:C1:1.0", State: json.RawMessage(`{"n":1}`), UpdatedAt: time.Now().UTC().Truncate(time.Millisecond)}

			st, err := OpenStore(ctx, cfg, log)
			if err != nil {
				t.Fatalf("OpenStore: %v", err)
			}
			if err := st.CommitTurn(ctx, store.Commit{Key: conv.Key, Conversation: &conv}); err != nil {
				t.Fatalf("CommitTurn: %v", err)
			}
			for i := range 5 {
				if err := st.Audit(ctx, store.AuditEntry{Actor: "U1", Action: "request", Detail: strconv.Itoa(i)}); err != nil {
					t.Fatalf("Audit: %v", err)
				}
			}
			if log, err := st.AuditLog(ctx, 10); err != nil || len(log) != 3 || log[0].Detail != "4" {
				t.Errorf("AuditLog = %d entries (%+v), %v; want the newest 3", len(log), log, err)
			}
			if err := st.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if !strings.Contains(logs.String(), k.logMsg) {
				t.Errorf("logs lack %q: %s", k.logMsg, logs.String())
			}
			if cfg.RedisURL == "" {
				if _, err := os.Stat(filepath.Join(cfg.Dir, StoreFile)); err != nil {
					t.Errorf("no store file in the directory: %v", err)
				}
			}

			st, err = OpenStore(ctx, cfg, log)
			if err != nil {
				t.Fatalf("OpenStore again: %v", err)
			}
			defer st.Close()
			got, err := st.LoadConversation(ctx, conv.Key)
			if err != nil {
				t.Fatalf("LoadConversation after reopening: %v", err)
			}
			if string(got.State) != string(conv.State) {
				t.Errorf("state after reopening = %s, want %s", got.State, conv.State)
			}
		})
	}
}

// A Redis URL that is malformed or names nothing listening is one
// *ConfigError naming REDIS_URL, without the password.
func TestOpenStoreBadRedisURL(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, u := range []string{
		"redis://default:hunter2-pass@127.0.0.1:1/0",
		"redis://127.0.0.1:6379/notadb",
		"localhost:6379",
		"http://127.0.0.1:6379",
		"redis+sentinel://127.0.0.1:26379/0",
		// Passwords not percent-encoded: no part of them is quoted.
		"redis+sentinel://127.0.0.1:6390/12?master_name=m&password=hunter2-pass;x",
		"redis+cluster://default:hunter2-pass%zz@127.0.0.1:6379",
		"redis://:hunter2-pass#xyz@127.0.0.1:6379/12",
		"redis://:hunter2-pass/xyz@127.0.0.1:6379/12",
		"redis://:hunter2-pass?xyz@127.0.0.1:6379/12",
	} {
		st, err := OpenStore(t.Context(), StoreConfig{RedisURL: u, Dir: t.TempDir()}, log)
		if err == nil {
			st.Close()
			t.Errorf("OpenStore(%s) succeeded", u)
			continue
		}
		var ce *ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("OpenStore(%s): %T %v, want a *ConfigError", u, err, err)
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "REDIS_URL: ") || strings.Contains(msg, "hunter2-pass") || strings.Contains(msg, "\n") {
			t.Errorf("OpenStore(%s): error %q, want one line naming REDIS_URL, without the password", u, msg)
		}
	}
}

// A stop while OpenStore waits for a Redis that took the connection but
// never answers is the context's error itself, not a *ConfigError: the
// bot stops cleanly instead of blaming REDIS_URL.
func TestOpenStoreStoppedWhileConnecting(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	// The first connection is the plain dial of the check, the next
	// the client's, whose PING is never answered: the stop comes then.
	go func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
			if len(conns) == 2 {
				cancel()
			}
		}
	}()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := OpenStore(ctx, StoreConfig{RedisURL: "redis://" + ln.Addr().String() + "/0"}, log)
	if err == nil {
		st.Close()
		t.Fatal("OpenStore succeeded on a Redis that never answers")
	}
	if _, ok := errors.AsType[*ConfigError](err); ok || err != context.Canceled {
		t.Errorf("OpenStore after a stop = %T %v, want context.Canceled itself", err, err)
	}
}

// A malformed Redis URL gets advice that fits it: the form wanted when the
// scheme is missing or white space surrounds it, and the advice on
// passwords only for a URL that has a user name or password.
func TestOpenStoreRedisURLAdvice(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	const form, encode = "want redis://host:port/db", "percent-encode"
	for _, tt := range []struct {
		url, want, notWant string
	}{
		{"10.0.0.5:6379", "REDIS_URL: the URL has no scheme: " + form, encode},
		{"localhost:6379/0", "the URL has no scheme", encode},
		{" redis://10.0.0.5:6379/0", "REDIS_URL: the URL has white space before or after it", encode},
		{"redis://10.0.0.5:6379/0\n", "white space", encode},
		{"redis://10.0.0.5:bad port/0", "the URL does not parse: " + form, encode},
		{"redis://h:6379/0#frag", "the URL has a '#': " + form, encode},
		{"redis://:hunter2-pass/xyz@127.0.0.1:6379/12", "the URL does not parse: " + encode, form},
		{"redis://:hunter2-pass#xyz@127.0.0.1:6379/12", "the URL has a '#': " + encode, form},
	} {
		_, err := OpenStore(t.Context(), StoreConfig{RedisURL: tt.url, Dir: t.TempDir()}, log)
		if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), tt.notWant) {
			t.Errorf("OpenStore(%q): got error %v, want one containing %q and not %q", tt.url, err, tt.want, tt.notWant)
		}
	}
}

// A Redis Cluster or Sentinels named by a list of IPv6 literals, which
// net/url takes for no host, is read as the store reads it: refused only
// as out of reach, and named without its password.
func TestOpenStoreIPv6Seeds(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, u := range []string{
		"redis+cluster://:v6-hunter2@[::1]:1,[::1]:2",
		"redis+sentinel://:v6-hunter2@[::1]:1,[::1]:2/0?master_name=toolgate",
	} {
		_, err := OpenStore(t.Context(), StoreConfig{RedisURL: u, Dir: t.TempDir()}, log)
		if err == nil || !strings.HasPrefix(err.Error(), "REDIS_URL: connect to redis at ") || strings.Contains(err.Error(), "v6-hunter2") {
			t.Errorf("OpenStore(%q): %v; want it refused as out of reach, without its password", u, err)
		}
	}
}

// A DATA_DIR that cannot hold the embedded store (here it is a file) is a
// *ConfigError naming DATA_DIR and the file: a setting to fix, exit
// status 2.
func TestOpenStoreBadDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(dir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := OpenStore(t.Context(), StoreConfig{Dir: dir}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	var ce *ConfigError
	if err == nil || !errors.As(err, &ce) || !strings.HasPrefix(err.Error(), "DATA_DIR: ") || !strings.Contains(err.Error(), filepath.Join(dir, StoreFile)) {
		t.Errorf("got %v, want a *ConfigError naming DATA_DIR and %s", err, filepath.Join(dir, StoreFile))
	}
}

// A DATA_DIR on a read-only file system (a container's read-only root with
// no volume mounted at DATA_DIR) is a setting to fix too: EROFS, which
// fs.ErrPermission does not match, is a *ConfigError naming DATA_DIR.
func TestStoreOpenErrorReadOnly(t *testing.T) {
	path := filepath.Join("/data", StoreFile)
	for _, tt := range []struct {
		name   string
		err    error
		config bool
	}{
		{"read-only file system", fmt.Errorf("open store %s: %w", path, &fs.PathError{Op: "mkdir", Path: "/data", Err: syscall.EROFS}), true},
		{"no permission", fmt.Errorf("open store %s: %w", path, &fs.PathError{Op: "open", Path: path, Err: syscall.EACCES}), true},
		{"locked", fmt.Errorf("open store %s: file is locked, is another process using it: %w", path, errors.New("timeout")), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := storeOpenError(tt.err)
			var ce *ConfigError
			if got := errors.As(err, &ce); got != tt.config {
				t.Fatalf("storeOpenError(%v) = %T %v, want a *ConfigError: %v", tt.err, err, err, tt.config)
			}
			if tt.config && (!strings.HasPrefix(err.Error(), "DATA_DIR: ") || !strings.Contains(err.Error(), path)) {
				t.Errorf("storeOpenError(%v) = %q, want it to name DATA_DIR and %s", tt.err, err, path)
			}
			if !errors.Is(err, tt.err) {
				t.Errorf("storeOpenError(%v) = %v, want it to wrap the error", tt.err, err)
			}
		})
	}
}

// A Redis that may evict keys under memory pressure is used, with a
// warning that names its policy: every key the store writes has a time to
// live, so pending approvals could be dropped. One that never evicts is
// used without it.
func TestOpenStoreWarnsOfEviction(t *testing.T) {
	url, ok := teststore.RedisURL(t)
	if !ok {
		t.Skip("REDIS_URL is not set")
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("REDIS_URL must name a single node here: %v", err)
	}
	admin := redis.NewClient(opts)
	t.Cleanup(func() { _ = admin.Close() })
	ctx := t.Context()
	was, err := admin.ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil {
		t.Fatal(err)
	}
	// The policy applies only once memory reaches maxmemory, which the
	// test server does not set: other tests sharing it see no change.
	t.Cleanup(func() { admin.ConfigSet(context.Background(), "maxmemory-policy", was["maxmemory-policy"]) })
	for _, policy := range []string{"volatile-lru", "noeviction"} {
		if err := admin.ConfigSet(ctx, "maxmemory-policy", policy).Err(); err != nil {
			t.Fatal(err)
		}
		var logs bytes.Buffer
		st, err := OpenStore(ctx, StoreConfig{RedisURL: url, RedisPrefix: "test-" + store.NewRunID()}, slog.New(slog.NewTextHandler(&logs, nil)))
		if err != nil {
			t.Fatal(err)
		}
		_ = st.Close()
		warned := strings.Contains(logs.String(), "maxmemory_policy="+policy)
		if want := policy != "noeviction"; warned != want {
			t.Errorf("policy %s: warned %v, want %v; logs:\n%s", policy, warned, want, logs.String())
		}
	}
}

// A replica whose clock is more than a second off Redis's says so at
// start: deadlines are judged by each replica's clock. One in step does
// not.
func TestOpenStoreWarnsOfClockSkew(t *testing.T) {
	url, ok := teststore.RedisURL(t)
	if !ok {
		t.Skip("REDIS_URL is not set")
	}
	st, err := redisstore.New(t.Context(), url, redisstore.Options{Prefix: "test-" + store.NewRunID()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	for _, off := range []time.Duration{0, 5 * time.Second, -5 * time.Second} {
		var logs bytes.Buffer
		warnClockSkew(t.Context(), st, slog.New(slog.NewTextHandler(&logs, nil)), func() time.Time { return time.Now().Add(off) })
		warned := strings.Contains(logs.String(), "clock is off from redis")
		if want := off != 0; warned != want {
			t.Errorf("clock %v off: warned %v, want %v; logs:\n%s", off, warned, want, logs.String())
		}
		if off == 0 {
			continue
		}
		_, said, _ := strings.Cut(logs.String(), "ahead_of_redis=")
		said, _, _ = strings.Cut(said, " ")
		if d, err := time.ParseDuration(strings.TrimSpace(said)); err != nil || (d-off).Abs() > time.Second {
			t.Errorf("clock %v off: the warning says %q", off, said)
		}
	}
}
