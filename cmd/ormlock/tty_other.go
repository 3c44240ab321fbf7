//go:build !linux

package main

import "os"

// fromTerminal: outside Linux every signal is forwarded, so Ctrl-C at a
// terminal reaches COMMAND twice (directly, and through ormlock).
func fromTerminal(os.Signal) bool { return false }
