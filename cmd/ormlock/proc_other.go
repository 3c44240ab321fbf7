//go:build unix && !linux

package main

import "syscall"

// becomeSubreaper: only Linux has child subreapers; elsewhere the processes
// COMMAND leaves behind are found through its process group only.
func becomeSubreaper() {}

// tieToParent: only Linux has a parent-death signal.
func tieToParent(*syscall.SysProcAttr) {}

// descendants: without /proc, none beyond COMMAND's process group.
func descendants(int) []int { return nil }
