package tools

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// envReapChild marks the child process of TestReapOrphans.
const envReapChild = "TOOLS_TEST_REAP_CHILD"

// prSetChildSubreaper is linux/prctl.h's PR_SET_CHILD_SUBREAPER: the
// process is given its descendants' orphans, as PID 1 is.
const prSetChildSubreaper = 36

// What run_command's programs leave behind (a process of their group the
// kill ends, one that escaped it with setsid and exits later) is handed to
// the process that reaps orphans, as to PID 1, and waited for: no zombie
// is left; and the programs run_command starts meanwhile are never taken
// for orphans (each still reports its own exit status). It runs in a
// child process, a subreaper standing for PID 1, so that no other test's
// process is waited for.
func TestReapOrphans(t *testing.T) {
	if os.Getenv(envReapChild) != "" {
		reapChild()
		return
	}
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("no setsid")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestReapOrphans$")
	cmd.Env = append(os.Environ(), envReapChild+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("NO ZOMBIES")) {
		t.Errorf("child: %v\n%s", err, out)
	}
}

func reapChild() {
	fail := func(format string, a ...any) {
		fmt.Printf("FAIL: "+format+"\n", a...)
		os.Exit(1)
	}
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		fail("PR_SET_CHILD_SUBREAPER: %v", errno)
	}
	// A program a tool started is left to its exec.Cmd, however long it
	// waits to be waited for; any other child that ended is waited for.
	own := exec.Command("true")
	waited, err := startKept(own, own.Start)
	if err != nil {
		fail("start: %v", err)
	}
	orphan := exec.Command("true")
	if err := orphan.Start(); err != nil {
		fail("start: %v", err)
	}
	for !ended(own.Process.Pid) || !ended(orphan.Process.Pid) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := reapOrphans(); n != 1 || !ended(own.Process.Pid) || ended(orphan.Process.Pid) {
		fail("reapOrphans waited for %d; want the orphan only", n)
	}
	if err := own.Wait(); err != nil {
		fail("the program's own wait: %v", err)
	}
	waited()

	ctx, cancel := context.WithCancel(context.Background())
	reaping := make(chan struct{})
	go func() {
		defer close(reaping)
		ReapOrphans(ctx)
	}()
	tool, err := RunCommand(CommandConfig{Allow: []string{"sh"}, Dir: os.TempDir(), Timeout: 20 * time.Second})
	if err != nil {
		fail("RunCommand: %v", err)
	}
	run := func(script string) string {
		res, err := tool.Handler(ctx, []byte(fmt.Sprintf(`{"argv":["sh","-c",%q]}`, script)))
		if err != nil {
			fail("run_command %q: %v", script, err)
		}
		return res.Content
	}
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			script := "sleep 0.05 & sleep 0.1 & exit 0" // left to the group's kill
			if i%2 == 0 {
				script = "setsid sleep 0.2 > /dev/null 2>&1 < /dev/null & exit 3" // outlives the kill
			}
			want := map[bool]string{true: "exit status 3", false: "exit status 0"}[i%2 == 0]
			if got := run(script); !strings.Contains(got, want) {
				fail("run_command %q: %q, want %q (taken for an orphan?)", script, got, want)
			}
		})
	}
	wg.Wait()
	deadline := time.Now().Add(20 * time.Second)
	for zombies() > 0 {
		if time.Now().After(deadline) {
			fail("%d zombies left", zombies())
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	<-reaping
	fmt.Println("NO ZOMBIES")
}

// zombies counts this process's children that ended and were not waited
// for, or that still run (the setsid sleeps).
func zombies() int {
	self := strconv.Itoa(os.Getpid())
	entries, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range entries {
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(stat, ')')
		if f := strings.Fields(string(stat[i+1:])); i > 0 && len(f) > 1 && f[1] == self {
			n++
		}
	}
	return n
}

// ended reports whether pid is a process that ended and was not waited
// for yet (a zombie).
func ended(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	i := bytes.LastIndexByte(stat, ')')
	f := strings.Fields(string(stat[i+1:]))
	return err == nil && i > 0 && len(f) > 0 && f[0] == "Z"
}
