package scheduler

// WithoutCampaign makes an [Elector] a follower: NewElector checks its
// arguments as usual but never campaigns, so this instance never leads
// and its IsLeader always returns [ErrNotLeader] (gocron skips every run
// here); the replicas that campaign elect a leader among themselves. Run
// a replica that must never lead (a host being drained, a read-only
// region, a canary) with it, and read who leads with the adapter's Holder
// on the Elector's key (gormlock.Holder). It is the scheduler's twin of
// [ormlock.WithoutCampaign], which makes an adapter's Lead follow.
// Applies to NewElector. The default is to campaign. See
// docs/SCHEDULES.md (Elector (gocron)) and docs/OPERATIONS.md (Leaders).
func WithoutCampaign() Option { return func(c *config) { c.follow = true } }
