package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// freeLabels describe the short contender names in the tables.
var freeLabels = map[string]string{
	FreeHandwritten:    "database/sql hand-written",
	FreeGormlock:       "gormlock.Transaction",
	FreeGormTx:         "GORM `db.Transaction` (no lock)",
	FreeEntlock:        "entlock.Transaction",
	FreeEntTx:          "ent `client.Tx`/`Commit` (no lock)",
	FreeSQLlock:        "sqllock.Transaction",
	FreeSQLTx:          "database/sql `BeginTx`/`Commit` (no lock)",
	FreePgxlock:        "pgxlock.Transaction",
	FreePgxTx:          "pgx `pool.Begin`/`Commit` (no lock)",
	FreePgxHandwritten: "pgx hand-written",
	FreeFloorBare:      "floor: raw pgx `begin`; `commit`",
	FreeFloorLock:      "floor: raw pgx `BEGIN; SELECT pg_try_advisory_xact_lock(k)`; `commit`",
}

// PlainGoal is the goal of a ratio over the plain transaction in cell c:
// 0.95, or 0.97 × the floor where the floor is below 0.95.
func (c *FreeCell) PlainGoal() float64 {
	if c.Floor.N > 0 && c.Floor.Median < 0.95 {
		return 0.97 * c.Floor.Median
	}
	return 0.95
}

// Goal returns q's goal in cell c, 0 when it has none there.
func (c *FreeCell) Goal(q FreeRatio) float64 {
	switch {
	case c.Target.Dialect == MySQL:
		return q.GoalMySQL
	case q.Plain && q.GoalPostgres > 0:
		return c.PlainGoal()
	}
	return q.GoalPostgres
}

func (s Spread) String() string {
	if s.N == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f (%.2f–%.2f)", s.Median, s.Min, s.Max)
}

// freeColumn labels cell c; the first column of a table says what the
// number is.
func freeColumn(c *FreeCell, first bool) string {
	name := c.Target.Name
	if name == NamePostgres {
		name = "direct"
	}
	switch {
	case first && c.Workers == 1:
		return name + ", 1 goroutine"
	case first:
		return fmt.Sprintf("%s, %d goroutines", name, c.Workers)
	}
	return fmt.Sprintf("%s, %d", name, c.Workers)
}

func freeColumns(cells []*FreeCell, lead ...string) []string {
	head := slices.Clone(lead)
	for i, c := range cells {
		head = append(head, freeColumn(c, i == 0))
	}
	return head
}

func rightFrom(n, from int) map[int]bool {
	m := map[int]bool{}
	for i := from; i < n; i++ {
		m[i] = true
	}
	return m
}

// Markdown writes the run as Markdown, ready to paste into BENCHMARKS.md:
// its date, machine, servers, link and command, the PostgreSQL table (each
// adapter over its plain transaction and over its hand-written protocol,
// with the floor, the goal over the plain transaction, the load average and
// the CPU saturation of each cell), the MySQL/MariaDB table, the median
// steps, the allocations per call, and the goals met or missed.
func (r *FreeReport) Markdown(w io.Writer, m Machine, command string) {
	o := r.Options
	fmt.Fprintf(w, "- Date: %s; the table took %s\n", m.Date.UTC().Format("2006-01-02 15:04 MST"), r.Took.Round(time.Second))
	fmt.Fprintf(w, "- Machine: %d CPUs (nproc), %s; Linux %s; %s\n", m.NumCPU, m.CPU, m.Kernel, m.Go)
	fmt.Fprintf(w, "- Load average (1/5/15 min): %s before, %s after (other work shares the machine)\n", m.LoadBefore, m.LoadAfter)
	var servers []string
	seen := map[string]bool{}
	for _, c := range r.Cells {
		if n := c.Target.Name; !seen[n] && m.Servers[n] != "" {
			seen[n] = true
			servers = append(servers, n+": "+m.Servers[n])
		}
	}
	if v := m.Servers["pgbouncer"]; v != "" {
		servers = append(servers, "PgBouncer binary: "+v+" (transaction mode)")
	}
	fmt.Fprintf(w, "- Servers: %s\n", strings.Join(servers, "; "))
	if m.Link != "" {
		fmt.Fprintf(w, "- Network: every SQL connection through an in-process TCP proxy (bench.Link), %s; allocations on loopback\n", m.Link)
	} else {
		fmt.Fprintf(w, "- Network: loopback\n")
	}
	fmt.Fprintf(w, "- Each cell: %d rounds of %d iterations after %d warm-up step(s) per contender; an iteration is one step of every contender in an order rotated per iteration, a step one attempt by each goroutine at once (each on its own free key, empty fn, a context that never ends; each contender on its own pool of goroutines+1 connections). A ratio is the median of the per-round ratios of throughput (each round's median steps), its range in brackets; above 1 the adapter is faster\n",
		o.Rounds, o.Steps, o.Warmup)
	fmt.Fprintf(w, "- Command: `%s`\n", command)

	var pg, my []*FreeCell
	for _, c := range r.Cells {
		if c.Target.Dialect == Postgres {
			pg = append(pg, c)
		} else {
			my = append(my, c)
		}
	}
	if len(pg) > 0 {
		fmt.Fprintln(w)
		head := freeColumns(pg, "contender vs", "goal")
		var rows [][]string
		for _, q := range FreeRatios {
			goal := fmt.Sprintf("≥ %.2f", q.GoalPostgres)
			switch {
			case q.Plain && q.GoalPostgres > 0:
				goal = fmt.Sprintf("≥ %.2f, or 0.97 × the floor below it", q.GoalPostgres)
			case q.GoalPostgres == 0:
				goal = q.NoGoal
			}
			row := []string{q.Label, goal}
			for _, c := range pg {
				row = append(row, freeCellText(c, q))
			}
			rows = append(rows, row)
		}
		extra := []struct {
			label, goal string
			f           func(c *FreeCell) string
		}{
			{"floor: bare ÷ locked transaction, raw pgx (`BenchmarkLockFloor`)", "", func(c *FreeCell) string { return c.Floor.String() }},
			{"goal vs the plain transaction in this cell", "", func(c *FreeCell) string {
				if c.PlainGoal() != 0.95 {
					return fmt.Sprintf("≥ %.2f (0.97 × %.2f)", c.PlainGoal(), c.Floor.Median)
				}
				return "≥ 0.95"
			}},
		}
		for _, e := range append(extra, machineRows...) {
			row := []string{e.label, e.goal}
			for _, c := range pg {
				row = append(row, e.f(c))
			}
			rows = append(rows, row)
		}
		writeMarkdownTable(w, head, rows, rightFrom(len(head), 2))
	}
	if len(my) > 0 {
		fmt.Fprintln(w)
		head := freeColumns(my, "contender vs", "goal")
		var rows [][]string
		for _, q := range FreeRatios {
			if !q.on(MySQL) {
				continue
			}
			row := []string{q.Label, fmt.Sprintf("≥ %.2f", q.GoalMySQL)}
			for _, c := range my {
				row = append(row, freeCellText(c, q))
			}
			rows = append(rows, row)
		}
		for _, e := range machineRows {
			row := []string{e.label, e.goal}
			for _, c := range my {
				row = append(row, e.f(c))
			}
			rows = append(rows, row)
		}
		writeMarkdownTable(w, head, rows, rightFrom(len(head), 2))
	}
	if len(r.Cells) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Median step (all rounds; with one goroutine, the median attempt):")
		fmt.Fprintln(w)
		head := freeColumns(r.Cells, "contender")
		var rows [][]string
		for _, n := range freeNames(Postgres) {
			row := []string{freeLabels[n]}
			for _, c := range r.Cells {
				row = append(row, dash(c.P50[n]))
			}
			rows = append(rows, row)
		}
		writeMarkdownTable(w, head, rows, rightFrom(len(head), 1))
	}
	if len(r.Allocs) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintf(w, "Allocations per call, one goroutine on loopback (runtime.MemStats growth over %d calls, as testing.AllocsPerRun; allocs/op, B/op):\n\n", o.AllocCalls)
		var targets []string
		cell := map[[2]string]FreeAllocs{}
		for _, a := range r.Allocs {
			if !slices.Contains(targets, a.Target) {
				targets = append(targets, a.Target)
			}
			cell[[2]string{a.Target, a.Contender}] = a
		}
		head := append([]string{"contender"}, targets...)
		var rows [][]string
		for _, n := range allocNames(Postgres) {
			row := []string{freeLabels[n]}
			for _, t := range targets {
				if a, ok := cell[[2]string{t, n}]; ok {
					row = append(row, fmt.Sprintf("%.1f, %.0f B", a.Allocs, a.Bytes))
				} else {
					row = append(row, "—")
				}
			}
			rows = append(rows, row)
		}
		writeMarkdownTable(w, head, rows, rightFrom(len(head), 1))
	}
	met, missed := r.Goals()
	if len(met)+len(missed) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintf(w, "Goals: met in %d of %d cells", len(met), len(met)+len(missed))
		if len(missed) == 0 {
			fmt.Fprintln(w, ".")
			return
		}
		fmt.Fprintln(w, "; missed:")
		fmt.Fprintln(w)
		for _, s := range missed {
			fmt.Fprintf(w, "- %s\n", s)
		}
	}
}

// machineRows are the rows of every table that say how loaded the machine
// was during each cell.
var machineRows = []struct {
	label, goal string
	f           func(c *FreeCell) string
}{
	{"load average (1 min), start → end of the cell", "", func(c *FreeCell) string {
		return fmt.Sprintf("%.2f → %.2f", c.Load1Before, c.Load1After)
	}},
	{"CPU busy, all CPUs (/proc/stat, over the cell)", "", func(c *FreeCell) string { return pct(c.CPUBusy) }},
}

func freeCellText(c *FreeCell, q FreeRatio) string {
	s, ok := c.Ratios[q.Key()]
	if !ok {
		return "—"
	}
	g := c.Goal(q)
	switch {
	case g == 0:
		return s.String()
	case s.Median >= g:
		return s.String() + " met"
	}
	text := s.String()
	if fmt.Sprintf("%.2f", s.Median) == fmt.Sprintf("%.2f", g) {
		// Missed by less than the rounding: show the third digit.
		text = fmt.Sprintf("%.3f (%.2f–%.2f)", s.Median, s.Min, s.Max)
	}
	return text + " **missed**"
}

// Goals returns, for every ratio with a goal in a cell, "label, column:
// value" in met or in missed.
func (r *FreeReport) Goals() (met, missed []string) {
	for _, q := range FreeRatios {
		for _, c := range r.Cells {
			s, ok := c.Ratios[q.Key()]
			g := c.Goal(q)
			if !ok || g == 0 {
				continue
			}
			text := fmt.Sprintf("%s, %s: %.3f (goal %.3f)", q.Label, freeColumn(c, true), s.Median, g)
			if s.Median >= g {
				met = append(met, text)
			} else {
				missed = append(missed, text)
			}
		}
	}
	return met, missed
}
