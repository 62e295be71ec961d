package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// NewClient returns a go-redis client for a URL in one of these forms:
//
//	redis://[user:password@]host:port[/db][?option=value...]    one node
//	rediss://...                                                one node over TLS
//	unix://[user:password@]/path/to/socket[?db=N]               one node
//	redis+cluster://[user:password@]host1:port,host2:port[?option=value...]
//	rediss+cluster://...                                        cluster over TLS
//	redis+sentinel://[user:password@]host1:port,host2:port[/db]?master_name=NAME[&password=...]
//	rediss+sentinel://...                                       sentinel over TLS
//
// Options are those of redis.ParseURL, redis.ParseClusterURL and
// redis.ParseFailoverURL respectively (dial_timeout, max_retries, pool_size
// and so on). For the cluster and sentinel forms the comma-separated hosts
// are seed nodes (cluster) or sentinels; more may be given with addr=host:port.
// In the sentinel form the user information authenticates to the
// sentinels, and the username and password options to the master.
func NewClient(rawURL string) (redis.UniversalClient, error) {
	t, err := parseTarget(rawURL)
	if err != nil {
		return nil, err
	}
	return t.client(0), nil
}

// connBufferSize is the size of each connection's read and write buffers,
// for plain commands and (unless the URL sets pipeline_read_buffer_size
// or pipeline_write_buffer_size) for pipelines. go-redis gives 32 KiB to
// plain commands and 128 KiB to pipelines, for up to 10 per CPU plain
// connections and 10 pipeline ones: about 4 MiB once a burst has opened
// them all, held for good. The store's commands and replies are a few KiB
// (a larger value is read straight into its own slice, and written
// through), so smaller buffers cost no round trip.
const connBufferSize = 16 << 10

// target is a parsed Redis URL: how to make its client, and the addresses
// of the nodes it starts from (the node, the cluster seeds, the sentinels).
type target struct {
	// client makes a client; with pool > 0, one of at most pool
	// connections (per node on a Cluster), no pool of its own for
	// pipelines, and no retries: a renewal sent again once its caller
	// gave up would extend a hold its owner took as not renewed (the
	// owner asks again, with a deadline of its own).
	client  func(pool int) redis.UniversalClient
	network string
	addrs   []string
}

func parseTarget(rawURL string) (target, error) {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return target{}, fmt.Errorf("parse redis url: missing scheme")
	}
	switch scheme {
	case "redis", "rediss", "unix":
		o, err := redis.ParseURL(rawURL)
		if err != nil {
			return target{}, fmt.Errorf("parse redis url: %w", err)
		}
		o.ReadBufferSize, o.WriteBufferSize = connBufferSize, connBufferSize
		o.PipelineReadBufferSize = cmp.Or(o.PipelineReadBufferSize, connBufferSize)
		o.PipelineWriteBufferSize = cmp.Or(o.PipelineWriteBufferSize, connBufferSize)
		o.ContextTimeoutEnabled = true
		return target{client: func(pool int) redis.UniversalClient {
			o := *o
			if pool > 0 {
				o.PoolSize, o.PipelinePoolSize, o.MinIdleConns, o.MaxIdleConns, o.MaxRetries = pool, -1, 0, 0, -1
			}
			return redis.NewClient(&o)
		}, network: o.Network, addrs: []string{o.Addr}}, nil
	case "redis+cluster", "rediss+cluster":
		u, err := seedURL(strings.TrimSuffix(scheme, "+cluster"), rest)
		if err != nil {
			return target{}, err
		}
		if path := clusterPath(rest); path != "" && path != "/" && path != "/0" {
			return target{}, fmt.Errorf("parse redis cluster url: a cluster has database 0 only, not %s", strings.TrimPrefix(path, "/"))
		}
		o, err := redis.ParseClusterURL(u)
		if err != nil {
			return target{}, fmt.Errorf("parse redis cluster url: %w", err)
		}
		if o.ReadOnly || o.RouteByLatency || o.RouteRandomly {
			return target{}, errors.New("parse redis cluster url: read_only, route_by_latency and route_randomly are not supported: the store reads what it has just written, which a replica may not have yet")
		}
		// Setting the pipeline buffers would give each node a second pool:
		// they are left to the URL.
		o.ReadBufferSize, o.WriteBufferSize = connBufferSize, connBufferSize
		o.ContextTimeoutEnabled = true
		return target{client: func(pool int) redis.UniversalClient {
			o := *o
			if pool > 0 {
				o.PoolSize, o.PipelinePoolSize, o.MinIdleConns, o.MaxIdleConns, o.MaxRetries = pool, -1, 0, 0, -1
			}
			return redis.NewClusterClient(&o)
		}, network: "tcp", addrs: o.Addrs}, nil
	case "redis+sentinel", "rediss+sentinel":
		u, err := seedURL(strings.TrimSuffix(scheme, "+sentinel"), rest)
		if err != nil {
			return target{}, err
		}
		o, err := redis.ParseFailoverURL(u)
		if err != nil {
			return target{}, fmt.Errorf("parse redis sentinel url: %w", err)
		}
		if o.MasterName == "" {
			return target{}, fmt.Errorf("parse redis sentinel url: master_name option is required")
		}
		if o.ReplicaOnly || o.RouteByLatency || o.RouteRandomly {
			return target{}, errors.New("parse redis sentinel url: replica_only, route_by_latency and route_randomly are not supported: the store reads what it has just written, which a replica may not have yet")
		}
		o.ReadBufferSize, o.WriteBufferSize = connBufferSize, connBufferSize
		o.PipelineReadBufferSize = cmp.Or(o.PipelineReadBufferSize, connBufferSize)
		o.PipelineWriteBufferSize = cmp.Or(o.PipelineWriteBufferSize, connBufferSize)
		o.ContextTimeoutEnabled = true
		return target{client: func(pool int) redis.UniversalClient {
			o := *o
			if pool > 0 {
				o.PoolSize, o.PipelinePoolSize, o.MinIdleConns, o.MaxIdleConns, o.MaxRetries = pool, -1, 0, 0, -1
			}
			return redis.NewFailoverClient(&o)
		}, network: "tcp", addrs: o.SentinelAddrs}, nil
	default:
		return target{}, fmt.Errorf("parse redis url: unsupported scheme %q", scheme)
	}
}

// CheckURL reports whether rawURL is a Redis URL NewClient accepts, and if
// it is, whether one of the nodes it names (the node, a cluster seed, a
// sentinel) accepts a connection within timeout. It dials with a plain
// net.Dialer, so an unreachable Redis is one error and none of go-redis's
// pool log lines. A nil error does not promise that commands will work
// (authentication and TLS are checked by the first command).
func CheckURL(ctx context.Context, rawURL string, timeout time.Duration) error {
	t, err := parseTarget(rawURL)
	if err != nil {
		return err
	}
	network := cmp.Or(t.network, "tcp")
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	var errs []error
	for _, addr := range t.addrs {
		c, err := d.DialContext(ctx, network, addr)
		if err == nil {
			return c.Close()
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return errors.New("the url names no redis node")
	}
	return fmt.Errorf("cannot reach redis: %w", errors.Join(errs...))
}

// OneHostURL returns a Redis Cluster or Sentinel URL that names several
// hosts ("redis+cluster://h1:p1,h2:p2/0") as one URL of one host with
// the others as addr options, which net/url parses (a list of IPv6
// literals is no host it takes); any other URL, or one that does not
// fold, as it is.
func OneHostURL(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok || !(strings.HasSuffix(scheme, "+cluster") || strings.HasSuffix(scheme, "+sentinel")) {
		return raw
	}
	u, err := seedURL(scheme, rest)
	if err != nil {
		return raw
	}
	return u
}

// clusterPath returns the path of "user@h1:p1,h2:p2/path?q".
func clusterPath(rest string) string {
	rest, _, _ = strings.Cut(rest, "?") // a query may hold a "/"
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		return rest[i:]
	}
	return ""
}

// seedURL turns "user@h1:p1,h2:p2/path?q" into a URL of scheme with host h1:p1
// and the other hosts as addr options, the form go-redis parses.
func seedURL(scheme, rest string) (string, error) {
	authority, tail := rest, ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		authority, tail = rest[:i], rest[i:]
	}
	userinfo, hosts := "", authority
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		userinfo, hosts = authority[:i+1], authority[i+1:]
	}
	list := strings.Split(hosts, ",")
	if list[0] == "" {
		return "", fmt.Errorf("parse redis url: no host")
	}
	path, query, _ := strings.Cut(tail, "?")
	q, err := url.ParseQuery(query)
	if err != nil {
		return "", fmt.Errorf("parse redis url: %w", err)
	}
	for _, h := range list[1:] {
		if h == "" {
			return "", fmt.Errorf("parse redis url: empty host in %q", hosts)
		}
		q.Add("addr", h)
	}
	u := scheme + "://" + userinfo + list[0] + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u, nil
}

// EachPrimary calls fn with a client of each node of c that holds keys:
// the node (or Sentinel's primary), or every primary of a Cluster, at
// once.
func EachPrimary(ctx context.Context, c redis.UniversalClient, fn func(context.Context, *redis.Client) error) error {
	switch c := c.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, fn)
	case *redis.Client:
		return fn(ctx, c)
	default:
		return fmt.Errorf("unexpected Redis client %T", c)
	}
}
