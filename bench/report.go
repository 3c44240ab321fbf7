package bench

import (
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// Header writes the machine, load and command of a run as Markdown.
func (r *Report) Header(w io.Writer, m Machine, command string) {
	fmt.Fprintf(w, "- Date: %s; run took %s\n", m.Date.UTC().Format("2006-01-02 15:04 MST"), r.Took.Round(time.Second))
	fmt.Fprintf(w, "- Machine: %d CPUs (nproc), %s; Linux %s; %s\n", m.NumCPU, m.CPU, m.Kernel, m.Go)
	fmt.Fprintf(w, "- Load average (1/5/15 min): %s before, %s after (other work shares the machine)\n", m.LoadBefore, m.LoadAfter)
	var names []string
	for _, t := range r.Targets {
		if v := m.Servers[t.Name]; v != "" {
			names = append(names, t.Name+": "+v)
		}
	}
	if v := m.Servers["pgbouncer"]; v != "" {
		names = append(names, "PgBouncer binary: "+v)
	}
	fmt.Fprintf(w, "- Servers: %s\n", strings.Join(names, "; "))
	if m.Link != "" {
		fmt.Fprintf(w, "- Network: every SQL connection through an in-process TCP proxy (bench.Link), %s\n", m.Link)
	} else {
		fmt.Fprintf(w, "- Network: loopback\n")
	}
	o := r.Options
	fmt.Fprintf(w, "- Each cell: %v measured, in %d interleaved rounds, after %d warm-up attempts per goroutine per round\n", o.Cell, o.Rounds, o.Warmup)
	fmt.Fprintf(w, "- Command: `%s`\n", command)
}

// Table writes the comparison as one Markdown table: a row per database,
// load and contender. ops/s counts acquisitions (for the 1×held load, where
// every attempt loses, it counts losses); ×sql is ops/s over the hand-written
// database/sql row of the same database and load (for Redis, over
// PostgreSQL's, marked †); p50/p99 are the latencies of attempts that took
// the lock, loser p50/p99 those of attempts that lost; loser÷acq is the
// loser p50 over the same contender's uncontended (1×distinct) p50;
// allocs/op is heap allocations per attempt and cpu/op the client process's
// CPU time (user + system, all goroutines) per attempt.
func (r *Report) Table(w io.Writer) {
	head := []string{"database", "load", "contender", "ops/s", "×sql", "p50", "p99", "loser p50", "loser p99", "loser÷acq", "allocs/op", "cpu/op"}
	var rows [][]string
	for _, t := range r.Targets {
		firstT := true
		for _, l := range r.Loads {
			firstL := true
			for _, c := range r.Contenders {
				s := r.Cell(t.Name, c.Name, l)
				if s == nil {
					continue
				}
				row := make([]string, len(head))
				if firstT {
					row[0] = t.Name
				}
				if firstL {
					row[1] = l.Short
				}
				firstT, firstL = false, false
				row[2] = c.Name
				row[3] = fmtRate(r.ops(s))
				row[4] = r.ratioCell(t, c, l)
				row[5], row[6] = dash(s.Win(0.5)), dash(s.Win(0.99))
				row[7], row[8] = dash(s.Lose(0.5)), dash(s.Lose(0.99))
				row[9] = "—"
				if lr := r.LoserRatio(t.Name, c.Name, l); lr > 0 {
					row[9] = fmt.Sprintf("%.2f", lr)
				}
				row[10] = fmt.Sprintf("%.1f", s.AllocsPerAttempt())
				row[11] = fmtDur(s.CPUPerAttempt())
				if s.Deadlocks > 0 {
					row[2] += fmt.Sprintf(" [%d deadlocks]", s.Deadlocks)
				}
				if s.Errors > 0 || s.Overlaps > 0 {
					row[2] += fmt.Sprintf(" (%d errors, %d overlaps!)", s.Errors, s.Overlaps)
				}
				rows = append(rows, row)
			}
		}
	}
	writeMarkdownTable(w, head, rows, map[int]bool{3: true, 4: true, 5: true, 6: true, 7: true, 8: true, 9: true, 10: true, 11: true})
}

// ops is acquisitions per second, or losses per second when every attempt
// loses.
func (r *Report) ops(s *Stats) float64 {
	if s.Load.Held {
		return s.AttemptsPerSec()
	}
	return s.AcqPerSec()
}

// Ratio returns ops/s of (target, contender, load) over the hand-written
// baseline's ops/s on the target's baseline (see [Target.Baseline]), or 0.
func (r *Report) Ratio(target, contender string, l Load) float64 {
	t, ok := r.target(target)
	if !ok {
		return 0
	}
	s := r.Cell(target, contender, l)
	base := r.Cell(t.baselineName(), CHandwritten, l)
	if s == nil || base == nil || r.ops(base) == 0 {
		return 0
	}
	return r.ops(s) / r.ops(base)
}

// LoserRatio returns the loser p50 of (target, contender, l) over the same
// contender's uncontended (1×distinct) acquisition p50, or 0 when l has no
// losers.
func (r *Report) LoserRatio(target, contender string, l Load) float64 {
	s := r.Cell(target, contender, l)
	u := r.Cell(target, contender, Load1)
	if s == nil || u == nil || s.Lose(0.5) == 0 || u.Win(0.5) == 0 {
		return 0
	}
	return float64(s.Lose(0.5)) / float64(u.Win(0.5))
}

func (t Target) baselineName() string {
	if t.Baseline != "" {
		return t.Baseline
	}
	return t.Name
}

func (r *Report) target(name string) (Target, bool) {
	for _, t := range r.Targets {
		if t.Name == name {
			return t, true
		}
	}
	return Target{}, false
}

func (r *Report) ratioCell(t Target, c Contender, l Load) string {
	if c.Baseline && t.Baseline == "" {
		return "1.00"
	}
	q := r.Ratio(t.Name, c.Name, l)
	if q == 0 {
		return "—"
	}
	if t.Baseline != "" {
		return fmt.Sprintf("%.2f†", q)
	}
	return fmt.Sprintf("%.2f", q)
}

// Checks writes the targets of the comparison with their measured values,
// one line each, as a Markdown list:
//
//   - gormlock.Transaction, entlock.Transaction (and gormlock.Session) within
//     10% of the hand-written SQL's acquisitions/s on the uncontended loads,
//     shown with the p50 latency and client CPU per acquisition relative to
//     the hand-written SQL's, which background load distorts less;
//   - a loser returns no slower than one uncontended acquisition plus 20%
//     (loser p50 ≤ 1.2 × 1×distinct p50), for the 1×held load.
func (r *Report) Checks(w io.Writer) {
	for _, t := range r.Targets {
		if t.Dialect == Redis {
			continue
		}
		base := r.Cell(t.Name, CHandwritten, Load1)
		for _, cn := range []string{CGormTransaction, CEntTransaction, CGormSession} {
			var parts []string
			for _, l := range []Load{Load1, Load8} {
				if q := r.Ratio(t.Name, cn, l); q > 0 {
					parts = append(parts, fmt.Sprintf("%s %.2f %s", l.Short, q, mark(q >= 0.9)))
				}
			}
			if len(parts) == 0 {
				continue
			}
			extra := ""
			if s := r.Cell(t.Name, cn, Load1); s != nil && base != nil && base.Win(0.5) > 0 && base.CPUPerAttempt() > 0 {
				extra = fmt.Sprintf("; 1×distinct p50 %.2f×, client CPU/op %.2f× the hand-written SQL's",
					float64(s.Win(0.5))/float64(base.Win(0.5)), float64(s.CPUPerAttempt())/float64(base.CPUPerAttempt()))
			}
			fmt.Fprintf(w, "- %s, %s: acquisitions/s ÷ hand-written SQL (target ≥ 0.90): %s%s\n", t.Name, cn, strings.Join(parts, ", "), extra)
		}
	}
	// Against a plain transaction of the same stack (the goal over a
	// network link: at least 0.9).
	for _, t := range r.Targets {
		for _, pair := range [][2]string{{CGormTransaction, CGormNoLock}, {CEntTransaction, CEntNoLock}} {
			var parts []string
			for _, l := range []Load{Load1, Load8} {
				s, p := r.Cell(t.Name, pair[0], l), r.Cell(t.Name, pair[1], l)
				if s != nil && p != nil && p.AcqPerSec() > 0 {
					q := s.AcqPerSec() / p.AcqPerSec()
					parts = append(parts, fmt.Sprintf("%s %.2f %s", l.Short, q, mark(q >= 0.9)))
				}
			}
			if len(parts) > 0 {
				fmt.Fprintf(w, "- %s, %s ÷ %s (target ≥ 0.90): %s\n", t.Name, pair[0], pair[1], strings.Join(parts, ", "))
			}
		}
	}
	for _, t := range r.Targets {
		var parts []string
		for _, c := range r.Contenders {
			if q := r.LoserRatio(t.Name, c.Name, LoadHeld); q > 0 {
				parts = append(parts, fmt.Sprintf("%s %.2f %s", c.Name, q, mark(q <= 1.2)))
			}
		}
		if len(parts) > 0 {
			fmt.Fprintf(w, "- %s: loser p50 ÷ uncontended acquisition p50 (target ≤ 1.20): %s\n", t.Name, strings.Join(parts, ", "))
		}
	}
}

func mark(ok bool) string {
	if ok {
		return "(met)"
	}
	return "(MISSED)"
}

func dash(d time.Duration) string {
	if d == 0 {
		return "—"
	}
	return fmtDur(d)
}

// fmtDur prints a latency with three significant digits: 87µs, 412µs,
// 1.23ms, 15.2ms.
func fmtDur(d time.Duration) string {
	us := float64(d) / float64(time.Microsecond)
	switch {
	case us < 10:
		return fmt.Sprintf("%.1fµs", us)
	case us < 1000:
		return fmt.Sprintf("%.0fµs", us)
	case us < 10000:
		return fmt.Sprintf("%.2fms", us/1000)
	case us < 100000:
		return fmt.Sprintf("%.1fms", us/1000)
	}
	return fmt.Sprintf("%.0fms", us/1000)
}

func fmtRate(v float64) string {
	if v == 0 {
		return "0"
	}
	if v < 100 {
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

// writeMarkdownTable writes a Markdown table whose columns are padded to
// line up in a terminal too; right marks right-aligned columns.
func writeMarkdownTable(w io.Writer, head []string, rows [][]string, right map[int]bool) {
	width := make([]int, len(head))
	for i, h := range head {
		width[i] = utf8.RuneCountInString(h)
	}
	for _, row := range rows {
		for i, c := range row {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	line := func(cells []string) {
		var b strings.Builder
		b.WriteString("|")
		for i, c := range cells {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if right[i] {
				b.WriteString(" " + pad + c + " |")
			} else {
				b.WriteString(" " + c + pad + " |")
			}
		}
		fmt.Fprintln(w, b.String())
	}
	line(head)
	sep := make([]string, len(head))
	for i := range head {
		d := strings.Repeat("-", width[i])
		if right[i] {
			d = d[:len(d)-1] + ":"
		}
		sep[i] = d
	}
	line(sep)
	for _, row := range rows {
		line(row)
	}
}
