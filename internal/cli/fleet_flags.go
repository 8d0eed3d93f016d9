package cli

import (
	"flag"
	"strconv"
	"strings"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
)

// fleetFlags are the options of `run -jobs`: a fleet restart of the jobs a filter selects.
type fleetFlags struct {
	// jobs is -jobs, Nomad's filter expression on its jobs list; given, run restarts a fleet.
	jobs string
	// maxParallel and maxFailed are the numbers as typed, read by validate.
	maxParallel, maxFailed string
	order, busy            string
	// given names the fleet options set on the command line, to refuse them without -jobs.
	given []string
	// opts is the validated options (validate).
	opts fleet.Options
}

// fleetOnlyFlags are the options that mean something only with -jobs.
var fleetOnlyFlags = []string{"max-parallel-jobs", "max-failed-jobs", "order", "busy"}

func (f *fleetFlags) add(fs *flag.FlagSet) {
	d := fleet.DefaultOptions()
	fs.StringVar(&f.jobs, "jobs", "", "")
	fs.StringVar(&f.maxParallel, "max-parallel-jobs", strconv.Itoa(d.MaxParallelJobs), "")
	fs.StringVar(&f.maxFailed, "max-failed-jobs", strconv.Itoa(d.MaxFailedJobs), "")
	fs.StringVar(&f.order, "order", string(d.Order), "")
	fs.StringVar(&f.busy, "busy", string(d.Busy), "")
}

// parsed notes which fleet options the command line set (fs is parsed).
func (f *fleetFlags) parsed(fs *flag.FlagSet) {
	fs.Visit(func(fl *flag.Flag) {
		for _, name := range fleetOnlyFlags {
			if fl.Name == name {
				f.given = append(f.given, "-"+name)
			}
		}
	})
	f.jobs = strings.TrimSpace(f.jobs)
}

// selected says whether the command line asks for a fleet (-jobs given).
func (f *fleetFlags) selected() bool { return f.jobs != "" }

// validate checks the fleet's options against the rest of the command line, in a fixed
// order, before anything is read or written: one line naming the problem and the fix.
func (f *fleetFlags) validate(o *runOptions) error {
	if !f.selected() {
		if len(f.given) > 0 {
			return usageErrorf("%s applies to fleet restarts only: add -jobs '<filter>' to select the jobs, or drop %s", f.given[0], f.given[0])
		}
		return nil
	}
	if o.state == stateLocal {
		return usageErrorf("-state local cannot keep a fleet: fleets and their restarts are recorded in Nomad Variables; drop -state local")
	}
	parallel, err := wholeNumber("max-parallel-jobs", f.maxParallel)
	if err != nil {
		return err
	}
	failed, err := wholeNumber("max-failed-jobs", f.maxFailed)
	if err != nil {
		return err
	}
	opts := fleet.Options{MaxParallelJobs: parallel, MaxFailedJobs: failed,
		Order: fleet.OrderBy(f.order), Busy: fleet.Busy(f.busy), OnError: o.spec.OnError}
	if err := opts.Validate(); err != nil {
		return usageErrorf("%s", capitalInvalid(err))
	}
	f.opts = opts
	return nil
}

// wholeNumber reads the value of a flag that takes a number of jobs.
func wholeNumber(flagName, v string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return 0, usageErrorf("Invalid -%s value %q: give a whole number of jobs, like 2", flagName, v)
	}
	return n, nil
}

// describeFleetOptions is a short human summary of a fleet's own options, for status and
// the dry run.
func describeFleetOptions(o fleet.Options) string {
	return strings.Join([]string{
		"max-parallel-jobs=" + strconv.Itoa(o.MaxParallelJobs),
		"max-failed-jobs=" + strconv.Itoa(o.MaxFailedJobs),
		"order=" + string(o.Order),
		"busy=" + string(o.Busy),
		"on-error=" + string(o.OnError),
	}, " ")
}
