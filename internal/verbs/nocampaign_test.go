package verbs_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/verbs"
)

// WithoutCampaign (config.NoCampaign) is Lead's alone: Open refuses it
// for a verb that does not follow, in step 5 after an invalid option, and
// takes it for one that does.
func TestNoCampaignOnlyLead(t *testing.T) {
	ctx := context.Background()
	follow := func(c *config.Config) { c.NoCampaign = true }
	_, err := verbs.Open(ctx, binder{}, "test", "Session", []config.Option{follow}, verbs.Args{})
	if !errors.Is(err, errs.ErrInvalidArgument) || !strings.Contains(err.Error(), "test.Session: WithoutCampaign") {
		t.Errorf("Open(Session, WithoutCampaign) = %v, want ErrInvalidArgument naming the verb and the option", err)
	}
	optErr := errors.New("ormlock: invalid option")
	_, err = verbs.Open(ctx, binder{}, "test", "Session", []config.Option{follow, func(c *config.Config) { c.Fail(optErr) }}, verbs.Args{})
	if !errors.Is(err, optErr) {
		t.Errorf("Open with an invalid option and WithoutCampaign = %v, want the invalid option's error first", err)
	}
	if _, err := verbs.Open(ctx, binder{}, "test", "Lead", []config.Option{follow}, verbs.Args{Follows: true}); err != nil {
		t.Errorf("Open(Lead, WithoutCampaign) = %v, want nil", err)
	}
}
