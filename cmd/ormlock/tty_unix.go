//go:build unix

package main

import (
	"os"
	"os/signal"
	"syscall"
	"unsafe"
)

// controllingTTY returns the controlling terminal, or nil without one.
func controllingTTY() *os.File {
	f, err := os.OpenFile("/dev/tty", os.O_RDWR, 0) // ENXIO without a controlling terminal
	if err != nil {
		return nil
	}
	return f
}

func tcgetpgrp(f *os.File) (int, error) {
	var pgrp int32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), syscall.TIOCGPGRP, uintptr(unsafe.Pointer(&pgrp))); errno != 0 {
		return 0, errno
	}
	return int(pgrp), nil
}

// ignoreTTOU lets the caller change the terminal's foreground group while
// its own group is in the background: a process outside the foreground
// group may do so only with SIGTTOU ignored (or the kernel stops its
// group). The supervisor calls it once COMMAND has started, so that
// COMMAND does not inherit the ignored SIGTTOU, and keeps it for good: it
// starts no other process. (signal.Reset would not undo it either: Go
// installs its SIGTTOU handler only on demand, and Reset leaves an ignored
// SIGTTOU ignored.)
func ignoreTTOU() { signal.Ignore(syscall.SIGTTOU) }

// tcsetpgrp makes pgrp the terminal's foreground group; see ignoreTTOU.
func tcsetpgrp(f *os.File, pgrp int) error {
	p := int32(pgrp)
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), syscall.TIOCSPGRP, uintptr(unsafe.Pointer(&p))); errno != 0 {
		return errno
	}
	return nil
}
