package fleet

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

func TestOrder(t *testing.T) {
	listed := []Job{
		{Namespace: "prod", JobID: "web", Priority: 50},
		{Namespace: "default", JobID: "zeta", Priority: 90},
		{Namespace: "prod", JobID: "api", Priority: 90},
		{Namespace: "default", JobID: "alpha", Priority: 50},
	}
	tests := []struct {
		by   OrderBy
		want []string
	}{
		{OrderName, []string{"default/alpha", "default/zeta", "prod/api", "prod/web"}},
		{OrderPriority, []string{"default/zeta", "prod/api", "default/alpha", "prod/web"}},
		{OrderListed, []string{"prod/web", "default/zeta", "prod/api", "default/alpha"}},
	}
	for _, tt := range tests {
		t.Run(string(tt.by), func(t *testing.T) {
			before := slices.Clone(listed)
			got, err := Order(listed, tt.by)
			if err != nil {
				t.Fatalf("Order(%s): %v", tt.by, err)
			}
			if names := keys(got); !slices.Equal(names, tt.want) {
				t.Errorf("Order(%s) = %v, want %v", tt.by, names, tt.want)
			}
			if !reflect.DeepEqual(listed, before) {
				t.Errorf("Order(%s) changed its input: %v", tt.by, keys(listed))
			}
		})
	}
}

func TestOrderRefusesAnUnknownOrder(t *testing.T) {
	for _, by := range []OrderBy{"", "Name", "random"} {
		_, err := Order([]Job{{JobID: "a"}}, by)
		var ve *restart.ValueError
		if !errors.As(err, &ve) || ve.Flag != "order" {
			t.Fatalf("Order(%q) error = %v, want a ValueError for -order", by, err)
		}
		for _, valid := range []string{`"name"`, `"priority"`, `"listed"`} {
			if !strings.Contains(err.Error(), valid) {
				t.Errorf("Order(%q) error %q does not name the valid value %s", by, err, valid)
			}
		}
	}
}

func TestParseBusy(t *testing.T) {
	tests := []struct {
		in      string
		want    Busy
		wantErr bool
	}{
		{"wait", BusyWait, false},
		{"skip", BusySkip, false},
		{"", "", true},
		{"Skip", "", true},
	}
	for _, tt := range tests {
		got, err := ParseBusy(tt.in)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("ParseBusy(%q) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), `"wait" and "skip"`) {
			t.Errorf("ParseBusy(%q) error %q does not name the valid values", tt.in, err)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name     string
		change   func(*Options)
		wantFlag string // "" when valid
	}{
		{"defaults", func(*Options) {}, ""},
		{"five in parallel, two failures", func(o *Options) { o.MaxParallelJobs, o.MaxFailedJobs = 5, 2 }, ""},
		{"no job in parallel", func(o *Options) { o.MaxParallelJobs = 0 }, "max-parallel-jobs"},
		{"negative failure budget", func(o *Options) { o.MaxFailedJobs = -1 }, "max-failed-jobs"},
		{"unknown order", func(o *Options) { o.Order = "size" }, "order"},
		{"unknown busy", func(o *Options) { o.Busy = "retry" }, "busy"},
		{"unknown on-error", func(o *Options) { o.OnError = "ignore" }, "on-error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := DefaultOptions()
			tt.change(&o)
			err := o.Validate()
			var ve *restart.ValueError
			switch {
			case tt.wantFlag == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.wantFlag != "" && (!errors.As(err, &ve) || ve.Flag != tt.wantFlag):
				t.Fatalf("Validate() = %v, want a ValueError for -%s", err, tt.wantFlag)
			}
		})
	}
}

func TestDefaultOptionsAreTheIssues(t *testing.T) {
	o := DefaultOptions()
	if o.MaxParallelJobs != 1 || o.MaxFailedJobs != 0 {
		t.Errorf("DefaultOptions() = %+v, want -max-parallel-jobs 1 and -max-failed-jobs 0", o)
	}
}

func keys(jobs []Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.Namespace + "/" + j.JobID
	}
	return out
}
