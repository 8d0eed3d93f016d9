package simtest

import (
	"testing"
	"time"
)

func TestPeakOverlap(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(int64(s), 0) }
	tests := []struct {
		name    string
		windows []Window
		want    int
	}{
		{"none", nil, 0},
		{"disjoint", []Window{{at(0), at(1)}, {at(2), at(3)}}, 1},
		{"touching ends do not overlap", []Window{{at(0), at(1)}, {at(1), at(2)}}, 1},
		{"three nested", []Window{{at(0), at(10)}, {at(1), at(9)}, {at(2), at(3)}, {at(4), at(5)}}, 3},
		{"a job never restarted is left out", []Window{{}, {at(0), at(1)}}, 1},
	}
	for _, tt := range tests {
		if got := PeakOverlap(tt.windows); got != tt.want {
			t.Errorf("%s: PeakOverlap = %d, want %d", tt.name, got, tt.want)
		}
	}
}
