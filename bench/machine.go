package bench

import (
	"bufio"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// Machine describes where a run happened.
type Machine struct {
	// NumCPU is runtime.NumCPU (what nproc prints).
	NumCPU int
	// CPU is the model name from /proc/cpuinfo.
	CPU string
	// Go is the Go version and GOOS/GOARCH.
	Go string
	// Kernel is the kernel release.
	Kernel string
	// Servers maps a target name to its server's version string.
	Servers map[string]string
	// LoadBefore and LoadAfter are /proc/loadavg at the start and end.
	LoadBefore, LoadAfter string
	// Link describes the simulated network link every SQL connection went
	// through, with its measured round trip; empty for loopback.
	Link string
	// Date is when the run started.
	Date time.Time
}

// ThisMachine fills in what can be read without the servers.
func ThisMachine() Machine {
	m := Machine{NumCPU: runtime.NumCPU(), Go: runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH,
		Servers: map[string]string{}, LoadBefore: LoadAvg(), Date: time.Now()}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// LoadAvg returns the 1, 5 and 15 minute load averages from /proc/loadavg.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// PgBouncerVersion returns the first line of pgbouncer --version, or "".
func PgBouncerVersion() string {
	for _, bin := range []string{"pgbouncer", "/usr/sbin/pgbouncer"} {
		if out, err := exec.Command(bin, "--version").Output(); err == nil {
			line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
			return strings.TrimSpace(line)
		}
	}
	return ""
}
