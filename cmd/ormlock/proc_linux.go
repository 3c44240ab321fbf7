package main

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// becomeSubreaper makes the processes that COMMAND's processes leave behind
// (double forks, setsid, daemons) the caller's children instead of init's.
func becomeSubreaper() {
	const prSetChildSubreaper = 36 // PR_SET_CHILD_SUBREAPER, Linux 3.4
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
}

// tieToParent makes the kernel send COMMAND SIGKILL should its supervisor
// die without stopping it.
func tieToParent(attr *syscall.SysProcAttr) { attr.Pdeathsig = syscall.SIGKILL }

// descendants returns the live processes descended from pid, found in
// /proc. A process that forks meanwhile may be missed: callers that must
// stop them all call again until none is left.
func descendants(pid int) []int {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	children := map[int][]int{}
	for _, name := range names {
		p, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + name + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		fields := bytes.Fields(stat[i+1:])
		if len(fields) < 2 || string(fields[0]) == "Z" {
			continue // a zombie is dead already; its parent reaps it
		}
		ppid, err := strconv.Atoi(string(fields[1]))
		if err != nil {
			continue
		}
		children[ppid] = append(children[ppid], p)
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		out = append(out, children[p]...)
		queue = append(queue, children[p]...)
	}
	return out
}
