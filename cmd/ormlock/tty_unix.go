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

// tcsetpgrp makes pgrp the terminal's foreground group. A process outside
// the foreground group may do so only with SIGTTOU ignored (or the kernel
// stops it), hence the brief Ignore; the supervisor starts no process
// meanwhile, so none inherits it.
func tcsetpgrp(f *os.File, pgrp int) error {
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	p := int32(pgrp)
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), syscall.TIOCSPGRP, uintptr(unsafe.Pointer(&p))); errno != 0 {
		return errno
	}
	return nil
}
