package bench

import (
	"fmt"
	"image/color"
	"os"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// palette holds one colour per contender (Okabe–Ito, readable by
// colour-blind readers), in [Contenders] order.
var palette = []color.RGBA{
	{0x00, 0x00, 0x00, 0xff}, // hand-written: black
	{0x00, 0x72, 0xb2, 0xff}, // gormlock.Transaction: blue
	{0x56, 0xb4, 0xe9, 0xff}, // entlock.Transaction: sky blue
	{0x00, 0x9e, 0x73, 0xff}, // gormlock.Session: green
	{0xe6, 0x9f, 0x00, 0xff}, // lease table: orange
	{0xd5, 0x5e, 0x00, 0xff}, // redislock: vermillion
	{0xbb, 0xbb, 0xbb, 0xff}, // GORM no lock: grey
}

// Chart writes a PNG of the run to path: acquisitions per second with one
// and with eight goroutines on distinct keys, and the p50 latency of a loser
// (key held elsewhere) next to an uncontended acquisition's, per database,
// one bar per contender. caption goes under the title (machine and command).
func (r *Report) Chart(path, caption string) error {
	var names []string
	for _, t := range r.Targets {
		names = append(names, t.Name)
	}
	panels := []struct {
		title, ylabel string
		value         func(t Target, c Contender) float64
	}{
		{"Acquisitions/s, 1 goroutine, distinct keys (higher is better)", "acquisitions/s",
			func(t Target, c Contender) float64 { return r.value(t, c, Load1, (*Stats).AcqPerSec) }},
		{"Acquisitions/s, 8 goroutines, distinct keys (higher is better)", "acquisitions/s",
			func(t Target, c Contender) float64 { return r.value(t, c, Load8, (*Stats).AcqPerSec) }},
		{"p50 latency of an uncontended acquisition, 1 goroutine (lower is better)", "µs",
			func(t Target, c Contender) float64 {
				return r.value(t, c, Load1, func(s *Stats) float64 { return float64(s.Win(0.5).Microseconds()) })
			}},
		{"p50 latency of a loser, key held elsewhere (lower is better)", "µs",
			func(t Target, c Contender) float64 {
				return r.value(t, c, LoadHeld, func(s *Stats) float64 { return float64(s.Lose(0.5).Microseconds()) })
			}},
	}

	const width, height = 13 * vg.Inch, 15 * vg.Inch
	img := vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(96), vgimg.UseBackgroundColor(color.White))
	dc := draw.New(img)

	// title and caption across the top, the legend on the right
	titleH := 0.9 * vg.Inch
	legendW := 3.1 * vg.Inch
	top := draw.Crop(dc, 0, 0, height-titleH, 0)
	plotArea := draw.Crop(dc, 0, -legendW, 0, -titleH)
	legendArea := draw.Crop(dc, width-legendW, 0, 0, -titleH)

	title := plot.New()
	title.HideAxes()
	title.Title.Text = "ormlock: lock acquisition compared, same run\n" + caption
	title.Title.TextStyle.Font.Size = vg.Points(15)
	title.Draw(top)

	nBars := 0
	for _, c := range r.Contenders {
		if r.anyCell(c) {
			nBars++
		}
	}
	// The x axis spans one unit per database (set below), over roughly the
	// plot area less the y axis; bars fill 80% of a unit.
	groupW := (width - legendW - 1.1*vg.Inch) / vg.Length(max(len(names), 1))
	barW := groupW * 0.8 / vg.Length(max(nBars, 1))

	plots := make([][]*plot.Plot, len(panels))
	legend := plot.NewLegend()
	legend.Top = true
	legend.Left = true
	legend.TextStyle.Font.Size = vg.Points(13)
	legend.ThumbnailWidth = vg.Points(22)
	legend.Padding = vg.Points(6)
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.Title.TextStyle.Font.Size = vg.Points(14)
		p.Y.Label.Text = pn.ylabel
		p.Y.Label.TextStyle.Font.Size = vg.Points(12)
		p.X.Tick.Label.Font.Size = vg.Points(13)
		p.Y.Tick.Label.Font.Size = vg.Points(11)
		p.Y.Min = 0
		p.Y.Tick.Marker = intTicks{}
		p.Add(plotter.NewGrid())
		top := 0.0
		bar := 0
		for ci, c := range r.Contenders {
			if !r.anyCell(c) {
				continue
			}
			vals := make(plotter.Values, len(r.Targets))
			for ti, t := range r.Targets {
				vals[ti] = pn.value(t, c)
				top = max(top, vals[ti])
			}
			b, err := plotter.NewBarChart(vals, barW)
			if err != nil {
				return fmt.Errorf("bench: chart: %w", err)
			}
			b.Color = palette[ci%len(palette)]
			b.LineStyle.Width = 0
			b.Offset = (vg.Length(bar) - vg.Length(nBars-1)/2) * barW
			p.Add(b)
			if i == 0 {
				legend.Add(c.Name, b)
			}
			bar++
		}
		p.NominalX(names...)
		p.X.Min, p.X.Max = -0.5, float64(len(names))-0.5
		p.Y.Max = top * 1.08 // headroom above the tallest bar
		plots[i] = []*plot.Plot{p}
	}
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4),
		PadLeft: vg.Points(4), PadRight: vg.Points(4), PadY: vg.Points(18)}
	canvases := plot.Align(plots, tiles, plotArea)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	legend.Draw(draw.Crop(legendArea, vg.Points(10), 0, 0, -vg.Points(40)))

	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bench: chart: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("bench: chart: write %s: %w", path, err)
	}
	return f.Close()
}

// intTicks are gonum's default ticks labelled without decimals.
type intTicks struct{}

// Ticks returns the default ticks for [min, max] with integer labels.
func (intTicks) Ticks(min, max float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(min, max)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = strconv.FormatFloat(ts[i].Value, 'f', 0, 64)
		}
	}
	return ts
}

// value returns f of a cell, or 0 when the cell did not run.
func (r *Report) value(t Target, c Contender, l Load, f func(*Stats) float64) float64 {
	s := r.Cell(t.Name, c.Name, l)
	if s == nil {
		return 0
	}
	return f(s)
}

// anyCell reports whether contender c ran anywhere.
func (r *Report) anyCell(c Contender) bool {
	for _, t := range r.Targets {
		for _, l := range r.Loads {
			if r.Cell(t.Name, c.Name, l) != nil {
				return true
			}
		}
	}
	return false
}
