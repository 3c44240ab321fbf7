package main

import (
	"os"
	"syscall"
	"unsafe"
)

// fromTerminal reports whether the keyboard signal s (SIGINT from Ctrl-C,
// SIGQUIT from Ctrl-\) most likely came from ormlock's terminal: ormlock's
// process group is the terminal's foreground group. COMMAND shares that
// group, so the terminal sent it s too, and forwarding would deliver it
// twice (to many programs a second Ctrl-C means "force quit").
func fromTerminal(s os.Signal) bool {
	if s != syscall.SIGINT && s != syscall.SIGQUIT {
		return false
	}
	f, err := os.Open("/dev/tty") // ENXIO without a controlling terminal
	if err != nil {
		return false
	}
	defer f.Close()
	var pgrp int32
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), syscall.TIOCGPGRP, uintptr(unsafe.Pointer(&pgrp)))
	return errno == 0 && int(pgrp) == syscall.Getpgrp()
}
