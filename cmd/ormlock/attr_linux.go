package main

import "syscall"

// childAttr makes the kernel send COMMAND SIGKILL should ormlock die without
// stopping it (kill -9, the OOM killer): the database frees the lock as soon
// as ormlock's connection goes, so COMMAND must not go on without it.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
