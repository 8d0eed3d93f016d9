package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// cmdRun is `nomad-restart run [options] <job>`.
func (a *app) cmdRun(ctx context.Context, args []string) error {
	o, err := parseRunArgs(args, a.interactive)
	if err != nil {
		return err
	}
	if o.sched.scheduled() {
		return a.runSchedule(ctx, o) // -at / -every: store a schedule (schedule.go)
	}
	if o.fleet.selected() {
		return a.runFleet(ctx, o) // -jobs: a fleet restart (fleet_run.go)
	}
	return a.runRestart(ctx, o, nil)
}

// runRestart is the flow of `run` (and `demo`): connect, plan, confirm, record, then drive
// or detach. Every refusal before Create leaves the cluster and the stores unchanged.
// opened, when not nil, is an already open session (the demo's).
func (a *app) runRestart(ctx context.Context, o *runOptions, opened session) error {
	ses := opened
	var err error
	if ses == nil {
		ses, err = a.connect(ctx, o.client)
	} else {
		err = ses.reachable(ctx)
	}
	if err != nil {
		return err
	}
	p := a.printer(o.verbose, o.json)
	plan, err := a.planRestart(ctx, p, ses, o)
	if err != nil {
		return err
	}
	rec := plan.Record
	if len(rec.Allocs) == 0 {
		if o.json {
			p.jsonLine(rec)
		} else {
			p.plain("No allocations to restart")
		}
		return nil
	}
	if o.dryRun {
		a.printPlan(p, rec, o)
		return nil
	}
	if plan.Job != nil && plan.Job.MultiRegion && !o.spec.Yes {
		ok, err := a.confirmMultiRegion(ctx, p, rec.JobID, o.json)
		if err != nil {
			return err
		}
		if !ok {
			p.plain("\nJob restart canceled.")
			return nil
		}
	}
	eng, st, err := a.recordRestart(ctx, p, ses, rec, o)
	if err != nil {
		return err
	}
	if o.detach {
		a.printDetached(p, rec, o)
		return nil
	}
	return a.drive(ctx, p, eng, st, rec, o.verbose)
}

// connect opens a session with the client options (the environment's where none are given)
// and checks that Nomad answers.
func (a *app) connect(ctx context.Context, cf clientFlags) (session, error) {
	logger, err := a.logger(cf.logLevel)
	if err != nil {
		return nil, err
	}
	ses, err := a.backend.open(cf.withEnv(a.env), logger, a.holder())
	if err != nil {
		return nil, err
	}
	if err := ses.reachable(ctx); err != nil {
		return nil, err
	}
	return ses, nil
}

// planRestart plans the restart and, with -verbose, says which allocations it skips.
// The plan reads the cluster only; it is made with the store Create will use when that is
// already known, so that nothing is written before the operator confirmed.
func (a *app) planRestart(ctx context.Context, p *printer, ses session, o *runOptions) (*planned, error) {
	planStore, err := a.storeForPlan(ses, o.state)
	if err != nil {
		return nil, err
	}
	plan, err := ses.engine(planStore).Plan(ctx, o.client.namespace, o.job, o.spec)
	if err != nil {
		return nil, planError(err)
	}
	if o.verbose && !o.json {
		for _, s := range plan.Skipped {
			if s.Alloc != nil {
				p.detail(a.now(), fmt.Sprintf("Skipping allocation %q because %s", shortID(s.Alloc.ID, true), s.Reason))
			}
		}
	}
	return plan, nil
}

// recordRestart chooses the store (-state), records the restart there and says so; it
// returns the engine and store that drive it.
func (a *app) recordRestart(ctx context.Context, p *printer, ses session, rec *restart.Record, o *runOptions) (restarter, store.Store, error) {
	st, why, err := a.chooseStore(ctx, ses, o.state, rec.Namespace, rec.JobID, o.verbose)
	if err != nil {
		return nil, nil, err
	}
	eng := ses.engine(st)
	if err := eng.Create(ctx, rec); err != nil {
		var busy *store.JobBusyError
		if errors.As(err, &busy) {
			return nil, nil, errors.New(jobBusyMessage(busy))
		}
		return nil, nil, fmt.Errorf("recording the restart of job %q in the %s store: %w", rec.JobID, st.Kind(), err)
	}
	if o.json {
		for _, ev := range rec.Events {
			p.jsonLine(ev)
		}
		return eng, st, nil
	}
	if why != "" {
		p.detail(a.now(), why)
	}
	p.header(a.now(), fmt.Sprintf("Restart %s of job %q created (state: %s)", shortID(rec.ID, o.verbose), rec.JobID, st.Kind()))
	return eng, st, nil
}

// printDetached says how to follow and drive a detached restart.
func (a *app) printDetached(p *printer, rec *restart.Record, o *runOptions) {
	if o.json {
		p.jsonLine(rec)
		return
	}
	id := shortID(rec.ID, o.verbose)
	p.plain(fmt.Sprintf("\nRestart %s is recorded and waits for a driver. Drive it with `nomad-restart resume %s`,", id, id))
	p.plain(fmt.Sprintf("watch it with `nomad-restart attach %s`, or cancel it with `nomad-restart cancel %s`.", id, id))
}

// planError keeps the engine's one-line refusals as they are.
func planError(err error) error {
	return errors.New(oneLine(err.Error()))
}

// confirmMultiRegion asks Nomad's multi-region question. Without a terminal it refuses,
// since there is nobody to answer (Nomad reads an empty answer and exits 0).
func (a *app) confirmMultiRegion(ctx context.Context, p *printer, jobID string, jsonOut bool) (bool, error) {
	if !a.interactive || jsonOut {
		return false, usageErrorf("job %q is multi-region and only this region would be restarted; confirm with -yes", jobID)
	}
	q := &restart.Question{Text: fmt.Sprintf("Are you sure you want to restart multi-region job %q in a single region?", jobID), Options: "y/N", Default: "n"}
	for {
		fmt.Fprintf(a.stdout, "==> %s: %s ", formatTime(a.now()), indent(q.Prompt(), timestampPrefixLen))
		line, ok := a.readLine(ctx)
		if !ok {
			fmt.Fprintln(a.stdout)
			return false, nil
		}
		ans, err := restart.ParseAnswer(q, line)
		if err != nil || ans.Wait != nil {
			p.plain(strings.Repeat(" ", timestampPrefixLen) + fmt.Sprintf("Invalid answer %q", strings.TrimSpace(line)))
			continue
		}
		return ans.Proceed, nil
	}
}

// storeForPlan picks a store for the planning engine without probing anything: Plan only
// reads the cluster.
func (a *app) storeForPlan(ses session, state string) (store.Store, error) {
	if state == stateLocal {
		return ses.localStore()
	}
	return ses.nomadStore(), nil
}

// chooseStore picks where the record lives (-state). With auto it is Nomad Variables when
// the token may write them, else the local store, and why says so.
func (a *app) chooseStore(ctx context.Context, ses session, state, namespace, jobID string, verbose bool) (st store.Store, why string, err error) {
	switch state {
	case stateLocal:
		st, err = ses.localStore()
		if err != nil {
			return nil, "", fmt.Errorf("opening the local state store: %w; fix the state directory or use -state nomad", err)
		}
		return st, "", nil
	case stateNomad:
		if err := ses.probeNomad(ctx, namespace, jobID); err != nil {
			return nil, "", fmt.Errorf("cannot keep the restart in Nomad Variables (-state nomad): %s", oneLine(err.Error()))
		}
		return ses.nomadStore(), "", nil
	}
	if perr := ses.probeNomad(ctx, namespace, jobID); perr != nil {
		st, err = ses.localStore()
		if err != nil {
			return nil, "", fmt.Errorf("cannot keep the restart in Nomad Variables (%s) nor locally (%w); fix one of them", oneLine(perr.Error()), err)
		}
		why := fmt.Sprintf("Keeping the restart record on this machine: this token may not keep it in Nomad Variables of namespace %q (see -verbose, or use -state local)", namespace)
		if verbose {
			why = "Keeping the restart record on this machine: " + oneLine(perr.Error())
		}
		return st, why, nil
	}
	return ses.nomadStore(), "", nil
}
