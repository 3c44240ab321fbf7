package demo

import "testing"

func TestPoolerSafe(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u@h/db":                            "postgres://u@h/db?default_query_exec_mode=simple_protocol",
		"postgresql://u@h/db?sslmode=disable":          "postgresql://u@h/db?sslmode=disable&default_query_exec_mode=simple_protocol",
		"host=h dbname=db":                             "host=h dbname=db default_query_exec_mode=simple_protocol",
		"postgres://h/db?default_query_exec_mode=exec": "postgres://h/db?default_query_exec_mode=exec",
		"root@tcp(127.0.0.1:3306)/db":                  "root@tcp(127.0.0.1:3306)/db",
	} {
		if got := PoolerSafe(in); got != want {
			t.Errorf("PoolerSafe(%q) = %q, want %q", in, got, want)
		}
	}
}
