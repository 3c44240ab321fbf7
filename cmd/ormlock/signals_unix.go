//go:build unix

package main

import (
	"os"
	"syscall"
)

// forwarded are the signals ormlock passes on to COMMAND.
var forwarded = []os.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGUSR1, syscall.SIGUSR2}
