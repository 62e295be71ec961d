package botsetup

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// A hardened process is not dumpable, still reads its own /proc/self (the
// process metrics gather), and a program it starts, running as the same
// user, cannot read its environment; without Harden it can. The processes
// under test are copies of the test binary (as root, they switch to the
// user nobody first, as root reads every process's environment).
func TestHardenKeepsTheEnvironmentFromChildren(t *testing.T) {
	if mode := os.Getenv("HARDEN_HELPER"); mode != "" {
		hardenHelper(mode == "harden")
		return
	}
	helper := func(mode string) string {
		t.Helper()
		cmd := exec.Command(os.Args[0], "-test.run=^TestHardenKeepsTheEnvironmentFromChildren$")
		cmd.Env = append(os.Environ(), "HARDEN_HELPER="+mode, "HARDEN_SECRET=s3cr3t-token")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helper (%s): %v\n%s", mode, err, out)
		}
		return string(out)
	}
	if got := helper("plain"); !strings.Contains(got, "s3cr3t-token") {
		t.Fatalf("without Harden a child could not read its parent's environment either (%q): this test proves nothing here", got)
	}
	got := helper("harden")
	for _, want := range []string{"dumpable=false", "metrics=ok", "child=refused"} {
		if !strings.Contains(got, want) {
			t.Errorf("the hardened helper says %q, want %q", got, want)
		}
	}
	if strings.Contains(got, "s3cr3t-token") {
		t.Errorf("a program the hardened process started read its environment: %q", got)
	}
}

// hardenHelper hardens this process if asked, then reports what it and a
// child of it can read.
func hardenHelper(harden bool) {
	if os.Geteuid() == 0 {
		const nobody = 65534
		if err := syscall.Setresgid(nobody, nobody, nobody); err != nil {
			fmt.Println("setresgid:", err)
			return
		}
		if err := syscall.Setresuid(nobody, nobody, nobody); err != nil {
			fmt.Println("setresuid:", err)
			return
		}
		// A change of user makes a process non-dumpable: undo that, so
		// that only Harden makes it so.
		if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetDumpable, 1, 0); errno != 0 {
			fmt.Println("prctl:", errno)
			return
		}
	}
	if harden {
		if err := Harden(); err != nil {
			fmt.Println("harden:", err)
			return
		}
	}
	d, err := dumpable()
	fmt.Printf("dumpable=%v err=%v\n", d, err)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{ReportErrors: true}))
	if _, err := reg.Gather(); err != nil {
		fmt.Println("metrics:", err)
	} else {
		fmt.Println("metrics=ok")
	}
	child, err := exec.Command("cat", "/proc/"+strconv.Itoa(os.Getpid())+"/environ").CombinedOutput()
	if err != nil {
		fmt.Println("child=refused")
		return
	}
	fmt.Printf("child read: %s\n", child)
}
