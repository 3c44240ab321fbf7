package bench

import (
	"bufio"
	"os"
	"os/exec"
	"runtime"
	"strconv"
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

// CPUTimes is the first line of /proc/stat: the clock ticks all CPUs spent
// busy and in total since boot.
type CPUTimes struct{ Busy, Total uint64 }

// ReadCPUTimes reads /proc/stat; the zero CPUTimes when it cannot. Idle and
// iowait count as not busy; everything else (user, nice, system, irq,
// softirq, steal) as busy.
func ReadCPUTimes() CPUTimes {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return CPUTimes{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return CPUTimes{}
	}
	var c CPUTimes
	// user nice system idle iowait irq softirq steal (guest and guest_nice
	// are already in user and nice).
	for i, s := range f[1:min(len(f), 9)] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return CPUTimes{}
		}
		c.Total += v
		if i != 3 && i != 4 {
			c.Busy += v
		}
	}
	return c
}

// BusySince returns the busy fraction (0..1) of all CPUs between before and
// c, or -1 when it cannot be told.
func (c CPUTimes) BusySince(before CPUTimes) float64 {
	if c.Total <= before.Total || before.Total == 0 {
		return -1
	}
	return float64(c.Busy-before.Busy) / float64(c.Total-before.Total)
}

// LoadAvg1 returns the 1-minute load average, or -1.
func LoadAvg1() float64 {
	f := strings.Fields(LoadAvg())
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}
