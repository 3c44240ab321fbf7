//go:build !linux

package main

import "syscall"

// childAttr: only Linux can tie COMMAND's life to ormlock's (Pdeathsig).
func childAttr() *syscall.SysProcAttr { return nil }
