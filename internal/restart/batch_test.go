package restart

import (
	"reflect"
	"testing"
)

func TestBatchPlan(t *testing.T) {
	cases := []struct {
		sizes string
		n     int
		want  []int
	}{
		{"1", 3, []int{1, 1, 1}},
		{"3", 5, []int{3, 2}},
		{"50%", 5, []int{3, 2}},
		{"100%", 5, []int{5}},
		{"1%", 5, []int{1, 1, 1, 1, 1}},
		{"10%", 25, []int{3, 3, 3, 3, 3, 3, 3, 3, 1}},
		{"1,10%,25%", 40, []int{1, 4, 10, 10, 10, 5}},
		{"2,1", 5, []int{2, 1, 1, 1}},
		{"5", 0, nil},
	}
	for _, tc := range cases {
		sizes, err := ParseBatchSizes(tc.sizes)
		if err != nil {
			t.Fatal(err)
		}
		if got := BatchPlan(sizes, tc.n); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("BatchPlan(%s, %d) = %v, want %v", tc.sizes, tc.n, got, tc.want)
		}
	}
	if got := BatchPlan(nil, 2); !reflect.DeepEqual(got, []int{1, 1}) {
		t.Errorf("default = %v", got)
	}
}

func TestAssignBatches(t *testing.T) {
	allocs := make([]AllocProgress, 5)
	n := AssignBatches(allocs, []BatchSize{{N: 3}})
	if n != 2 {
		t.Fatalf("batches %d", n)
	}
	var got []int
	for _, a := range allocs {
		got = append(got, a.Batch)
	}
	if !reflect.DeepEqual(got, []int{1, 1, 1, 2, 2}) {
		t.Fatalf("batches %v", got)
	}
	r := &Record{Allocs: allocs}
	if got := r.BatchAllocs(2); !reflect.DeepEqual(got, []int{3, 4}) {
		t.Fatalf("BatchAllocs(2) = %v", got)
	}
}

func TestOrdinal(t *testing.T) {
	for n, want := range map[int]string{1: "1st", 2: "2nd", 3: "3rd", 4: "4th", 11: "11th", 12: "12th", 13: "13th", 21: "21st", 102: "102nd", 111: "111th"} {
		if got := Ordinal(n); got != want {
			t.Errorf("Ordinal(%d) = %q, want %q", n, got, want)
		}
	}
}
