package main

import (
	"strings"
	"testing"
)

// TestRedact: every credential form the drivers accept is hidden, and the
// rest of the DSN stays readable.
func TestRedact(t *testing.T) {
	for _, c := range []struct{ dsn, keep string }{
		{"postgres://app:s3cret@db:5432/app?sslmode=disable", "postgres://app:xxxxx@db:5432/app"},
		{"postgresql://app@db/app?password=s3cret&sslmode=disable", "sslmode=disable"},
		{"postgres://app@db/app?sslpassword=s3cret", "password=xxxxx"},
		{"postgres://app@db/app?PASSWORD=s3cret", "app@db/app"},
		{"postgres://app:s3cret@db/app#s3cret", "app:xxxxx@db"},
		{"postgres://app:s3cret@%zz/app", "not shown"},
		{"host=db user=app password=s3cret dbname=app", "host=db user=app password=xxxxx dbname=app"},
		{"host=db password = 's3 cret\\' more' user=app", "user=app"},
		{"host=db sslpassword=s3cret", "sslpassword=xxxxx"},
		{"app:s3cret@tcp(db:3306)/app?parseTime=true", "app:xxxxx@tcp(db:3306)/app?parseTime=true"},
		{"app:s3c@r:et@tcp(db:3306)/app", "app:xxxxx@tcp(db:3306)/app"},
		{"app:s3cret@/app", "app:xxxxx@/app"},
		{"app@tcp(db)/app", "app@tcp(db)/app"},
	} {
		got := redact(c.dsn)
		if strings.Contains(got, "s3") || strings.Contains(got, "et@") || !strings.Contains(got, c.keep) {
			t.Errorf("redact(%q) = %q, want the password hidden and %q kept", c.dsn, got, c.keep)
		}
	}
}
