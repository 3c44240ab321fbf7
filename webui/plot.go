package webui

import (
	"time"
)

// The duration plot of a job's page: one bar per slot, oldest on the left,
// its height the run's duration, coloured by status. It is SVG rendered on
// the server inside the page (readable without JavaScript), styled only by
// the stylesheet's classes (the Content-Security-Policy allows no inline
// style), and its texts are escaped by html/template as every other value.

type plot struct {
	W, H              int
	Left, Top, Bottom int // the plotting area's edges
	Right             int
	Bars              []bar
	YTicks            []tick
	XFirst, XLast     string
	XLastPos          int
	Empty             bool
}

type bar struct {
	X, Y, W, H int
	Class      string
	Title      string
	Href       string
}

type tick struct {
	Y     int
	Label string
}

func newPlot(cells []cell, loc *time.Location) *plot {
	p := &plot{W: 760, H: 220, Left: 64, Top: 12, Right: 748, Bottom: 190}
	if len(cells) == 0 {
		p.Empty = true
		return p
	}
	now := time.Now()
	dur := func(c cell) time.Duration {
		switch c.status {
		case "missed":
			return 0
		case "running", "stale":
			return now.Sub(c.run.Started)
		}
		return c.run.Duration
	}
	var longest time.Duration
	for _, c := range cells {
		if c.status != "running" && c.status != "stale" {
			longest = max(longest, dur(c))
		}
	}
	if longest <= 0 {
		for _, c := range cells {
			longest = max(longest, dur(c))
		}
	}
	if longest <= 0 {
		longest = time.Millisecond
	}
	height := p.Bottom - p.Top
	slot := float64(p.Right-p.Left) / float64(len(cells))
	w := max(int(slot*0.8), 1)
	for i := range cells {
		c := cells[len(cells)-1-i] // oldest first
		x := p.Left + int(float64(i)*slot+slot*0.1)
		d := dur(c)
		h := int(float64(height) * min(float64(d)/float64(longest), 1))
		class := "bar " + c.status
		if c.status == "missed" {
			h = 4
		} else {
			h = max(h, 2)
		}
		p.Bars = append(p.Bars, bar{X: x, Y: p.Bottom - h, W: w, H: h, Class: class, Title: c.title(loc), Href: "#" + c.id()})
	}
	for _, f := range []float64{0, 0.5, 1} {
		p.YTicks = append(p.YTicks, tick{Y: p.Bottom - int(float64(height)*f), Label: showDuration(time.Duration(float64(longest) * f))})
	}
	first, last := cells[len(cells)-1].run.Slot, cells[0].run.Slot
	p.XFirst = showTime(first, loc).Zone
	p.XLast = showTime(last, loc).Zone
	p.XLastPos = p.Right
	return p
}
