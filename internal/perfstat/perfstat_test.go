package perfstat

import (
	"testing"
	"time"
)

type metrics map[string]float64

func (m metrics) ReportMetric(n float64, unit string) { m[unit] = n }

func TestFigures(t *testing.T) {
	m := Start()
	for i := 1; i <= 200; i++ {
		m.Add(time.Duration(i) * time.Microsecond)
	}
	deadline := time.Now().Add(20 * time.Millisecond)
	for time.Now().Before(deadline) { // spend some CPU to be counted
	}
	got := metrics{}
	m.Report(got, 200)
	if got["p50-µs"] != 101 || got["p99-µs"] != 199 {
		t.Errorf("got %v; want p50 101, p99 199", got)
	}
	if got["cpu-µs/op"] <= 0 {
		t.Errorf("got %v; want some CPU per op", got)
	}
	if (Figures{}) != Start().Figures(0) {
		t.Error("no round trips should give zero figures")
	}
}
