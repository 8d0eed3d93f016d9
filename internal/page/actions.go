package page

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/steer"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// Actions are what the page does with one request's token.
type Actions struct {
	// Steer pauses, resumes, cancels and answers restarts and (when not nil) fleets.
	Steer steer.Steerers
	// File plans and files new restarts; nil: the page files none.
	File Filer
}

// Filer plans a restart and files it for an agent to drive, as `nomad-restart run -detach`
// does. *engine.Engine satisfies it.
type Filer interface {
	Plan(ctx context.Context, req engine.Request) (*engine.Plan, error)
	Create(ctx context.Context, rec *restart.Record) error
}

// TokenHeader carries the user's Nomad ACL token from the page to the agent, as Nomad's
// own UI sends it to Nomad: never a cookie, never in a URL.
const TokenHeader = "X-Nomad-Token"

// maxActionBody bounds an action's request body (an answer is a few bytes).
const maxActionBody = 4 << 10

// actionVerbs are the actions the page offers on a restart or a fleet, named as the CLI
// names them.
var actionVerbs = []string{"pause", "resume", "cancel", "answer"}

// actionResult is the JSON answer to an action: Message on success, Error otherwise.
type actionResult struct {
	Message string `json:"message,omitempty"`
	Error   string `json:"error,omitempty"`
	Status  string `json:"status,omitempty"`
}

// kind is what the page steers: restarts or fleets. Both are steered through one
// steer.Steerer by the same handler; a kind says how the page finds its records and words
// what it did to them (restarts.go, fleets.go).
type kind struct {
	name steer.Kind
	// find reads one record by ID or unique prefix, as its head; notFound is the error
	// it fails with when no record has the ID.
	find     func(ctx context.Context, src Source, idOrPrefix string) (steer.Head, error)
	notFound error
	// idArg is what the CLI's steering commands take for the kind, for the page to name.
	idArg string
	// done is what the page says once an action's intent is stored, by action.
	done map[string]string
	// withStatus adds the record's status to the answer of an action (a restart's); a
	// fleet's answer says only what was done.
	withStatus bool
	// passesAnswers: a record that asks nothing passes an answer on to its running
	// restarts (a fleet), so whether an answer applies is not checked beforehand.
	passesAnswers bool
	// note says, on the record's page, what pause and cancel do when that needs saying;
	// answerHint is the answer field's placeholder.
	note, answerHint string
}

// findHead is a kind's find: the record read by get (the Source's method of the kind),
// as its head. Restarts and fleets differ only in the method and the head they make.
func findHead[R any](get func(Source, context.Context, string) (R, error), head func(R) steer.Head) func(context.Context, Source, string) (steer.Head, error) {
	return func(ctx context.Context, src Source, idOrPrefix string) (steer.Head, error) {
		rec, err := get(src, ctx, idOrPrefix)
		if err != nil {
			return steer.Head{}, err
		}
		return head(rec), nil
	}
}

// actionsView is the steering section of a record's page (the "actions" template).
type actionsView struct {
	Kind             steer.Kind
	ID               string
	Note, AnswerHint string
}

func (k *kind) actionsView(id string) actionsView {
	return actionsView{Kind: k.name, ID: id, Note: k.note, AnswerHint: k.answerHint}
}

// lookupFailure words, with its HTTP status, why the record id of kind k could not be read.
func (k *kind) lookupFailure(id string, err error) (int, string) {
	var amb *store.AmbiguousIDError
	switch {
	case errors.Is(err, ErrNoFleets):
		return http.StatusNotFound, err.Error()
	case errors.Is(err, k.notFound):
		return http.StatusNotFound, fmt.Sprintf("no %s with ID or prefix %q", k.name, id)
	case errors.As(err, &amb):
		return http.StatusBadRequest, err.Error()
	}
	return http.StatusBadGateway, fmt.Sprintf("reading the %s: %s", k.name, err)
}

// notSteered says that the page does not steer records of kind k, and what does.
func (k *kind) notSteered(verb string) string {
	return fmt.Sprintf("this agent does not steer %ss from its page; use `nomad-restart %s %s`", k.name, verb, k.idArg)
}

// lookup reads the record the request's path names with get, answering the failure itself
// (as plain text: the pages themselves).
func lookup[R any](w http.ResponseWriter, r *http.Request, k *kind, get func(context.Context, string) (R, error)) (R, bool) {
	id := r.PathValue("id")
	rec, err := get(r.Context(), id)
	if err != nil {
		status, msg := k.lookupFailure(id, err)
		http.Error(w, msg, status)
	}
	return rec, err == nil
}

// actionHandler performs one action on a record of kind k with the token of the request.
// It is reached only by POST, through http.CrossOriginProtection (cross-site requests are
// refused before it runs).
func (s *server) actionHandler(k *kind) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		verb := r.PathValue("action")
		if !slices.Contains(actionVerbs, verb) {
			writeResult(w, http.StatusNotFound, actionResult{Error: fmt.Sprintf("unknown action %q: the page offers pause, resume, cancel and answer", verb)})
			return
		}
		if s.actions == nil {
			writeResult(w, http.StatusNotImplemented, actionResult{Error: k.notSteered(verb)})
			return
		}
		var body struct{ Answer string }
		if err := decodeJSON(r.Body, maxActionBody, &body); err != nil && !errors.Is(err, io.EOF) {
			writeResult(w, http.StatusBadRequest, actionResult{Error: "the request body is not JSON like {\"Answer\": \"yes\"}: " + err.Error()})
			return
		}
		h, status, msg := k.target(r.Context(), s.src, r.PathValue("id"), verb, body.Answer)
		if msg != "" {
			writeResult(w, status, actionResult{Error: msg})
			return
		}
		acts, err := s.actions(r.Header.Get(TokenHeader))
		if err != nil {
			writeResult(w, http.StatusBadGateway, actionResult{Error: "connecting to Nomad with your token: " + err.Error()})
			return
		}
		st := acts.Steer.For(k.name)
		if st == nil {
			writeResult(w, http.StatusNotImplemented, actionResult{Error: k.notSteered(verb)})
			return
		}
		after, answered, err := perform(r.Context(), st, verb, h, body.Answer, "page of "+s.src.Holder())
		if err != nil {
			status, text := refusal(fmt.Sprintf("%s %s %s", verb, k.name, short(h.ID)), h.Namespace, err)
			s.log.Info("action from the page refused", string(k.name), h.ID, "namespace", h.Namespace, "action", verb, "status", status)
			writeResult(w, status, actionResult{Error: text})
			return
		}
		s.log.Info("action from the page", string(k.name), h.ID, "namespace", h.Namespace, "action", verb, "status", after.Status)
		s.src.Changed() // show the new intent at once, ahead of the next listing
		res := actionResult{Message: k.done[verb]}
		if len(answered) > 0 {
			shorts := make([]string, len(answered))
			for i, id := range answered {
				shorts[i] = short(id)
			}
			res.Message = "Answer given to restarts " + strings.Join(shorts, ", ") + "."
		}
		if k.withStatus {
			res.Status = string(after.Status)
		}
		writeResult(w, http.StatusOK, res)
	})
}

// target finds the record an action names and checks that the action applies to it; it
// returns an HTTP status and a message when it does not.
func (k *kind) target(ctx context.Context, src Source, id, verb, answer string) (steer.Head, int, string) {
	h, err := k.find(ctx, src, id)
	switch {
	case err != nil:
		status, msg := k.lookupFailure(id, err)
		return h, status, msg
	case h.Status.Terminal():
		return h, http.StatusConflict, fmt.Sprintf("%s %s has already ended (%s); there is nothing to %s", k.name, short(h.ID), h.Status, verb)
	case verb != "answer" || k.passesAnswers:
		return h, 0, ""
	case h.Status != restart.StatusWaiting || h.Question == nil:
		return h, http.StatusConflict, fmt.Sprintf("%s %s is not waiting for an answer (status: %s)", k.name, short(h.ID), h.Status)
	}
	if _, err := restart.ParseAnswer(h.Question, answer); err != nil {
		return h, http.StatusBadRequest, err.Error()
	}
	return h, 0, ""
}

// perform has st do verb to the record h heads, as by. It returns the record's head after
// it (h itself after an answer, which changes no status), and the restarts a fleet passed
// an answer on to.
func perform(ctx context.Context, st steer.Steerer, verb string, h steer.Head, answer, by string) (steer.Head, []string, error) {
	switch verb {
	case "pause":
		after, err := st.Pause(ctx, h.Namespace, h.ID, by)
		return after, nil, err
	case "resume":
		after, err := st.Resume(ctx, h.Namespace, h.ID, by)
		return after, nil, err
	case "cancel":
		after, err := st.Cancel(ctx, h.Namespace, h.ID, by)
		return after, nil, err
	}
	answered, err := st.Answer(ctx, h.Namespace, h.ID, answer, by)
	return h, answered.Restarts, err
}

// refusal words a refused action (what: "pause restart 65a7dc87") on a record of namespace
// for the page, with the HTTP status to answer. An ACL denial names the capability the
// token lacks and the rule that grants it.
func refusal(what, namespace string, err error) (int, string) {
	var (
		perm      *store.PermissionError
		canceling *steer.CancelingError
		ended     *steer.EndedError
		busy      *store.JobBusyError
	)
	switch {
	case errors.As(err, &perm):
		return http.StatusForbidden, fmt.Sprintf("Permission denied: your token may not %s. Nomad refused %q on variable %q in namespace %q; the token's ACL policy needs %s (the operator policy of deploy/operator-policy.hcl has it).",
			what, perm.Capability, perm.Path, perm.Namespace, variablesRule(perm.Namespace, perm.Prefix))
	case errors.Is(err, cluster.ErrPermissionDenied):
		return http.StatusForbidden, fmt.Sprintf("Permission denied: your token may not %s: %s", what, err)
	case errors.As(err, &canceling):
		return http.StatusConflict, canceling.Explain("a cancel from this page")
	case errors.As(err, &busy):
		return http.StatusConflict, fmt.Sprintf("%s; follow it at /restart/%s, or cancel it first", err, busy.RestartID)
	case errors.As(err, &ended), errors.Is(err, steer.ErrNoQuestion), errors.Is(err, restart.ErrInvalidAnswer):
		return http.StatusConflict, err.Error()
	case errors.Is(err, store.ErrFleetNotFound):
		return unreadable(what, steer.KindFleet, namespace)
	case errors.Is(err, store.ErrNotFound):
		return unreadable(what, steer.KindRestart, namespace)
	}
	return http.StatusBadGateway, fmt.Sprintf("%s: %s", what, err)
}

// unreadable refuses an action whose record the user's token cannot read, although the
// agent's token found it: Nomad lists only what a token may read (or it was deleted
// meanwhile).
func unreadable(what string, k steer.Kind, namespace string) (int, string) {
	return http.StatusForbidden, fmt.Sprintf("Permission denied: your token cannot %s: it cannot read the %s (set your ACL token under ACL Token, at the top of the page); the token's ACL policy needs %s (the operator policy of deploy/operator-policy.hcl has it).",
		what, k, variablesRule(namespace, ""))
}

// variablesRule is the ACL policy rule granting every capability on the records' variables
// in namespace, worded as store.PermissionError words it for the CLI.
func variablesRule(namespace, prefix string) string {
	if prefix == "" {
		prefix = "nomad-restart"
	}
	return fmt.Sprintf(`namespace %q { variables { path "%s/*" { capabilities = ["read", "list", "write", "destroy"] } } }`, namespace, prefix)
}

func writeResult(w http.ResponseWriter, status int, res actionResult) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // the page shows the text as text, never as HTML
	_ = enc.Encode(res)
}

// fileRequest is a new restart as the page's form and its JSON API file it: what
// `nomad-restart run -detach` takes, each option under its flag's name in CamelCase
// (restart.Options: "BatchSize": "25%", "OnError": "fail", "Groups": ["web"], ...),
// resolved by the same code as run's flags. An option given empty is refused, as on the
// command line; an unknown field is refused, naming it.
type fileRequest struct {
	Namespace string
	Job       string
	restart.Options
	// Gates, DrainUntil and BalancerRefresh are the repeatable -gate, -drain-until and
	// -balancer-refresh: one value per line of a string (the form's text areas), or a list.
	Gates           optionLines
	DrainUntil      optionLines
	BalancerRefresh optionLines
	// Expect lists the planned allocations the user reviewed, in order (filing only): the
	// restart is filed only if planning again gives the same. Absent: filed as planned
	// now, as `run -detach` files it.
	Expect *[]string
}

// optionLines reads a repeatable option's values as the form sends them (the lines of one
// string, read as a job's meta lists them) or as a list.
type optionLines []string

func (l *optionLines) UnmarshalJSON(b []byte) error {
	var text string
	if err := json.Unmarshal(b, &text); err == nil {
		*l = restart.SplitOptionLines(text)
		return nil
	}
	var list []string
	if err := json.Unmarshal(b, &list); err != nil {
		return errors.New(`give Gates, DrainUntil and BalancerRefresh as a list of strings, or as one string with a value per line`)
	}
	*l = list
	return nil
}

func (f fileRequest) request() (engine.Request, error) {
	req := engine.Request{Namespace: strings.TrimSpace(f.Namespace), Job: strings.TrimSpace(f.Job)}
	if req.Job == "" {
		return req, errors.New("give the job to restart (its ID or a unique prefix)")
	}
	if req.Namespace == "" {
		req.Namespace = "default"
	}
	opts := f.Options
	opts.Gates, opts.DrainUntil, opts.BalancerRefresh = f.Gates, f.DrainUntil, f.BalancerRefresh
	// Filed from the page, the restart is driven by an agent: its questions are answered
	// on the page or with `nomad-restart answer`, as for `run -detach`.
	res, err := opts.Resolve(restart.Detached)
	if err != nil {
		return req, err
	}
	req.Spec = res.Spec
	return req, nil
}

// planResult answers a plan: the plan drawn for review, and its allocations in order.
type planResult struct {
	HTML   string   `json:"html"`
	Allocs []string `json:"allocs"`
}

// filed answers a filing: the new restart's ID, for the page to open.
type filed struct {
	Message string `json:"message"`
	ID      string `json:"id"`
}

// servePlan plans a restart with the request's token and shows the plan; nothing is
// written (a dry run).
func (s *server) servePlan(w http.ResponseWriter, r *http.Request) {
	req, filer, ok := s.fileStart(w, r, nil)
	if !ok {
		return
	}
	p, ok := planWith(w, r.Context(), filer, req)
	if !ok {
		return
	}
	html, err := renderString(listPage, "plan", newPlanView(p))
	if err != nil {
		writeResult(w, http.StatusInternalServerError, actionResult{Error: err.Error()})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(planResult{HTML: html, Allocs: planAllocs(p)})
}

// serveFile plans again and, when the plan is the one the user reviewed, records the
// restart for an agent to drive (as `run -detach`), with the request's token.
func (s *server) serveFile(w http.ResponseWriter, r *http.Request) {
	var form fileRequest
	req, filer, ok := s.fileStart(w, r, &form)
	if !ok {
		return
	}
	p, ok := planWith(w, r.Context(), filer, req)
	if !ok {
		return
	}
	if form.Expect != nil && !slices.Equal(planAllocs(p), *form.Expect) {
		writeResult(w, http.StatusConflict, actionResult{Error: fmt.Sprintf("the allocations of job %q changed since you reviewed the plan: review the new plan and file it again", p.Record.JobID)})
		return
	}
	if err := filer.Create(r.Context(), p.Record); err != nil {
		status, text := refusal("file a restart of job "+p.Record.JobID, p.Record.Namespace, err)
		s.log.Info("restart from the page refused", "namespace", p.Record.Namespace, "job", p.Record.JobID, "status", status)
		writeResult(w, status, actionResult{Error: text})
		return
	}
	s.log.Info("restart filed from the page", "restart", p.Record.ID, "namespace", p.Record.Namespace, "job", p.Record.JobID)
	s.src.Changed()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(filed{ID: p.Record.ID,
		Message: fmt.Sprintf("Restart %s of job %q filed; an agent drives it.", short(p.Record.ID), p.Record.JobID)})
}

// fileStart decodes the form (into form when not nil) and builds what files it with the
// request's token, answering the error itself when it fails.
func (s *server) fileStart(w http.ResponseWriter, r *http.Request, form *fileRequest) (engine.Request, Filer, bool) {
	const notFiled = "this agent does not file restarts from its page; use `nomad-restart run -detach <job>`"
	if s.actions == nil {
		writeResult(w, http.StatusNotImplemented, actionResult{Error: notFiled})
		return engine.Request{}, nil, false
	}
	if form == nil {
		form = &fileRequest{}
	}
	if err := decodeFileRequest(r.Body, form); err != nil {
		writeResult(w, http.StatusBadRequest, actionResult{Error: err.Error()})
		return engine.Request{}, nil, false
	}
	req, err := form.request()
	if err != nil {
		writeResult(w, http.StatusBadRequest, actionResult{Error: err.Error()})
		return engine.Request{}, nil, false
	}
	acts, err := s.actions(r.Header.Get(TokenHeader))
	if err != nil {
		writeResult(w, http.StatusBadGateway, actionResult{Error: "connecting to Nomad with your token: " + err.Error()})
		return engine.Request{}, nil, false
	}
	if acts.File == nil {
		writeResult(w, http.StatusNotImplemented, actionResult{Error: notFiled})
		return engine.Request{}, nil, false
	}
	return req, acts.File, true
}

// NewRestart reads a new restart's JSON body as POST /restarts/plan and POST /restarts do,
// into the request they plan: the same defaults and checks as every other entry point.
func NewRestart(body io.Reader) (engine.Request, error) {
	var form fileRequest
	if err := decodeFileRequest(body, &form); err != nil {
		return engine.Request{}, err
	}
	return form.request()
}

// decodeFileRequest reads a new restart's JSON body into form, refusing what is not one:
// a field no option has (a typo would otherwise be dropped, and its option defaulted), a
// value of the wrong type, or trailing data.
func decodeFileRequest(body io.Reader, form *fileRequest) error {
	dec := json.NewDecoder(io.LimitReader(body, 64<<10))
	dec.DisallowUnknownFields()
	err := dec.Decode(form)
	if err == nil && dec.More() {
		err = errors.New("more than one JSON value")
	}
	if err == nil {
		return nil
	}
	if field, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return fmt.Errorf("the request has an unknown field %s: give the options of `nomad-restart run` under their names in CamelCase, such as \"BatchSize\", \"OnError\" or \"Groups\" (see docs/agent.md)", field)
	}
	return fmt.Errorf("the request body is not JSON of a restart like {\"Job\": \"web\", \"BatchSize\": \"2\"}: %v", err)
}

// planWith plans req with filer, answering the error itself when it fails.
func planWith(w http.ResponseWriter, ctx context.Context, filer Filer, req engine.Request) (*engine.Plan, bool) {
	p, err := filer.Plan(ctx, req)
	if err == nil {
		return p, true
	}
	status, text := http.StatusBadRequest, err.Error() // the job, the deployment, the groups: the form's to fix
	if errors.Is(err, cluster.ErrPermissionDenied) {
		status, text = http.StatusForbidden, "Permission denied: "+text
	}
	writeResult(w, status, actionResult{Error: text})
	return nil, false
}

func planAllocs(p *engine.Plan) []string {
	out := make([]string, 0, len(p.Record.Allocs))
	for _, a := range p.Record.Allocs {
		out = append(out, a.ID)
	}
	return out
}

// planView is a plan as the page shows it for review.
type planView struct {
	Rec      *restart.Record
	Batches  [][]restart.AllocProgress
	Skipped  int
	Batch    string
	Warnings []string // where requests will be lost whatever the restart does
}

func newPlanView(p *engine.Plan) planView {
	v := planView{Rec: p.Record, Skipped: len(p.Skipped), Batch: restart.FormatBatchSizes(p.Record.Spec.BatchSizes), Warnings: p.Warnings}
	for _, al := range p.Record.Allocs {
		for len(v.Batches) < al.Batch {
			v.Batches = append(v.Batches, nil)
		}
		v.Batches[al.Batch-1] = append(v.Batches[al.Batch-1], al)
	}
	return v
}
