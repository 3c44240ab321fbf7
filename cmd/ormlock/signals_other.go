//go:build !unix

package main

import "os"

// forwarded are the signals ormlock passes on to COMMAND.
var forwarded = []os.Signal{os.Interrupt}
