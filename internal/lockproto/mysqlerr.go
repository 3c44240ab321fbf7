package lockproto

import (
	"strconv"
	"strings"
)

// MySQLErrno returns the MySQL/MariaDB error number of a server error in
// err's chain, or 0. It reads the number from the error's text, which
// go-sql-driver/mysql writes as "Error 1146 (42S02): ..." (or "Error 1146:
// ..." without a SQLSTATE), rather than naming the driver's type: importing
// the driver for one type would link it into every PostgreSQL-only binary.
// mysql_test.go checks the format against the driver's own type.
func MySQLErrno(err error) int {
	for err != nil {
		if n := errnoOf(err.Error()); n != 0 {
			return n
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if n := MySQLErrno(e); n != 0 {
					return n
				}
			}
			return 0
		default:
			return 0
		}
	}
	return 0
}

// errnoOf parses the number of "Error NNNN: ..." or "Error NNNN (SQLST): ...".
func errnoOf(text string) int {
	rest, ok := strings.CutPrefix(text, "Error ")
	if !ok {
		return 0
	}
	i := 0
	for i < len(rest) && i < 6 && rest[i] >= '0' && rest[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0
	}
	tail := rest[i:]
	// "Error 1146: ..." or "Error 1146 (42S02): ..." (a five-character SQLSTATE)
	if !strings.HasPrefix(tail, ":") && !(len(tail) >= 9 && tail[0:2] == " (" && tail[7:9] == "):") {
		return 0
	}
	n, err := strconv.Atoi(rest[:i])
	if err != nil {
		return 0
	}
	return n
}

// isMySQLErrno reports whether err's chain holds a server error numbered one of nums.
func isMySQLErrno(err error, nums ...int) bool {
	n := MySQLErrno(err)
	for _, m := range nums {
		if n != 0 && n == m {
			return true
		}
	}
	return false
}
