package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	// startTimeout bounds a bot's start, until /healthz answers.
	startTimeout = 30 * time.Second
	// stopTimeout bounds a bot's graceful stop after SIGTERM; then it is
	// killed.
	stopTimeout = 60 * time.Second
	// logTail is how many of a bot's last log lines an error quotes.
	logTail = 20
)

// buildBot builds cmd/bot into dir and returns the binary's path. It needs
// the go command and a working directory inside the module.
func buildBot(ctx context.Context, dir string) (string, error) {
	out := filepath.Join(dir, "toolgate-bot")
	cmd := exec.CommandContext(ctx, goCommand(), "build", "-o", out, "github.com/toolgate/toolgate/cmd/bot")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the bot: %w: %s", err, strings.TrimSpace(string(b)))
	}
	return out, nil
}

// goCommand is the go binary: on PATH, else in GOROOT.
func goCommand() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	if root := os.Getenv("GOROOT"); root != "" {
		return filepath.Join(root, "bin", "go")
	}
	return "/usr/local/go/bin/go"
}

// botProc is one running bot process.
type botProc struct {
	name    string
	cmd     *exec.Cmd
	base    string // http://HTTP_ADDR
	exited  chan struct{}
	waitErr error // set before exited is closed

	logs    sync.WaitGroup // the goroutine reading the log
	mu      sync.Mutex
	tail    []string
	verbose io.Writer // nil: logs are only kept for errors
}

// startBot starts the bot binary with env (added to a minimal environment)
// and HTTP_ADDR on a free loopback port, and waits until its /healthz
// answers.
func startBot(ctx context.Context, name, bin string, env []string, verbose io.Writer) (*botProc, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, env...)
	cmd.Env = append(cmd.Env, "HTTP_ADDR="+addr)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &botProc{name: name, cmd: cmd, base: "http://" + addr, exited: make(chan struct{}), verbose: verbose}
	p.logs.Go(func() { p.readLog(stderr) })
	go func() {
		// Owned by stop, which waits on exited.
		p.logs.Wait()
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	deadline := time.Now().Add(startTimeout)
	client := &http.Client{Timeout: time.Second}
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if res, err := client.Get(p.base + "/healthz"); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		select {
		case <-p.exited:
			return nil, fmt.Errorf("%s exited at start (%v); its log ends with:\n%s", name, p.waitErr, p.lastLines())
		case <-time.After(50 * time.Millisecond):
		}
	}
	_ = p.stop()
	return nil, fmt.Errorf("%s did not answer /healthz within %v; its log ends with:\n%s", name, startTimeout, p.lastLines())
}

// freeAddr returns a loopback address with a port that was free a moment
// ago.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// readLog reads the bot's log, keeping the last lines for errors and
// copying them to verbose if set.
func (p *botProc) readLog(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if p.verbose != nil {
			fmt.Fprintf(p.verbose, "%s: %s\n", p.name, line)
		}
		p.mu.Lock()
		p.tail = append(p.tail, line)
		if len(p.tail) > logTail {
			p.tail = p.tail[len(p.tail)-logTail:]
		}
		p.mu.Unlock()
	}
	_, _ = io.Copy(io.Discard, r)
}

func (p *botProc) lastLines() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.tail, "\n")
}

// stop sends SIGTERM and waits for the process to end, killing it after
// stopTimeout. It returns the process's exit error, nil after a clean stop.
func (p *botProc) stop() error {
	select {
	case <-p.exited:
		return p.waitErr
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-p.exited:
		return p.waitErr
	case <-timer.C:
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("%s did not stop within %v after SIGTERM and was killed", p.name, stopTimeout)
	}
}

// alive reports whether the process is still running.
func (p *botProc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// rss returns the process's resident set size and the part of it mapped
// from files (the binary's pages, mostly), from /proc/PID/status.
func (p *botProc) rss() (rss, file int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, 0, fmt.Errorf("read rss of %s: %w", p.name, err)
	}
	found := 0
	for _, line := range strings.Split(string(b), "\n") {
		name, v, ok := strings.Cut(line, ":")
		var into *int64
		switch {
		case !ok:
			continue
		case name == "VmRSS":
			into = &rss
		case name == "RssFile":
			into = &file
		default:
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("read rss of %s: %q: %w", p.name, line, err)
		}
		*into = kb * 1024
		found++
	}
	if found != 2 {
		return 0, 0, fmt.Errorf("read rss of %s: no VmRSS or RssFile line", p.name)
	}
	return rss, file, nil
}

// metricSet is a scrape of /metrics: sample name with its labels (as
// written, e.g. `toolgate_store_calls_total{method="Decide"}`) -> value.
type metricSet map[string]float64

// scrape reads the bot's /metrics.
func (p *botProc) scrape(ctx context.Context, client *http.Client) (metricSet, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	// Uncompressed: a gzip writer per scrape would add to the memory the
	// bench reads.
	req.Header.Set("Accept-Encoding", "identity")
	res, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", p.name, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", p.name, res.Status)
	}
	return parseMetrics(res.Body)
}

// parseMetrics reads the Prometheus text format, keeping samples only.
func parseMetrics(r io.Reader) (metricSet, error) {
	out := metricSet{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	return out, nil
}

// roundTripsKey is where storeCalls puts the bots' Redis round trips
// (toolgate_store_round_trips_total), among the methods.
const roundTripsKey = "(round trips)"

// storeCalls returns the toolgate_store_calls_total samples by method, and
// under roundTripsKey the toolgate_store_round_trips_total sample if the
// bot exports one (on Redis).
func (m metricSet) storeCalls() map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		if k == "toolgate_store_round_trips_total" {
			out[roundTripsKey] += v
			continue
		}
		rest, ok := strings.CutPrefix(k, `toolgate_store_calls_total{method="`)
		if !ok {
			continue
		}
		out[strings.TrimSuffix(rest, `"}`)] += v
	}
	return out
}

// errStoreCountMissing means the bot does not export the store counter.
var errStoreCountMissing = errors.New("the bot exports no toolgate_store_calls_total")

// fetch writes what the bot serves at urlPath (a /debug/pprof/ profile,
// served with PPROF=true) into the file path.
func (p *botProc) fetch(ctx context.Context, urlPath, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.base+urlPath, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", p.name, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
