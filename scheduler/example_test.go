package scheduler_test

import (
	"context"
	"errors"
	"log"

	"github.com/ormlock/ormlock/scheduler"
)

// IsLeader reports ErrNotLeader on the replicas that stand by.
func ExampleElector_IsLeader() {
	var elector *scheduler.Elector
	if err := elector.IsLeader(context.Background()); errors.Is(err, scheduler.ErrNotLeader) {
		log.Print("standing by")
	}
}
