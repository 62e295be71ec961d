package botsetup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"path/filepath"
	"syscall"
	"time"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/redact"
	"github.com/toolgate/toolgate/slackapp"
	"github.com/toolgate/toolgate/store/boltstore"
	"github.com/toolgate/toolgate/store/redisstore"
)

const (
	// StoreFile is the embedded store's file name in StoreConfig.Dir.
	StoreFile = "toolgate.db"
	// redisCheckTimeout bounds the first connection to the Redis URL.
	redisCheckTimeout = 5 * time.Second
)

// Store is what the bot needs of a store; both implementations have it.
type Store interface {
	agent.Store
	slackapp.Store
	approvals.RecordStore
	approvals.BatchRecordStore
	io.Closer
}

var (
	_ Store = (*redisstore.Store)(nil)
	_ Store = (*boltstore.Store)(nil)
)

// StoreConfig says which store to open and how.
type StoreConfig struct {
	// RedisURL is the Redis to use (redis://, rediss://, redis+cluster://
	// or redis+sentinel://); empty means the embedded store in Dir.
	RedisURL string
	// RedisPrefix starts every Redis key; empty means redisstore's default.
	RedisPrefix string
	// Dir is the directory of the embedded store's file, StoreFile.
	Dir string
	// Retention and AuditRetention are how long finished runs and audit
	// entries are kept; zero means the store's defaults.
	Retention, AuditRetention time.Duration
	// AuditMax is how many audit entries are kept at most; zero means the
	// store's default.
	AuditMax int
	// WaitReplicas and WaitTimeout make every Redis write wait for that
	// many replicas (redisstore.Options); zero replicas: writes do not
	// wait. Refused on a Redis Cluster.
	WaitReplicas int
	WaitTimeout  time.Duration
}

// OpenStore connects to Redis when c.RedisURL is set, and otherwise opens
// the embedded store in c.Dir; it logs which one on log. The Redis URL is
// checked with a plain dial first, so an unreachable or malformed URL is one
// *ConfigError ("REDIS_URL: connect to redis at URL: ...", the URL without
// its password) rather than a log line per failed pool dial. An embedded
// store whose DATA_DIR cannot hold it (not a directory, not writable, on a
// read-only file system) is a *ConfigError naming DATA_DIR and the file;
// other failures (a file another process holds) are plain errors naming
// the file. When ctx ends while the Redis is being reached (a SIGTERM
// during start-up), the error is ctx.Err() itself, not a *ConfigError:
// nothing is wrong with REDIS_URL. The caller closes the store.
func OpenStore(ctx context.Context, c StoreConfig, log *slog.Logger) (Store, error) {
	if c.RedisURL != "" {
		if err := checkURLForm(c.RedisURL); err != nil {
			return nil, &ConfigError{Err: fmt.Errorf("REDIS_URL: %w", err)}
		}
		if err := redisstore.CheckURL(ctx, c.RedisURL, redisCheckTimeout); err != nil {
			if ctx.Err() != nil {
				// Stopped while dialling: the dial's error says
				// nothing of the URL.
				return nil, ctx.Err()
			}
			return nil, &ConfigError{Err: fmt.Errorf("REDIS_URL: connect to redis at %s: %w", redact.SafeURL(redisstore.OneHostURL(c.RedisURL)), err)}
		}
		// Bounded as the check above: a Redis that takes the dial but
		// never answers (TLS asked of a plain server) is refused in
		// seconds, not after the client's retries.
		pctx, cancel := context.WithTimeout(ctx, redisCheckTimeout)
		st, err := redisstore.New(pctx, c.RedisURL, redisstore.Options{Prefix: c.RedisPrefix, Retention: c.Retention, AuditRetention: c.AuditRetention, AuditMax: c.AuditMax, WaitReplicas: c.WaitReplicas, WaitTimeout: c.WaitTimeout, Log: log})
		cancel()
		if err != nil {
			// Only the caller's end is a stop: pctx's own time-out is a
			// Redis that does not answer, a setting to look at.
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, &ConfigError{Err: fmt.Errorf("REDIS_URL: connect to redis at %s: %w", redact.SafeURL(redisstore.OneHostURL(c.RedisURL)), err)}
		}
		log.Info("using redis store", "url", redact.SafeURL(redisstore.OneHostURL(c.RedisURL)), "prefix", c.RedisPrefix)
		warnEviction(ctx, st, log)
		warnClockSkew(ctx, st, log, time.Now)
		warnReplicas(ctx, st, c.WaitReplicas, log)
		return st, nil
	}
	path := filepath.Join(c.Dir, StoreFile)
	st, err := boltstore.Open(path, boltstore.Options{Retention: c.Retention, AuditRetention: c.AuditRetention, AuditMax: c.AuditMax, Logger: log})
	if err != nil {
		return nil, storeOpenError(err)
	}
	log.Info("using embedded store", "path", path)
	return st, nil
}

// storeOpenError is what OpenStore returns when the embedded store's file
// cannot be opened with err: a *ConfigError naming DATA_DIR when DATA_DIR
// names something that cannot hold the store (not a directory, missing,
// not writable, or on a read-only file system, such as a container's root
// with no volume mounted there, which fs.ErrPermission does not match),
// err itself otherwise (such as a file another process holds).
func storeOpenError(err error) error {
	if errors.Is(err, syscall.ENOTDIR) || errors.Is(err, fs.ErrPermission) || errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.EROFS) {
		return &ConfigError{Err: fmt.Errorf("DATA_DIR: %w", err)}
	}
	return err
}

// warnReplicas logs a warning when fewer replicas are connected to the
// Redis primary under st than each write waits for (want, when above
// zero): every write would then fail after the wait's timeout, and the bot
// would record no decision and no message until they are back. It does
// not refuse to start: a replica may be coming up beside the bot. A Redis
// that keeps INFO to itself is taken as it is.
func warnReplicas(ctx context.Context, st *redisstore.Store, want int, log *slog.Logger) {
	if want <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, redisCheckTimeout)
	defer cancel()
	n, err := st.ConnectedReplicas(ctx)
	if err != nil || n >= want {
		return
	}
	log.Warn("fewer redis replicas are connected than REDIS_WAIT_REPLICAS asks each write to reach: until they are, every write fails after REDIS_WAIT_TIMEOUT and the bot decides nothing and records no message; start the replicas, or lower REDIS_WAIT_REPLICAS", "connected_replicas", n, "redis_wait_replicas", want)
}

// maxClockSkew is how far a replica's clock may be from Redis's before it
// warns: deadlines are judged by each replica's clock.
const maxClockSkew = time.Second

// warnClockSkew logs a warning when this process's clock is more than
// maxClockSkew from Redis's: with several replicas, a late click could be
// accepted, or a call expired early, by as much as their clocks differ.
func warnClockSkew(ctx context.Context, st *redisstore.Store, log *slog.Logger, now func() time.Time) {
	ctx, cancel := context.WithTimeout(ctx, redisCheckTimeout)
	defer cancel()
	skew, within, err := st.ClockSkew(ctx, now)
	if err != nil || skew.Abs()-within <= maxClockSkew {
		return
	}
	log.Warn("this host's clock is off from redis's: each replica judges approval deadlines by its own clock, so replicas whose clocks differ accept a late click or expire a call early by as much; keep their clocks synchronised (NTP)", "ahead_of_redis", skew.Round(time.Millisecond))
}

// warnEviction logs a warning when the Redis under st may evict keys (its
// maxmemory-policy is not noeviction): every key the store writes has a
// time to live, so a paused run, its calls or a conversation's lease may
// be dropped under memory pressure. A Redis that keeps INFO to itself is
// taken as it is.
func warnEviction(ctx context.Context, st *redisstore.Store, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, redisCheckTimeout)
	defer cancel()
	policy, err := st.EvictionPolicy(ctx)
	if err != nil || policy == "" || policy == "noeviction" {
		return
	}
	log.Warn("redis may evict the bot's keys under memory pressure (paused runs, their calls, leases), losing pending approvals; set maxmemory-policy to noeviction", "maxmemory_policy", policy)
}
